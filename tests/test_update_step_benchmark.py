"""benchmarks/update_step.py on the tiny model: both ways of getting the old log-probs end at the same weights,
micro-batches by branched group and by length give one gradient, so do entropies kept in the graph and logged as
values, and the LM head's log-probs over the full logits and a slice at a time; every way is timed. No timing is
asserted (tests are not timers)."""

import json

import pytest
from benchmark_scripts import load_benchmark


def test_the_update_with_and_without_the_old_log_prob_pass_ends_at_the_same_weights(tiny_model_dir, tmp_path):
    module = load_benchmark("update_step")
    out = tmp_path / "update_step.json"
    module.main(["--model", str(tiny_model_dir), "--sequences", "4", "--repeats", "1", "--out", str(out)])
    result = json.loads(out.read_text())
    assert set(result["seconds"]) == {"old_pass", "skipped"} and all(s > 0 for s in result["seconds"].values())
    assert result["max_weight_change"] > 1e-7 and result["max_weight_difference"] < 1e-6
    assert result["precision"]["master"] == "float32" and result["precision"]["cpu"]["model"]


@pytest.mark.parametrize(
    "case, ways",
    [
        ("branched", {"by_length", "by_group"}),
        ("entropy", {"in_graph", "values_only"}),
        ("head", {"full_logits", "sliced"}),
    ],
)
def test_both_ways_on_branched_groups_give_one_gradient(case, ways, tiny_model_dir, tmp_path):
    """branched: micro-batches by branched group and by length; entropy: the logged entropies in the graph (times
    zero in the loss) and as values only; head: the LM head's log-probs over the full logits and a slice at a time."""
    module = load_benchmark("update_step")
    out = tmp_path / f"{case}.json"
    args = ["--case", case, "--model", str(tiny_model_dir), "--groups", "3", "--size", "3", "--repeats", "1"]
    module.main([*args, "--out", str(out)])
    result = json.loads(out.read_text())
    assert set(result["seconds"]) == ways and all(s > 0 for s in result["seconds"].values())
    assert result["sequences"] == 9 and result["trained_tokens"] < result["tokens"]
    assert result["max_weight_change"] > 1e-7 and result["gradient_relative_difference"] < 1e-2
    if case == "entropy":  # the same micro-batches, the same gradient but for a term that is exactly zero
        assert result["gradient_relative_difference"] < 1e-6
    if case == "head":  # the same bf16 logits; fp32 sums in another order, rounded to bf16 for the matmuls
        assert result["gradient_relative_difference"] < 1e-3
    assert set(result["page_faults"]) == ways and set(result["system_cpu_s"]) == ways
