"""benchmarks/small_rows_linear.py at small shapes: both arms timed on the same inputs, the bandwidth measured in the
same run, each arm's error against fp64 recorded, the kernel's no larger than oneDNN's, whole decoding steps timed
fused, with the kernel's linears and with oneDNN's. No timing is asserted."""

import json

import pytest
from benchmark_scripts import load_benchmark

from sead.models import decode_kernel


def test_the_record_holds_both_arms_for_every_row_count(tmp_path):
    out = tmp_path / "small_rows_linear.json"
    argv = ["--rows", "1", "3", "--hidden", "64", "--qkv", "96", "--inner", "80", "--vocab", "300", "--layers", "2"]
    argv += ["--repeats", "1", "--bandwidth-mib", "8", "--step-rows", "2", "--step-tokens", "3", "--model", "tiny"]
    argv += ["--out", str(out)]
    bench = load_benchmark("small_rows_linear")
    if not decode_kernel.cpu_supports():
        with pytest.raises(SystemExit, match="AVX512-BF16"):
            bench.main(argv)
        return
    record = bench.main(argv)
    assert json.loads(out.read_text()) == json.loads(json.dumps(record))
    assert record["cpu"]["model"] and out.with_suffix(".png").stat().st_size > 0 and record["bandwidth_gb_s"] > 0
    assert [c["rows"] for c in record["cases"]] == [1, 3]
    assert record["weight_bytes"] == 2 * (2 * (96 * 64 + 64 * 64 + 160 * 64 + 64 * 80) + 300 * 64)
    for case in record["cases"]:
        assert all(len(t) == 1 and t[0] > 0 for t in case["times_s"].values())
        err = case["max_abs_error_vs_fp64"]
        assert err["kernel"] <= 1.05 * err["onednn"] + 1e-6
    (step,) = record["steps"]  # whole decoding steps of the tiny model, every arm
    assert step["rows"] == 2 and set(step["ms_all"]) == {"fused", "kernel", "onednn"}
    assert all(len(t) == 1 and t[0] > 0 for t in step["ms_all"].values())
