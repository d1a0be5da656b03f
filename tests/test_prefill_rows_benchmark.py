"""benchmarks/prefill_rows.py on the tiny model: each case runs in its own process and does the work it names (a
branched group's alike prompts go through the model once per prompt). No timing is asserted (tests are not
timers)."""

import json

from benchmark_scripts import load_benchmark


def test_each_case_runs_the_rows_it_names_and_the_record_names_the_cpu(tiny_model_dir, tmp_path):
    out = tmp_path / "prefill_rows.json"
    load_benchmark("prefill_rows").main(
        ["--model", str(tiny_model_dir), "--rows", "6", "--group", "3", "--words", "16", "--out", str(out)]
    )
    record = json.loads(out.read_text())
    cases = record["cases"]
    assert {c: cases[c]["prompt_rows_run"] for c in cases} == {"distinct": 6, "alike": 2, "cascade": 6, "all_scores": 6}
    paths = {c: (cases[c]["tiled_prefill"], cases[c]["score_budget_lifted"]) for c in cases}
    assert paths == {
        "distinct": (True, False),
        "alike": (True, False),
        "cascade": (False, False),
        "all_scores": (False, True),
    }
    assert all(c["seconds"] > 0 and c["peak_rise_gb"] >= 0 and c["new_tokens_per_row"] > 1 for c in cases.values())
    assert record["cpu"]["model"] and set(record["ratios"]) == {
        "distinct_over_alike_seconds",
        "cascade_over_tiled_seconds",
        "cascade_over_tiled_peak_rise",
        "all_scores_over_sliced_peak_rise",
        "all_scores_over_sliced_seconds",
    }
