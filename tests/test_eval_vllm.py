"""The vLLM agent backend against a stand-in `vllm` module (no GPU, no vLLM here): what it asks vLLM for,
and how it turns vLLM's outputs into the runner's sampled ids. Keyword names are checked against the
SamplingParams fields of the pinned vLLM (0.24, requirements_vllm.txt)."""

import sys
import types
from dataclasses import dataclass

import pytest

from sead.dialogue.agent import AgentRequest
from sead.errors import SEADInputError
from sead.policy.settings import SamplingConfig

# Fields of vllm.SamplingParams that every release since 0.6 accepts, 0.24 included.
SAMPLING_FIELDS = {
    "n",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "stop_token_ids",
    "max_tokens",
    "min_tokens",
    "logprobs",
    "prompt_logprobs",
    "skip_special_tokens",
    "ignore_eos",
}


@dataclass
class Logprob:
    logprob: float


class FakeLLM:
    def __init__(self, **kwargs):
        self.init = kwargs
        self.calls = []

    def generate(self, prompts, params, use_tqdm=True):
        self.calls.append((prompts, params))
        outs = []
        for i, (prompt, _p) in enumerate(zip(prompts, params)):
            ids = [prompt["prompt_token_ids"][-1] + 1, 7]
            stopped = i % 2 == 0
            completion = types.SimpleNamespace(
                token_ids=ids,
                finish_reason="stop" if stopped else "length",
                logprobs=[{t: Logprob(-0.5 * (k + 1))} for k, t in enumerate(ids)],
            )
            outs.append(types.SimpleNamespace(outputs=[completion]))
        return outs


class FakeSamplingParams:
    def __init__(self, **kwargs):
        unknown = set(kwargs) - SAMPLING_FIELDS
        assert not unknown, f"not a vLLM SamplingParams field: {unknown}"
        self.kwargs = kwargs


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.SimpleNamespace(LLM=FakeLLM, SamplingParams=FakeSamplingParams)
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def test_vllm_policy_keeps_sampled_ids_and_closes_stopped_turns(fake_vllm, smollm_tokenizer):
    from sead.policy.vllm_engine import VLLMPolicy

    policy = VLLMPolicy(
        "/models/x", smollm_tokenizer, SamplingConfig(temperature=0.7, top_p=0.9, top_k=0), tensor_parallel_size=2
    )
    assert policy.llm.init["model"] == "/models/x" and policy.llm.init["tensor_parallel_size"] == 2
    reqs = [AgentRequest([1, 2, 3], [], 40, seed=11), AgentRequest([5, 6], [], 20, seed=12)]
    stopped, cut = policy.sample(reqs)
    eos = smollm_tokenizer.eos_token_id
    assert stopped.token_ids == [4, 7, eos] and stopped.logprobs == [-0.5, -1.0, 0.0]  # stop token appended
    assert cut.token_ids == [7, 7] and cut.logprobs == [-0.5, -1.0]  # hit max_tokens: no end-of-turn
    prompts, params = policy.llm.calls[0]
    assert prompts == [{"prompt_token_ids": [1, 2, 3]}, {"prompt_token_ids": [5, 6]}]
    first = params[0].kwargs
    assert first["top_k"] == -1 and first["seed"] == 11 and first["max_tokens"] == 40 and first["logprobs"] == 0
    assert first["stop_token_ids"] == [eos] and params[1].kwargs["seed"] == 12


def test_vllm_backend_without_vllm_says_how_to_get_it(monkeypatch, smollm_tokenizer):
    from sead.policy.vllm_engine import VLLMPolicy

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(SEADInputError, match="requirements_vllm.txt"):
        VLLMPolicy("/models/x", smollm_tokenizer, SamplingConfig())
