"""benchmarks/branch_update.py on the tiny model: micro-batches by group and by length give one gradient, and both
are timed. No timing is asserted (tests are not timers)."""

import json

from benchmark_scripts import load_benchmark


def test_micro_batches_by_group_give_the_gradient_of_micro_batches_by_length(tiny_model_dir, tmp_path):
    module = load_benchmark("branch_update")
    out = tmp_path / "branch_update.json"
    module.main(["--model", str(tiny_model_dir), "--groups", "3", "--size", "3", "--out", str(out)])
    result = json.loads(out.read_text())
    assert set(result["seconds"]) == {"by_length", "by_group"} and all(s > 0 for s in result["seconds"].values())
    assert result["gradient_norm"] > 0 and result["gradient_relative_difference"] < 1e-2
    assert result["trained_tokens"] < result["tokens"] and result["precision"]["cpu"]["model"]
