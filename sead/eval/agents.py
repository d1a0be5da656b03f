"""The agent under evaluation, built from a ModelSpec: a transformers model, an OpenAI-compatible endpoint,
or a scripted agent. Every kind is an AgentPolicy, so evaluation runs the training episode runner unchanged."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from sead.dialogue.agent import AgentPolicy
from sead.errors import SEADInputError
from sead.eval.model_spec import ModelSpec
from sead.policy.openai_endpoint import OpenAIAgent, check_endpoint
from sead.policy.settings import SamplingConfig
from sead.scenario import Scenario


@dataclass
class EvalAgent:
    policy: AgentPolicy
    tokenizer: object
    params: int | None  # parameter count, for the comparison table (None: unknown, e.g. an API)


def build_agent(
    spec: ModelSpec,
    scenario: Scenario,
    *,
    sampling: SamplingConfig,
    max_new_tokens: int,
    max_batch: int,
    device: str,
    tokenizer_path: str | None,
    api_key_env: str,
    backend: str = "transformers",
    cuda_graph: bool = True,
) -> EvalAgent:
    """backend: transformers (CPU or GPU) | vllm (offline engine, GPU) for local models."""
    if backend not in ("transformers", "vllm"):
        raise SEADInputError(f"unknown agent backend {backend!r}; choose transformers or vllm", field="eval.backend")
    if spec.kind == "hf" and backend == "vllm":
        from transformers import AutoTokenizer

        from sead.policy.vllm_engine import VLLMPolicy

        tok = AutoTokenizer.from_pretrained(spec.path)
        return EvalAgent(VLLMPolicy(str(spec.path), tok, sampling, max_batch=max_batch), tok, None)
    if spec.kind == "hf":
        from sead.models.loading import ModelConfig, load_model
        from sead.policy.hf import HFPolicy

        model, tok, label = load_model(ModelConfig(preset="path", path=str(spec.path), device=_device(device)))
        model.eval().requires_grad_(False)
        return EvalAgent(
            HFPolicy(model, tok, sampling, max_batch=max_batch, label=label, cuda_graph=cuda_graph),
            tok,
            sum(p.numel() for p in model.parameters()),
        )
    tok = _tokenizer(tokenizer_path)
    if spec.kind == "openai":
        key = os.environ.get(api_key_env) or "EMPTY"
        asyncio.run(check_endpoint(spec.url, spec.model, key))
        return EvalAgent(
            OpenAIAgent(tok, model=spec.model, url=spec.url, sampling=sampling, max_tokens=max_new_tokens, api_key=key),
            tok,
            None,
        )
    from sead.policy.registry import SCRIPTED_AGENTS

    return EvalAgent(SCRIPTED_AGENTS[spec.model](scenario, tok), tok, 0)


def _device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _tokenizer(path: str | None):
    """Agents without their own tokenizer are transcribed with this one (SmolLM2's unless set)."""
    if path:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)
    from sead.models.smollm import load_tokenizer

    return load_tokenizer()
