"""`eval:` in configs/sead.yaml, one field per key (checked: an unknown key or a wrong type names the field)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sead.trainer.policy import SamplingConfig


@dataclass
class EvalConfig:
    testset: str | None = None          # profile file (parquet/jsonl); None: the seeded default set, made once
    testset_size: int = 1000
    testset_seed: int = 20260601
    testset_dir: str = "outputs/testsets"
    limit: int | None = None            # only the first N profiles of the test set (quick CPU runs)
    trials: int = 1                     # k dialogues per profile; pass^k is reported when k > 1
    seed: int = 0
    # The original evaluation's decoding, frozen into every results.json.
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=0.7, top_p=0.9, top_k=0))
    max_new_tokens: int = 512
    max_batch: int = 32
    backend: str = "transformers"       # local models: transformers (CPU/GPU) | vllm (offline engine, GPU)
    device: str = "auto"                # transformers backend: auto | cpu | cuda
    out_dir: str = "outputs/eval"
    fresh: bool = False                 # discard an earlier evaluation in the same folder instead of resuming
    tokenizer: str | None = None        # transcribes agents without one (API, scripted); default SmolLM2's
    api_key_env: str = "OPENAI_API_KEY"
    # Prices per million tokens, for the cost column: {agent: {prompt: .., completion: ..}, user: {...}}.
    prices: dict = field(default_factory=dict)
