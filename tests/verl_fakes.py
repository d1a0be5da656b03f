"""Stand-ins for the GPU parts of a verl run, shared by the verl tests.

`ChatMLServer` plays verl's server client token-in/token-out: it decodes the prompt ids it is sent, reads the
ChatML turns back out of them, lets SEAD's scripted reference agent answer, and returns that answer's ids. A
loop that sent wrong prompt ids would therefore get a different dialogue, not just different bookkeeping.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from sead.agents import ReferenceAgent
from sead.config import build_scenario, load_config

TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", re.S)
FAKE_LOGPROB = -0.5


@dataclass
class FakeTokenOutput:
    token_ids: list[int]
    log_probs: list[float] | None


class ChatMLServer:
    def __init__(self, scenario, tokenizer, output_type=FakeTokenOutput):
        self.agent, self.tokenizer, self.output_type = ReferenceAgent(scenario, tokenizer), tokenizer, output_type
        self.requests: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        self.requests.append({"request_id": request_id, "prompt_ids": list(prompt_ids),
                              "sampling_params": dict(sampling_params)})
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        messages = [{"role": r, "content": c} for r, c in TURN.findall(text)]
        reply = await self.agent.reply(messages, seed=0)
        limit = sampling_params["max_tokens"]
        ids = self.tokenizer.encode(reply, add_special_tokens=False)[: limit - 1] + [self.tokenizer.eos_token_id]
        return self.output_type(token_ids=ids, log_probs=[FAKE_LOGPROB] * len(ids))


def tiny_model_dir(root: Path) -> Path:
    """An HF folder with the SmolLM2 tokenizer and a tiny Llama config: what verl reads from model.path."""
    from transformers import LlamaConfig

    from sead.models.smollm import load_tokenizer

    out = root / "tiny-model"
    if not (out / "config.json").exists():
        tok = load_tokenizer()
        LlamaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    num_key_value_heads=1, intermediate_size=64, bos_token_id=tok.bos_token_id,
                    eos_token_id=tok.eos_token_id, architectures=["LlamaForCausalLM"]).save_pretrained(out)
        tok.save_pretrained(out)
    return out


SMALL_DIALOGUES = ["dialogue.max_turns=5", "dialogue.max_new_tokens=200", "dialogue.max_total_tokens=2400",
                   "dialogue.max_context_tokens=8192", "verl.max_prompt_length=2048",
                   "verl.max_response_length=3072"]


def verl_run_config(tmp: Path, *extra: str):
    """A backend=verl config on the scripted user, its resolved copy written where the agent loop reads it."""
    model = tiny_model_dir(tmp)
    cfg = load_config(["preset=gpu1", "usersim=scripted", f"model.path={model}", f"run_dir={tmp / 'run'}",
                       *SMALL_DIALOGUES, *extra])
    (tmp / "run").mkdir(parents=True, exist_ok=True)
    (tmp / "run" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    return cfg, build_scenario(cfg)
