"""The whole loop with the tiny model: run layout, checkpoints that load in transformers, and a run killed
with SIGKILL then resumed that ends exactly where an uninterrupted run ends."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from sead.config import load_config
from sead.errors import SEADInputError
from sead.trainer.checkpoint import latest_checkpoint
from sead.trainer.loop import train

# Entropy bonus on: the random tiny model never succeeds, so without it the update would be a no-op and
# resume-exactness of the optimiser and weights would go untested.
TINY = ["preset=tiny", "trainer.update.entropy_coef=0.05", "trainer.iterations=3"]


def sead_cmd(*args):
    return [str(Path(sys.executable).parent / "sead"), "train", *TINY, *args]


def test_tiny_loop_writes_the_run_layout(tmp_path):
    run = train(load_config([*TINY, "trainer.iterations=2", f"run_dir={tmp_path / 'run'}"]))
    steps = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if "reward" in l]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    for key in ("reward", "CR", "kl", "entropy", "clip_frac", "grad_norm", "gen_tokens_per_s", "time",
                "controller_marginals", "reward_components"):
        assert key in steps[0]
    assert sorted(p.name for p in (run / "controller").glob("controller_update_*.json")) == [
        "controller_update_001.json", "controller_update_002.json"]
    assert len(list((run / "controller").glob("*.png"))) == 2
    assert len(list((run / "validation").glob("iter_*.json"))) == 3  # before training and after each iteration
    rollouts = [json.loads(l) for l in (run / "rollouts" / "step_000001.jsonl").read_text().splitlines()]
    assert len(rollouts) == 4
    for r in rollouts:  # what every rollout record carries
        assert set(r["meta"]["reward"]["components"]) >= {"completion", "format"}
        assert r["meta"]["user_simulator"]["name"] == "scripted" and "seed" in r["meta"] and r["profile"]
    assert (run / "config.yaml").exists() and json.loads((run / "usersim.json").read_text())["name"] == "scripted"
    from transformers import AutoModelForCausalLM

    path, state = latest_checkpoint(run)
    assert state["step"] == 4 and path.name == "step_000004"
    AutoModelForCausalLM.from_pretrained(path / "model")  # a plain HF checkpoint

    from sead.cli.main import main

    html = tmp_path / "audit.html"
    assert main(["audit-mask", str(run), "--html", str(html)]) == 0
    page = html.read_text()
    record = json.loads((run / "rollouts" / "step_000004.jsonl").read_text().splitlines()[0])
    trained_runs = sum(1 for i, m in enumerate(record["segments"][0]["mask"])
                       if m and (i == 0 or not record["segments"][0]["mask"][i - 1]))
    assert page.count('class="trained"') == trained_runs > 0
    assert "&lt;|im_start|&gt;system" in page  # escaped, and the prompt shown as context

    before = (run / "metrics.jsonl").read_text()
    assert main(["train", *TINY, f"run_dir={run}"]) == 2  # a fresh run never writes over an earlier one
    assert (run / "metrics.jsonl").read_text() == before


def test_corrupt_newest_checkpoint_falls_back_with_a_warning(tmp_path, caplog):
    run = train(load_config([*TINY, "trainer.iterations=1", f"run_dir={tmp_path / 'run'}"]))
    newest = run / "checkpoints" / "step_000002"
    (newest / "trainer_state.json").write_text("{not json")
    (run / "checkpoints" / "step_000003.partial").mkdir()
    path, state = latest_checkpoint(run)
    assert path.name == "step_000001" and state["step"] == 1
    assert "corrupt" in caplog.text and "partial" in caplog.text


def profile_order(run: Path) -> list:
    return [[r["profile"] for r in map(json.loads, p.read_text().splitlines())]
            for p in sorted((run / "rollouts").glob("step_*.jsonl"))]


def reward_steps(run: Path) -> list[int]:
    return [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines() if '"reward"' in l]


def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path):
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    subprocess.run(sead_cmd(f"run_dir={ref}"), check=True, capture_output=True, timeout=600)
    proc = subprocess.Popen(sead_cmd(f"run_dir={cut}"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = cut / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline:  # kill in the middle of step 4, after checkpoint 3
        if metrics.exists() and sum('"reward"' in l for l in metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert latest_checkpoint(cut)[1]["step"] < 6, "the run finished before it could be killed"
    subprocess.run(sead_cmd(f"run_dir={cut}", "resume=true"), check=True, capture_output=True, timeout=600)
    ref_state = latest_checkpoint(ref)[1]
    cut_state = latest_checkpoint(cut)[1]
    for clock in ("train_seconds", "longest_step_s"):  # wall clock: differs
        assert ref_state.pop(clock) > 0 and cut_state.pop(clock) > 0
    assert cut_state == ref_state  # same step, controller weights, statistics and RNG
    assert profile_order(cut) == profile_order(ref)
    from safetensors.torch import load_file

    a = load_file(latest_checkpoint(ref)[0] / "model" / "model.safetensors")
    b = load_file(latest_checkpoint(cut)[0] / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert reward_steps(cut) == [1, 2, 3, 4, 5, 6]  # replayed steps replace their lines instead of duplicating them


def test_time_budget_stops_after_the_current_step_then_checkpoints_and_validates(tmp_path):
    budget = ["trainer.iterations=3", "trainer.save_every=5", "trainer.max_minutes=0.0001"]  # 6 ms: one step spends it
    run = train(load_config([*TINY, *budget, f"run_dir={tmp_path / 'run'}"]))
    assert reward_steps(run) == [1]
    state = latest_checkpoint(run)[1]
    assert state["step"] == 1 and state["train_seconds"] > 0.006  # saved although save_every is 5
    # step 1 lies inside iteration 1 (steps 1-2): its validation still ran, on the policy after step 1
    points = {p.name: json.loads(p.read_text())["at"] for p in (run / "validation").glob("iter_*.json")}
    assert sorted(points) == ["iter_000.json", "iter_001.json"] and points["iter_001.json"]["step"] == 1
    measured = (run / "validation" / "iter_001.json").stat().st_mtime_ns
    train(load_config([*TINY, *budget, f"run_dir={run}", "resume=true"]))
    assert reward_steps(run) == [1]  # the spent budget travels in the checkpoint
    assert (run / "validation" / "iter_001.json").stat().st_mtime_ns == measured  # and is not measured twice

    # a hard limit: with a quarter step to spare after one more step of the length measured so far, that step
    # runs; a quarter step short of it, it does not start
    step_s = state["longest_step_s"]
    assert 0 < step_s <= state["train_seconds"]
    for spare, steps in ((step_s / 4, [1, 2]), (-step_s / 4, [1])):  # iterations=1: two steps at most
        minutes = (state["train_seconds"] + step_s + spare) / 60
        shy = tmp_path / f"shy{spare}"
        shutil.copytree(run, shy)
        train(load_config([*TINY, "trainer.iterations=1", f"trainer.max_minutes={minutes}", f"run_dir={shy}",
                           "resume=true"]))
        assert reward_steps(shy) == steps

    warmed = train(load_config([*TINY, *budget, f"run_dir={tmp_path / 'warm'}", "trainer.warmup.dialogues=2",
                                "trainer.validation.at_start=false"]))
    assert reward_steps(warmed) == []  # the warm-up alone spent the budget: it counts as training time
    # no start-of-run validation was asked for, but the policy the run ends with is always measured
    assert [p.name for p in (warmed / "validation").glob("iter_*.json")] == ["iter_000.json"]

    capped = train(load_config([*TINY, f"run_dir={tmp_path / 'capped'}", "trainer.iterations=1",
                                "trainer.warmup.dialogues=4", "trainer.warmup.max_minutes=0.0001"]))
    summary = json.loads((capped / "warmup" / "summary.json").read_text())
    # the warm-up's own cap ends fine-tuning (playing the dialogues already took longer than 6 ms); RL still runs
    assert summary["stopped_by_time"] and summary["sequences_trained"] == 0 and summary["nll_first"] is None
    assert reward_steps(capped) == [1, 2]


def test_warmup_imitates_reference_dialogues_and_becomes_the_kl_anchor(tmp_path):
    run = train(load_config([*TINY, "trainer.iterations=1", f"run_dir={tmp_path / 'run'}",
                             "trainer.warmup.dialogues=8", "trainer.warmup.epochs=3", "trainer.warmup.lr=0.01"]))
    summary = json.loads((run / "warmup" / "summary.json").read_text())
    assert summary["imitated"] > 0 and summary["reference_CR"] > 0
    assert summary["nll_last"] < summary["nll_first"]
    dialogues = [json.loads(l) for l in (run / "warmup" / "dialogues.jsonl").read_text().splitlines()]
    assert len(dialogues) == 8 and all(d["meta"]["agent"]["name"] == "reference" for d in dialogues)
    first = json.loads((run / "metrics.jsonl").read_text().splitlines()[1])
    assert first["step"] == 1 and first["kl"] == 0.0  # the reference is the warmed-up policy, not the base

    # Another run starts from that warm-up instead of repeating it, and its minutes count as training time.
    again = train(load_config([*TINY, "trainer.iterations=1", f"run_dir={tmp_path / 'again'}",
                               f"trainer.warmup.reuse={run / 'warmup'}"]))
    reused = json.loads((again / "warmup" / "summary.json").read_text())
    assert reused["reused_from"] == str(run / "warmup") and reused["minutes"] == summary["minutes"]
    assert not (again / "warmup" / "dialogues.jsonl").exists()  # nothing was played or fine-tuned again
    first = json.loads((again / "metrics.jsonl").read_text().splitlines()[1])
    assert first["kl"] == 0.0  # the warmed model is the start and the KL anchor
    state = latest_checkpoint(again)[1]
    assert state["train_seconds"] >= 60 * summary["minutes"]
    from safetensors.torch import load_file
    start = load_file(run / "warmup" / "model" / "model.safetensors")
    assert all(torch.equal(t, load_file(again / "warmup" / "model" / "model.safetensors")[k])
               for k, t in start.items())

    with pytest.raises(SEADInputError, match="not a warm-up directory"):
        train(load_config([*TINY, f"run_dir={tmp_path / 'bad'}", f"trainer.warmup.reuse={run / 'rollouts'}"]))


def test_lora_run_checkpoints_adapter_and_merged_model_and_resumes_exactly(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    lora = [*TINY, "trainer.iterations=1", "trainer.lora.enabled=true"]
    ref = train(load_config([*lora, f"run_dir={tmp_path / 'ref'}"]))
    cut = train(load_config([*lora, f"run_dir={tmp_path / 'cut'}"]))
    shutil.rmtree(cut / "checkpoints" / "step_000002")  # as if killed after step 1's checkpoint
    train(load_config([*lora, f"run_dir={cut}", "resume=true"]))
    a, b = latest_checkpoint(ref), latest_checkpoint(cut)
    for clock in ("train_seconds", "longest_step_s"):  # wall clock: differs between runs
        a[1].pop(clock), b[1].pop(clock)
    assert a[1] == b[1] and a[1]["step"] == 2
    for part in ("adapter/adapter_model.safetensors", "model/model.safetensors"):
        x, y = load_file(a[0] / part), load_file(b[0] / part)
        assert all(torch.equal(x[k], y[k]) for k in x)
    merged = AutoModelForCausalLM.from_pretrained(a[0] / "model")  # a plain HF model, adapters merged in
    assert not any("lora" in name for name, _ in merged.named_parameters())


def test_ppo_estimator_runs_the_loop_and_checkpoints_its_value_head(tmp_path):
    run = train(load_config([*TINY, "trainer.iterations=1", "trainer.update.estimator=ppo",
                             f"run_dir={tmp_path / 'run'}"]))
    steps = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if '"reward"' in l]
    assert len(steps) == 2 and all("value_loss" in s for s in steps)
    saved = torch.load(latest_checkpoint(run)[0] / "optimizer.pt", weights_only=False)
    assert saved["value_head"]["weight"].shape[0] == 1
    train(load_config([*TINY, "trainer.iterations=2", "trainer.update.estimator=ppo", f"run_dir={run}",
                       "resume=true"]))  # the value head comes back with the optimiser
    assert latest_checkpoint(run)[1]["step"] == 4
