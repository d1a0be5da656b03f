"""The agent under evaluation, built from a ModelSpec: a transformers model, an OpenAI-compatible endpoint,
or a scripted agent. Every kind is an AgentPolicy, so evaluation runs the training episode runner unchanged."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

import httpx

from sead.dialogue.agent import AgentPolicy, TextAgent
from sead.errors import SEADInputError
from sead.eval.model_spec import ModelSpec
from sead.scenario import Scenario
from sead.trainer.policy import SamplingConfig

HEALTH_TIMEOUT_S = 10.0


@dataclass
class EvalAgent:
    policy: AgentPolicy
    tokenizer: object
    params: int | None  # parameter count, for the comparison table (None: unknown, e.g. an API)


class OpenAIAgent(TextAgent):
    """An API baseline. Token ids for the transcript are the evaluation tokenizer's encoding of its text;
    what the endpoint itself bills is summed in `usage`."""

    name = "openai"

    def __init__(
        self,
        tokenizer,
        *,
        model: str,
        url: str,
        sampling: SamplingConfig,
        max_tokens: int,
        api_key: str,
        timeout: float = 120.0,
        retries: int = 3,
    ):
        import openai

        super().__init__(tokenizer)
        self.model, self.url, self.sampling, self.max_tokens = model, url, sampling, max_tokens
        self._api_key = api_key
        # The SDK's own retries (exponential backoff) cover rate limits and dropped connections of an API.
        self._client = openai.AsyncOpenAI(
            base_url=url,
            api_key=api_key,
            max_retries=retries,
            timeout=timeout,
            http_client=openai.DefaultAioHttpClient(timeout=timeout),
        )
        self.usage = {"prompt": 0, "completion": 0}

    async def reply(self, messages: list[dict], seed: int) -> str:
        s = self.sampling
        out = await self._client.chat.completions.create(
            model=self.model,
            messages=messages,
            temperature=s.temperature,
            top_p=s.top_p,
            max_tokens=self.max_tokens,
            seed=seed % 2**31,
        )
        if out.usage:
            self.usage["prompt"] += out.usage.prompt_tokens
            self.usage["completion"] += out.usage.completion_tokens
        return (out.choices[0].message.content or "") if out.choices else ""

    def identity(self) -> dict:
        return {
            "name": self.name,
            "model": self.model,
            "url": self.url,
            "sampling": vars(self.sampling),
            "max_tokens": self.max_tokens,
        }

    async def aclose(self) -> None:
        await self._client.close()


async def check_endpoint(url: str, model: str, api_key: str) -> None:
    """Fail before any dialogue when the endpoint is down or does not serve the model."""
    from sead.usersim.openai_sim import probe_endpoint

    async with httpx.AsyncClient(timeout=HEALTH_TIMEOUT_S, headers={"Authorization": f"Bearer {api_key}"}) as http:
        problem = await probe_endpoint(
            http, url, model, role="agent endpoint", hint="check the MODEL part of openai:MODEL@URL"
        )
    if problem:
        raise SEADInputError(problem)


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
) -> EvalAgent:
    """backend: transformers (CPU or GPU) | vllm (offline engine, GPU) for local models."""
    if backend not in ("transformers", "vllm"):
        raise SEADInputError(f"unknown agent backend {backend!r}; choose transformers or vllm", field="eval.backend")
    if spec.kind == "hf" and backend == "vllm":
        from transformers import AutoTokenizer

        from sead.eval.vllm_agent import VLLMPolicy

        tok = AutoTokenizer.from_pretrained(spec.path)
        return EvalAgent(VLLMPolicy(str(spec.path), tok, sampling, max_batch=max_batch), tok, None)
    if spec.kind == "hf":
        from sead.models.loading import ModelConfig, load_model
        from sead.trainer.policy import HFPolicy

        model, tok, label = load_model(ModelConfig(preset="path", path=str(spec.path), device=_device(device)))
        model.eval().requires_grad_(False)
        return EvalAgent(
            HFPolicy(model, tok, sampling, max_batch=max_batch, label=label),
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
    from sead.agents import SCRIPTED_AGENTS

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
