"""benchmarks/packed_weights.py on the tiny model: both arms run `sead eval` end to end and play the same tokens
and log-probs (the script refuses otherwise). No timing is asserted."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "packed_weights.py"


def test_both_arms_play_the_same_dialogues_and_the_figures_are_written(tiny_model_dir, tmp_path):
    spec = importlib.util.spec_from_file_location("packed_weights_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "packed.json"
    overrides = ["eval.limit=2", "eval.max_turns=2", "eval.max_new_tokens=8", f"eval.testset_dir={tmp_path}"]
    module.main([str(tiny_model_dir), *overrides, "--repeats", "1", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["dialogues"] == 2 and result["agent_tokens"] > 0 and result["same_dialogues"]
    assert set(result["seconds"]) == {"packed", "plain"} and all(len(t) == 1 for t in result["seconds"].values())
    assert result["cpu"]["model"] and result["speedup"] > 0
