"""`eval:` in configs/sead.yaml, one field per key (checked: an unknown key or a wrong type names the field)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sead.config import MAX_SEED, number, one_of
from sead.policy.settings import SamplingConfig


@dataclass
class EvalConfig:
    testset: str | None = None  # profile file (parquet/jsonl); None: the seeded default set, made once
    testset_size: int = number(1000, ge=1, le=10_000_000)  # profiles in the default set (`sead testset make`)
    testset_seed: int = number(20260601, ge=0, le=MAX_SEED)  # the seed the default set is drawn with
    testset_dir: str = "outputs/testsets"  # where the default set is written, named by scenario, size and seed
    limit: int | None = number(None, ge=1, le=10_000_000)  # only the first N profiles of the test set (quick CPU runs)
    trials: int = number(1, ge=1, le=1000)  # k dialogues per profile; pass^k is reported when k > 1
    seed: int = number(0, ge=0, le=MAX_SEED)  # seeds each dialogue's sampling and user draws, by profile and trial
    # The original evaluation's decoding, frozen into every results.json.
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=0.7, top_p=0.9, top_k=0))
    max_new_tokens: int = number(512, ge=1, le=1_000_000)  # per agent turn
    max_turns: int | None = number(None, ge=1, le=1000)  # None: dialogue.max_turns (training's limit)
    max_batch: int = number(32, ge=1, le=65_536)  # rows per batched generation call (local models)
    backend: str = one_of("transformers", "vllm")  # local models: transformers (CPU/GPU) | vllm (offline, GPU)
    device: str = "auto"  # transformers backend: auto | cpu | cuda
    cuda_graph: bool = True  # transformers backend on a GPU: each generation call's decoding as one CUDA graph
    out_dir: str = "outputs/eval"  # one folder per model here; several models also get comparison.md / .html
    fresh: bool = False  # discard an earlier evaluation in the same folder instead of resuming
    tokenizer: str | None = None  # transcribes agents without one (API, scripted); default SmolLM2's
    api_key_env: str = "OPENAI_API_KEY"  # the environment variable holding an openai: agent's API key
    # Prices per million tokens, for the cost column: {agent: {prompt: .., completion: ..}, user: {...}}.
    prices: dict = field(
        default_factory=lambda: {
            "agent": {"prompt": 0.0, "completion": 0.0},
            "user": {"prompt": 0.0, "completion": 0.0},
        }
    )
