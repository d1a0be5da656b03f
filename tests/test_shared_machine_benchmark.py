"""benchmarks/shared_machine.py end to end in its --quick mode on the tiny model: each workload measured alone and
beside a CPU load in fresh processes that took the policy's thread settings, and what it kept of its speed. No
timing is asserted (tests are not timers)."""

import json
import math

from benchmark_scripts import load_benchmark


def test_quick_run_measures_each_workload_alone_and_beside_a_load(tiny_model_dir, tmp_path, monkeypatch):
    bench = load_benchmark("shared_machine")
    loads, workers = [], []
    cpu_load, run_worker = bench.cpu_load, bench.run_worker

    def counted_load(processes):
        loads.append(processes)
        return cpu_load(processes)

    def seen_worker(argv, policy):
        workers.append(policy)
        return run_worker(argv, policy)

    monkeypatch.setattr(bench, "cpu_load", counted_load)
    monkeypatch.setattr(bench, "run_worker", seen_worker)
    out = tmp_path / "shared.json"
    bench.main(["--quick", "--model", str(tiny_model_dir), "--out", str(out)])
    result = json.loads(out.read_text())
    assert loads == [0, result["machine"]["load_processes"]] and result["machine"]["load_processes"] >= 1
    assert workers == [bench.POLICIES["sead"]] * 2
    runs = result["policies"]["sead"]
    assert set(runs["alone"]["tok_s"]) == {"decode_1_rows", "train_2_rows"} == set(runs["kept"])
    for w, kept in runs["kept"].items():
        assert math.isclose(kept, runs["beside_load"]["tok_s"][w] / runs["alone"]["tok_s"][w])
        assert kept > 0
    assert out.with_suffix(".png").stat().st_size > 0


def test_a_worker_gets_the_policy_s_thread_settings_and_not_the_parent_s(monkeypatch):
    bench = load_benchmark("shared_machine")
    seen = {}

    def fake_run(cmd, env, **kwargs):
        seen.update(env)
        return type("Done", (), {"returncode": 0, "stdout": '{"tok_s": {}}\n', "stderr": ""})()

    monkeypatch.setenv("GOMP_SPINCOUNT", "7")
    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    bench.run_worker([], bench.POLICIES["passive"])
    assert seen["OMP_WAIT_POLICY"] == "PASSIVE" and "GOMP_SPINCOUNT" not in seen
    bench.run_worker([], bench.POLICIES["gomp_default"])
    assert seen["GOMP_SPINCOUNT"] == "300000"
