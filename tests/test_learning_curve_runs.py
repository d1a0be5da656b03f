"""benchmarks/learning_curve_runs.py: several training runs read as one verdict on the recipe, against figures worked
out by hand, and refused where the runs do not pose one task."""

import json
import statistics

import pytest
from benchmark_scripts import load_benchmark

TARGET = {"min_gain_points": 10.0, "max_p": 0.01, "max_rl_minutes": 60.0}
USER = {"name": "scripted", "reading": 6, "agent_reading": 2}


@pytest.fixture(scope="module")
def runs():
    return load_benchmark("learning_curve_runs")


def results(tmp_path, seed, gain, p, minutes, curriculum=None, **changes):
    """A results file as learning_curve.py writes it, reduced to what the runs are read by."""
    met = gain >= 10 and p < 0.01 and minutes <= 60
    arms = {
        "warmup_only": {"CR": 0.235, "CAR": {"mean": 0.53}, "user_simulator": USER},
        "grpo_fixed": {"CR": 0.235 + gain / 100, "CAR": {"mean": 0.7}, "user_simulator": USER},
    }
    data = {
        "held_out": {"profiles": 200, "trials": 1, "seed": 618033},
        "warmup": {"imitated": 117, "nll_last": 0.0216},
        "arms": arms,
        "config": {"seed": seed},
        "target": {**TARGET, "gain_points": gain, "p_mcnemar": p, "rl_minutes": minutes, "met": met},
        "curriculum": curriculum and {"gain_points": curriculum, "p_mcnemar": 0.5},
        "phases": {"grpo_fixed": {"cpu": "AMD EPYC"}},
    }
    for key, value in changes.items():
        data[key] = value
    path = tmp_path / f"seed{seed}.json"
    path.write_text(json.dumps(data))
    return path


def test_each_run_and_the_mean_with_its_t_interval_over_runs(runs, tmp_path):
    paths = [
        results(tmp_path, 2, 2.0, 0.56, 55.2),
        results(tmp_path, 0, 15.0, 2e-7, 47.0, curriculum=-3.5),
        results(tmp_path, 1, 11.0, 3e-5, 49.1),
        results(tmp_path, 3, 16.0, 5e-10, 61.0),  # the gain and p, not the time limit
    ]
    report = runs.collect(paths)
    assert [r["run_seed"] for r in report["runs"]] == [0, 1, 2, 3]
    assert [r["met"] for r in report["runs"]] == [True, True, False, False]
    s = report["summary"]
    gains = [15.0, 11.0, 2.0, 16.0]
    assert s["runs"] == 4 and s["runs_meeting_target"] == 2 and s["min_gain_points"] == 2.0
    assert s["mean_gain_points"] == pytest.approx(11.0)
    half = 3.182 * statistics.stdev(gains) / 2  # t(0.975, 3 df) * sd / sqrt(4 runs)
    assert s["mean_t95"] == pytest.approx([11.0 - half, 11.0 + half])
    assert s["curriculum_mean_points"] == -3.5 and report["runs"][0]["curriculum"]["gain_points"] == -3.5
    assert s["target"] == TARGET and report["cpus"] == ["AMD EPYC"]
    # one run is a verdict without an interval
    assert "mean_t95" not in runs.collect(paths[:1])["summary"]


def test_the_t_quantile_from_its_table_and_past_it(runs):
    assert runs.t975(1) == 12.706 and runs.t975(4) == 2.776 and runs.t975(30) == 2.042
    assert runs.t975(60) == pytest.approx(2.000, abs=2e-3) and runs.t975(10_000) == pytest.approx(1.960, abs=1e-3)
    with pytest.raises(ValueError):
        runs.t975(0)


def test_runs_that_pose_another_task_or_repeat_a_run_are_refused(runs, tmp_path):
    a = results(tmp_path, 0, 15.0, 2e-7, 47.0)
    (tmp_path / "b").mkdir()
    cases = [
        ({"held_out": {"profiles": 200, "trials": 1, "seed": 4242}}, "different held-out sets .*seed 618033 -> 4242"),
        ({"warmup": {"imitated": 90, "nll_last": 0.0216}}, "different warm-ups .*imitated 117 -> 90"),
        (
            {
                "arms": {
                    n: {"CR": 0.3, "CAR": {"mean": 0.6}, "user_simulator": {**USER, "agent_reading": 1}}
                    for n in ("warmup_only", "grpo_fixed")
                }
            },
            "different user simulators .*agent_reading 2 -> 1",
        ),
    ]
    for change, why in cases:
        b = results(tmp_path / "b", 1, 11.0, 3e-5, 49.1, **change)
        with pytest.raises(SystemExit, match=why):
            runs.collect([a, b])
    twin = results(tmp_path / "b", 0, 11.0, 3e-5, 49.1)
    with pytest.raises(SystemExit, match="same training run \\(run seed 0\\)"):
        runs.collect([a, twin])


def test_a_file_that_is_not_a_measured_claim_is_named(runs, tmp_path):
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    with pytest.raises(SystemExit, match="junk.json: not readable"):
        runs.collect([junk])
    junk.write_text(json.dumps({"arms": {}}))
    with pytest.raises(SystemExit, match="junk.json: not a results file .*held_out"):
        runs.collect([junk])
    no_claim = results(tmp_path, 0, 15.0, 2e-7, 47.0, target=None)
    with pytest.raises(SystemExit, match="measured no grpo_fixed against warmup_only"):
        runs.collect([no_claim])


def test_the_command_writes_json_and_png(runs, tmp_path):
    paths = [results(tmp_path, s, g, 1e-4, 50.0) for s, g in ((0, 12.0), (1, 4.0))]
    out = tmp_path / "out" / "runs"
    runs.main([*map(str, paths), "--out", str(out)])
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["summary"]["runs_meeting_target"] == 1 and report["summary"]["mean_gain_points"] == 8.0
    assert out.with_suffix(".png").stat().st_size > 0
