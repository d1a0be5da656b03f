"""benchmarks/roofline.py end to end in its --quick mode on the tiny model: every figure is there, positive, and
set against a finite roofline. No timing is asserted (tests are not timers)."""

import json
import math

from benchmark_scripts import load_benchmark


def positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_quick_run_reports_every_figure_against_its_roofline(tiny_model_dir, tmp_path):
    out = tmp_path / "roofline.json"
    load_benchmark("roofline").main(["--quick", "--model", str(tiny_model_dir), "--out", str(out)])
    result = json.loads(out.read_text())
    assert out.with_suffix(".png").stat().st_size > 0

    machine = result["machine"]
    assert machine["cpu"]["model"] and set(machine["cpu"]["flags"]) >= {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}
    assert positive(machine["bandwidth_gb_s"]) and machine["threads"] >= 1
    assert set(machine["matmul_gflop_s"]) == {"float32", "bfloat16"}
    assert all(positive(v) for v in machine["matmul_gflop_s"].values())
    assert machine["uptime_before"] and machine["uptime_after"]

    assert sorted((r["dtype"], r["rows"]) for r in result["runs"]) == [
        ("bfloat16", 1),
        ("bfloat16", 8),
        ("float32", 1),
        ("float32", 8),
    ]
    new = result["settings"]["new_tokens"]
    for run in result["runs"]:
        for name in ("sead", "sead_unpacked", "generate"):
            decode, prefill = run["decode"][name], run["prefill"][name]
            assert decode["new_tokens"] == run["rows"] * new, (run["dtype"], run["rows"], name)  # no early stop
            assert 0 < decode["in_forward"] <= 1 and positive(prefill["s"])  # the decode steps lie inside the decode
            assert positive(decode["tok_s"]) and positive(decode["of_roofline"])
            assert positive(prefill["prompt_tok_s"]) and positive(prefill["of_roofline"])
        for phase in ("decode", "prefill"):
            assert positive(run[phase]["roofline"]["tok_s"]) and run[phase]["roofline"]["bound"] in {
                "memory",
                "compute",
            }
        assert run["prompt_tokens_mean"] > 1000  # the real SOP prompt, not a stand-in

    assert sorted(t["dtype"] for t in result["training"]) == ["bfloat16", "float32"]
    for t in result["training"]:
        assert positive(t["tok_s"]) and positive(t["gflop_s"]) and positive(t["of_roofline"])
        assert t["agent_tokens"] > 0 and t["shared_prompt"] > 1000
