"""benchmarks/eval_pass.py on the tiny model: every arm runs `sead eval` end to end, and turning packing off
(bit-equal in bf16, with the same batches) plays the same dialogues. No timing is asserted."""

import json

from benchmark_scripts import load_benchmark


def test_every_arm_plays_the_pass_and_the_figures_are_written(tiny_model_dir, tmp_path):
    module = load_benchmark("eval_pass")
    out = tmp_path / "eval_pass.json"
    overrides = ["eval.limit=2", "eval.max_turns=2", "eval.max_new_tokens=8", f"eval.testset_dir={tmp_path}"]
    module.main([str(tiny_model_dir), *overrides, "--repeats", "1", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["dialogues"] == 2 and result["agent_tokens"]["fast"][0] > 0 and result["cpu"]["model"]
    assert set(result["seconds"]) == {"fast", "no_packing"}
    assert all(len(t) == 1 and t[0] > 0 for t in result["seconds"].values())
    assert result["share_identical_to_fast"]["fast"] == [1.0] and result["share_identical_to_fast"]["no_packing"] == [
        1.0
    ]
    assert set(result["fast_speedup_over"]) == set(result["fast_tok_s_over"]) == {"no_packing"}
    assert result["agent_tokens"]["no_packing"] == result["agent_tokens"]["fast"]
