"""benchmarks/decode_attention.py at small shapes: both arms timed on the same inputs, each arm's error against fp64
recorded, the kernel's no larger than the matmuls'. No timing is asserted."""

import json

import pytest
from benchmark_scripts import load_benchmark

from sead.models import decode_kernel


def test_the_record_holds_both_arms_for_every_case(tmp_path):
    out = tmp_path / "decode_attention.json"
    argv = ["--rows", "2", "5", "--own", "40", "--prefix", "20", "--reserve", "7", "--layers", "2", "--repeats", "1"]
    bench = load_benchmark("decode_attention")
    if not decode_kernel.cpu_supports():
        with pytest.raises(SystemExit, match="AVX512-BF16"):
            bench.main([*argv, "--out", str(out)])
        return
    record = bench.main([*argv, "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(record))
    assert record["cpu"]["model"] and out.with_suffix(".png").stat().st_size > 0
    assert [(c["rows"], c["own"]) for c in record["cases"]] == [(2, 40), (5, 40)]
    for case in record["cases"]:
        assert all(len(t) == 1 and t[0] > 0 for t in case["times_s"].values())
        err = case["max_abs_error_vs_fp64"]
        assert err["kernel"] <= 1.05 * err["matmuls"] + 1e-3 and err["kernel"] < 2e-2
