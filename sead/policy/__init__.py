"""Agents that generate, for every consumer (training, validation, evaluation, the verl backend):

- `hf`: a local transformers model with batched sampling and its caches (`sampling`, `turn_cache`);
- `vllm_engine`: vLLM's offline engine (GPU machines);
- `openai_endpoint`: any OpenAI-compatible chat endpoint;
- `scripted`: agents with no model, named in `registry.SCRIPTED_AGENTS` (the adversaries a user simulator is
  tested against are in `sead.testing.adversarial_agents`).

Import the module you need: this package imports nothing heavy, and `settings` is a config leaf.
"""
