"""benchmarks/nucleus_sort.py on the CPU, small: both ways of finding a flat row's nucleus draw the same tokens,
and the record holds every figure. No timing is asserted (tests are not timers)."""

import json

from benchmark_scripts import load_benchmark

from sead.policy import sampling


def test_both_ways_draw_the_same_tokens_and_the_record_holds_them(tmp_path):
    out = tmp_path / "nucleus_sort.json"
    routed = sampling._nucleus_mask
    load_benchmark("nucleus_sort").main(
        ["--device", "cpu", "--rows", "2", "5", "--repeats", "2", "--vocab", "3000", "--out", str(out)]
    )
    assert sampling._nucleus_mask is routed  # the policy's own routing is back
    record = json.loads(out.read_text())
    assert [r["rows"] for r in record["runs"]] == [2, 5] and record["device"] == "cpu"
    for run in record["runs"]:
        assert run["same_tokens"] is True
        assert all(run["ms"][w] > 0 for w in ("binned", "sorted")) and run["binned_over_sorted"] > 0
    assert record["device_name"] and out.with_suffix(".png").stat().st_size > 0


def test_the_rows_it_measures_are_flat():
    """At the default scale, every row's 0.95 nucleus is far wider than the candidate window (the wide path)."""
    import torch

    logits = torch.randn(4, 49_152, generator=torch.Generator().manual_seed(4)) * 0.5
    widths = sampling._binned_nucleus_mask(torch.log_softmax(logits, -1), 0.95)[1].sum(-1)
    assert (widths > sampling.CANDIDATES * 10).all()
