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
from rich.console import Console

from sead.config import load_config
from sead.errors import SEADInputError
from sead.eval.training_report import write_training_report
from sead.run.checkpoints import latest_checkpoint
from sead.run.layout import CheckpointFolder, RunLayout
from sead.run.validation_table import changes, validation_table
from sead.scenario.tags import AGENT_READING_VERSION
from sead.trainer.budget import TrainingBudget
from sead.trainer.loop import Trainer, train
from sead.trainer.rollouts import groups_with_gradient

# Entropy bonus on: the random tiny model never succeeds, so without it the update would be a no-op and
# resume-exactness of the optimiser and weights would go untested.
TINY = ["preset=tiny", "trainer.update.entropy_coef=0.05", "trainer.iterations=3"]


def sead_cmd(*args):
    return [str(Path(sys.executable).parent / "sead"), "train", *TINY, *args]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> RunLayout:
    """Two iterations of two steps, read (never written) by the tests below."""
    return RunLayout(
        train(load_config([*TINY, "trainer.iterations=2", f"run_dir={tmp_path_factory.mktemp('r') / 'run'}"]))
    )


def step_lines(layout: RunLayout) -> list[dict]:
    return [json.loads(l) for l in layout.metrics.read_text().splitlines() if "reward" in l]


def test_every_step_logs_its_metrics_and_hack_monitors(tiny_run):
    steps = step_lines(tiny_run)
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert all("words_per_reply" in s["hack_monitors"] and "flagged" in s["hack_monitors"] for s in steps)
    wanted = {"reward", "CR", "kl", "entropy", "clip_frac", "grad_norm", "gen_tokens_per_s", "time"}
    assert wanted | {"controller_marginals", "reward_components"} <= set(steps[0])
    # the sampler's log-probs line up with the trainer's token for token: same weights and dtype, so the
    # measured mismatch is rounding only (a misaligned token would put it far above)
    assert all(0 <= s["rollout_kl"] < 1e-4 and s["rollout_ratio_max"] < 1.01 for s in steps)


def test_the_controller_reports_once_per_iteration_and_validation_runs_before_and_after_each(tiny_run):
    reports = sorted(p.name for p in tiny_run.controller_dir.glob("controller_update_*.json"))
    assert reports == ["controller_update_001.json", "controller_update_002.json"]
    assert len(list(tiny_run.controller_dir.glob("*.png"))) == 2
    assert tiny_run.validated_iterations() == [0, 1, 2]


def test_every_rollout_record_carries_its_reward_simulator_seed_and_profile(tiny_run):
    rollouts = [json.loads(l) for l in tiny_run.rollouts(1).read_text().splitlines()]
    assert len(rollouts) == 4
    for r in rollouts:
        assert set(r["meta"]["reward"]["components"]) >= {"completion", "format"}
        assert r["meta"]["user_simulator"]["name"] == "scripted" and "seed" in r["meta"] and r["profile"]
        assert r["meta"]["user_simulator"]["agent_reading"] == AGENT_READING_VERSION
    assert tiny_run.config.exists()
    assert json.loads(tiny_run.usersim.read_text()) == rollouts[0]["meta"]["user_simulator"]


def test_the_last_checkpoint_is_a_plain_hf_model(tiny_run):
    from transformers import AutoModelForCausalLM

    path, state = latest_checkpoint(tiny_run.path)
    assert state["step"] == 4 and path == tiny_run.checkpoint(4).path
    AutoModelForCausalLM.from_pretrained(CheckpointFolder(path).model)


def test_the_mask_audit_marks_exactly_the_trained_spans(tiny_run, tmp_path):
    from sead.cli.main import main

    html = tmp_path / "audit.html"
    assert main(["audit-mask", str(tiny_run.path), "--html", str(html)]) == 0
    page = html.read_text()
    mask = json.loads(tiny_run.rollouts(4).read_text().splitlines()[0])["segments"][0]["mask"]
    trained_runs = sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))
    assert page.count('class="trained"') == trained_runs > 0
    assert "&lt;|im_start|&gt;system" in page  # escaped, and the prompt shown as context


def test_a_fresh_run_never_writes_over_an_earlier_one(tiny_run):
    from sead.cli.main import main

    before = tiny_run.metrics.read_text()
    assert main(["train", *TINY, f"run_dir={tiny_run.path}"]) == 2
    assert tiny_run.metrics.read_text() == before


def profile_order(run: Path) -> list:
    return [[r["profile"] for r in map(json.loads, p.read_text().splitlines())] for p in RunLayout(run).rollout_files()]


def reward_steps(run: Path) -> list[int]:
    return [json.loads(l)["step"] for l in RunLayout(run).metrics.read_text().splitlines() if '"reward"' in l]


def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path):
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    subprocess.run(sead_cmd(f"run_dir={ref}"), check=True, capture_output=True, timeout=600)
    proc = subprocess.Popen(sead_cmd(f"run_dir={cut}"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = RunLayout(cut).metrics
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

    a = load_file(CheckpointFolder(latest_checkpoint(ref)[0]).model / "model.safetensors")
    b = load_file(CheckpointFolder(latest_checkpoint(cut)[0]).model / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert reward_steps(cut) == [1, 2, 3, 4, 5, 6]  # replayed steps replace their lines instead of duplicating them


def test_a_run_killed_while_validating_its_last_step_resumes_there_and_validates(tmp_path, monkeypatch):
    """Each checkpoint is written before the validation after it: a run killed while validating its last step
    (2026-11-29: the kernel's OOM killer, twelve steps lost with the old order) resumes at that step, validates it
    and trains nothing again."""
    run = tmp_path / "run"
    settings = [*TINY, "trainer.iterations=2", "trainer.save_every=5", f"run_dir={run}"]
    validate = Trainer.validate

    async def killed_at_the_end(self, iteration, progress):
        if iteration == 2:
            raise MemoryError("killed while validating")
        return await validate(self, iteration, progress)

    monkeypatch.setattr(Trainer, "validate", killed_at_the_end)
    with pytest.raises(MemoryError):
        train(load_config(settings))
    assert latest_checkpoint(run)[1]["step"] == 4 and not RunLayout(run).validation_metrics(2).exists()
    monkeypatch.setattr(Trainer, "validate", validate)
    train(load_config([*settings, "resume=true"]))
    assert json.loads(RunLayout(run).validation_metrics(2).read_text())["at"]["step"] == 4
    assert reward_steps(run) == [1, 2, 3, 4]


def test_time_budget_stops_after_the_current_step_then_checkpoints_and_validates(tmp_path):
    budget = ["trainer.iterations=3", "trainer.save_every=5", "trainer.max_minutes=0.0001"]  # 6 ms: one step spends it
    run = train(load_config([*TINY, *budget, f"run_dir={tmp_path / 'run'}"]))
    assert reward_steps(run) == [1]
    state = latest_checkpoint(run)[1]
    assert state["step"] == 1 and state["train_seconds"] > 0.006  # saved although save_every is 5
    # step 1 lies inside iteration 1 (steps 1-2): its validation still ran, on the policy after step 1
    layout = RunLayout(run)
    points = {i: json.loads(layout.validation_metrics(i).read_text())["at"] for i in layout.validated_iterations()}
    assert sorted(points) == [0, 1] and points[1]["step"] == 1
    measured = layout.validation_metrics(1).stat().st_mtime_ns
    train(load_config([*TINY, *budget, f"run_dir={run}", "resume=true"]))
    assert reward_steps(run) == [1]  # the spent budget travels in the checkpoint
    assert layout.validation_metrics(1).stat().st_mtime_ns == measured  # and is not measured twice

    # a hard limit: with a quarter step to spare after one more step of the length measured so far, that step
    # runs; a quarter step short of it, it does not start
    step_s = state["longest_step_s"]
    assert 0 < step_s <= state["train_seconds"]
    for spare, steps in ((step_s / 4, [1, 2]), (-step_s / 4, [1])):  # iterations=1: two steps at most
        minutes = (state["train_seconds"] + step_s + spare) / 60
        shy = tmp_path / f"shy{spare}"
        shutil.copytree(run, shy)
        train(
            load_config(
                [*TINY, "trainer.iterations=1", f"trainer.max_minutes={minutes}", f"run_dir={shy}", "resume=true"]
            )
        )
        assert reward_steps(shy) == steps

    warmed = train(
        load_config(
            [
                *TINY,
                *budget,
                f"run_dir={tmp_path / 'warm'}",
                "trainer.warmup.dialogues=2",
                "trainer.validation.at_start=false",
            ]
        )
    )
    assert reward_steps(warmed) == []  # the warm-up alone spent the budget: it counts as training time
    # no start-of-run validation was asked for, but the policy the run ends with is always measured
    assert RunLayout(warmed).validated_iterations() == [0]

    capped = train(
        load_config(
            [
                *TINY,
                f"run_dir={tmp_path / 'capped'}",
                "trainer.iterations=1",
                "trainer.warmup.dialogues=4",
                "trainer.warmup.max_minutes=0.0001",
            ]
        )
    )
    summary = json.loads(RunLayout(capped).warmup.summary.read_text())
    # the warm-up's own cap ends fine-tuning (playing the dialogues already took longer than 6 ms); RL still runs
    assert summary["stopped_by_time"] and summary["sequences_trained"] == 0 and summary["nll_first"] is None
    assert reward_steps(capped) == [1, 2]


def test_a_run_that_changed_no_weight_says_so_and_does_not_exit_0(tmp_path, capsys):
    from sead.cli.commands import TRAINED_NOTHING
    from sead.cli.main import main

    spent = ["trainer.warmup.dialogues=2", "trainer.max_minutes=0.0001"]  # the warm-up alone spends the budget
    assert main(["train", *TINY, *spent, f"run_dir={tmp_path / 'spent'}"]) == TRAINED_NOTHING
    out = " ".join(capsys.readouterr().out.split())
    assert "trained nothing: no RL step was made (trainer.max_minutes was spent before the first)" in out
    assert "done." not in out
    # measuring a model alone plans no RL step: nothing was owed
    assert main(["train", *TINY, "trainer.iterations=0", f"run_dir={tmp_path / 'measure'}"]) == 0


def test_a_warmup_keeps_each_epochs_model_and_each_is_the_warmup_of_that_length(tmp_path):
    """`trainer.warmup.keep_epochs`: one warm-up of N epochs gives the warm-ups of 1..N-1 epochs, exactly."""
    warm = [*TINY, "trainer.iterations=0", "trainer.validation.at_start=false", "trainer.warmup.dialogues=6"]
    longer = RunLayout(
        train(
            load_config(
                [*warm, f"run_dir={tmp_path / 'three'}", "trainer.warmup.epochs=3", "trainer.warmup.keep_epochs=true"]
            )
        )
    ).warmup
    two = RunLayout(train(load_config([*warm, f"run_dir={tmp_path / 'two'}", "trainer.warmup.epochs=2"]))).warmup
    assert sorted(p.name for p in longer.path.glob("epoch*")) == ["epoch1", "epoch2"]  # the last is warmup/ itself
    assert not list(two.path.glob("epoch*"))  # off by default
    kept, final = (json.loads(w.summary.read_text()) for w in (longer.epoch(2), two))
    assert (kept["epochs"], kept["sequences_trained"]) == (2, 2 * kept["sequences"]) and kept["sequences"] > 0
    assert {k: kept[k] for k in ("sequences_trained", "nll_first", "nll_last")} == {
        k: final[k] for k in ("sequences_trained", "nll_first", "nll_last")
    }
    same, other = (_weights(w.model) for w in (longer.epoch(2), longer.epoch(1)))
    assert all(torch.equal(t, same[k]) for k, t in _weights(two.model).items())
    assert not all(torch.equal(t, other[k]) for k, t in same.items())  # each epoch moved the weights
    assert longer.epoch(1).dialogues.read_text() == longer.dialogues.read_text()  # an anchor's pool, too
    again = train(load_config([*warm, f"run_dir={tmp_path / 'again'}", f"trainer.warmup.reuse={longer.epoch(1).path}"]))
    assert json.loads(RunLayout(again).warmup.summary.read_text())["reused_from"] == str(longer.epoch(1).path)


def test_the_training_budget_stops_before_a_step_as_long_as_the_longest_would_overrun_it():
    budget = TrainingBudget(max_minutes=1.0)
    budget.add_warmup(0.5)  # 30 s of the 60
    assert not budget.spent()  # no step timed yet: one is always tried
    budget.add_step(10.0)  # 40 s: a step of 10 s more ends at 50 s
    assert not budget.spent()
    budget.add_step(12.0)  # 52 s: a step as long as the longest (12 s) would end at 64 s
    assert budget.spent() and budget.longest_step_s == 12.0
    again = TrainingBudget.resumed(2.0, budget.state())  # a resume keeps the clock, under the limit now in force
    assert (again.train_seconds, again.longest_step_s, again.spent()) == (52.0, 12.0, False)
    assert not TrainingBudget(max_minutes=None, train_seconds=1e9, longest_step_s=1e9).spent()


def test_warmup_imitates_reference_dialogues_and_becomes_the_kl_anchor(tmp_path):
    run = train(
        load_config(
            [
                *TINY,
                "trainer.iterations=1",
                f"run_dir={tmp_path / 'run'}",
                "trainer.warmup.dialogues=8",
                "trainer.warmup.epochs=3",
                "trainer.warmup.lr=0.01",
                "trainer.validation.before_warmup=true",
            ]
        )
    )
    layout = RunLayout(run)
    # the base model is measured before the warm-up, on the same profiles, beside (not among) the iterations
    assert layout.validation_metrics("base").exists() and layout.validated_iterations() == [0, 1]
    base, warmed = (
        [json.loads(l) for l in layout.validation_dialogues(k).read_text().splitlines()] for k in ("base", 0)
    )
    assert [d["profile"] for d in base] == [d["profile"] for d in warmed]
    assert [d["segments"] for d in base] != [d["segments"] for d in warmed]  # what imitation changed
    logged = [json.loads(l) for l in layout.metrics.read_text().splitlines() if '"validation"' in l]
    assert len(logged) == 2  # iterations 0 and 1: the base model is no point of this run's curve
    table = Console(record=True, width=200)
    table.print(validation_table(layout))
    rows = table.export_text().splitlines()
    assert [c for r in rows if "│" in r and (c := r.split("│")[1].strip())] == ["base", "iteration 0", "iteration 1"]
    # the end-of-run lines say what imitation and RL each moved; the tiny model completes nothing at any point
    # (its users never hear a <response>, so none acknowledges a stage: ACK 0, not n/a)
    assert changes(layout) == [
        f"{phase}: CR 0.000 -> 0.000 (CIs overlap), ACK 0.000 -> 0.000 (CIs overlap)"
        for phase in ("warm-up (imitation)", "RL (2 steps)")
    ]
    warm = layout.warmup
    summary = json.loads(warm.summary.read_text())
    assert summary["imitated"] > 0 and summary["reference_CR"] > 0
    assert summary["nll_last"] < summary["nll_first"]
    dialogues = [json.loads(l) for l in warm.dialogues.read_text().splitlines()]
    assert len(dialogues) == 8 and all(d["meta"]["agent"]["name"] == "reference" for d in dialogues)
    first = json.loads(RunLayout(run).metrics.read_text().splitlines()[1])
    assert first["step"] == 1 and first["kl"] == 0.0  # the reference is the warmed-up policy, not the base

    # Another run starts from that warm-up instead of repeating it, and its minutes count as training time.
    again = train(
        load_config(
            [*TINY, "trainer.iterations=1", f"run_dir={tmp_path / 'again'}", f"trainer.warmup.reuse={warm.path}"]
        )
    )
    again_warm = RunLayout(again).warmup
    reused = json.loads(again_warm.summary.read_text())
    assert reused["reused_from"] == str(warm.path) and reused["minutes"] == summary["minutes"]
    assert not again_warm.dialogues.exists()  # nothing was played or fine-tuned again
    first = json.loads(RunLayout(again).metrics.read_text().splitlines()[1])
    assert first["kl"] == 0.0  # the warmed model is the start and the KL anchor
    state = latest_checkpoint(again)[1]
    assert state["train_seconds"] >= 60 * summary["minutes"]
    from safetensors.torch import load_file

    start = load_file(warm.model / "model.safetensors")
    assert all(torch.equal(t, load_file(again_warm.model / "model.safetensors")[k]) for k, t in start.items())

    with pytest.raises(SEADInputError, match="not a warm-up directory"):
        train(
            load_config([*TINY, f"run_dir={tmp_path / 'bad'}", f"trainer.warmup.reuse={RunLayout(run).rollouts_dir}"])
        )


def test_the_imitation_anchor_draws_the_warm_ups_imitated_dialogues_in_every_update(tmp_path):
    """trainer.update.imitation_coef: every update reports the anchor's NLL, from this run's warm-up or from the
    run whose warm-up `trainer.warmup.reuse` names; a reused warm-up's own folder holds no dialogues to draw."""
    anchored = [
        *TINY,
        "trainer.iterations=2",
        "trainer.update.imitation_coef=1.0",
        "trainer.update.imitation_dialogues=2",
    ]
    run = train(load_config([*anchored, f"run_dir={tmp_path / 'run'}", "trainer.warmup.dialogues=8"]))
    warm = RunLayout(run).warmup
    assert json.loads(warm.summary.read_text())["imitated"] > 0
    updates = [s for s in map(json.loads, RunLayout(run).metrics.read_text().splitlines()) if "kl" in s]
    assert updates and all(s["imitation_nll"] > 0 for s in updates)
    again = train(load_config([*anchored, f"run_dir={tmp_path / 'again'}", f"trainer.warmup.reuse={warm.path}"]))
    updates = [s for s in map(json.loads, RunLayout(again).metrics.read_text().splitlines()) if "kl" in s]
    assert updates and all(s["imitation_nll"] > 0 for s in updates)
    chained = [*anchored, f"run_dir={tmp_path / 'chained'}", f"trainer.warmup.reuse={RunLayout(again).warmup.path}"]
    with pytest.raises(SEADInputError, match="point trainer.warmup.reuse at the run that played it"):
        train(load_config(chained))


def test_the_anchors_control_trains_on_the_anchor_alone_and_plays_no_dialogue(tmp_path):
    """trainer.update.policy_gradient=false: each step is one optimiser step on that step's anchor draw, nothing
    is played for training (no rollouts, the controller untouched), and validation measures the result."""
    from safetensors.torch import load_file

    warm = [*TINY, f"run_dir={tmp_path / 'warm'}", "trainer.warmup.dialogues=8", "trainer.iterations=0"]
    warmed = train(load_config(warm))
    control = [
        *TINY,
        "trainer.iterations=2",
        "trainer.update.imitation_coef=1.0",
        "trainer.update.imitation_dialogues=2",
        "trainer.update.policy_gradient=false",
        f"trainer.warmup.reuse={RunLayout(warmed).warmup.path}",
    ]
    run = train(load_config([*control, f"run_dir={tmp_path / 'control'}"]))
    layout = RunLayout(run)
    steps = [s for s in map(json.loads, layout.metrics.read_text().splitlines()) if "imitation_nll" in s]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]  # two iterations of two steps (TINY)
    assert all(s["dialogues"] == 0 and s["reward"] is None and s["grad_norm"] > 0 for s in steps)
    assert not list(layout.rollouts_dir.glob("step_*"))
    assert json.loads(layout.validation_metrics(2).read_text())["at"]["step"] == 4
    start = load_file(RunLayout(warmed).warmup.model / "model.safetensors")
    end = load_file(CheckpointFolder(latest_checkpoint(run)[0]).model / "model.safetensors")
    assert any(not torch.equal(t, end[k]) for k, t in start.items())
    write_training_report(run)  # the report draws the anchor's curve, and no reward curve where none was played
    assert (run / "report_plots" / "imitation_nll.png").exists() and not (run / "report_plots" / "reward.png").exists()


def test_lora_run_checkpoints_adapter_and_merged_model_and_resumes_exactly(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    lora = [*TINY, "trainer.iterations=1", "trainer.lora.enabled=true"]
    ref = train(load_config([*lora, f"run_dir={tmp_path / 'ref'}"]))
    cut = train(load_config([*lora, f"run_dir={tmp_path / 'cut'}"]))
    shutil.rmtree(RunLayout(cut).checkpoint(2).path)  # as if killed after step 1's checkpoint
    train(load_config([*lora, f"run_dir={cut}", "resume=true"]))
    a, b = latest_checkpoint(ref), latest_checkpoint(cut)
    for clock in ("train_seconds", "longest_step_s"):  # wall clock: differs between runs
        a[1].pop(clock), b[1].pop(clock)
    assert a[1] == b[1] and a[1]["step"] == 2
    ours, theirs = CheckpointFolder(a[0]), CheckpointFolder(b[0])
    for x, y in (
        (ours.adapter / "adapter_model.safetensors", theirs.adapter / "adapter_model.safetensors"),
        (ours.model / "model.safetensors", theirs.model / "model.safetensors"),
    ):
        x, y = load_file(x), load_file(y)
        assert all(torch.equal(x[k], y[k]) for k in x)
    merged = AutoModelForCausalLM.from_pretrained(ours.model)  # a plain HF model, adapters merged in
    assert not any("lora" in name for name, _ in merged.named_parameters())


def test_ppo_estimator_runs_the_loop_and_checkpoints_its_value_head(tmp_path):
    run = train(
        load_config([*TINY, "trainer.iterations=1", "trainer.update.estimator=ppo", f"run_dir={tmp_path / 'run'}"])
    )
    steps = [json.loads(l) for l in RunLayout(run).metrics.read_text().splitlines() if '"reward"' in l]
    assert len(steps) == 2 and all("value_loss" in s for s in steps)
    saved = torch.load(CheckpointFolder(latest_checkpoint(run)[0]).optimizer, weights_only=False)
    assert saved["value_head"]["weight"].shape[0] == 1
    train(
        load_config([*TINY, "trainer.iterations=2", "trainer.update.estimator=ppo", f"run_dir={run}", "resume=true"])
    )  # the value head comes back with the optimiser
    assert latest_checkpoint(run)[1]["step"] == 4


def test_zero_iterations_only_measures_the_model(tmp_path):
    """What benchmarks/learning_curve.py uses for its base and warm-up-only points: validation, no training."""
    layout = RunLayout(train(load_config(["preset=tiny", "trainer.iterations=0", f"run_dir={tmp_path / 'run'}"])))
    assert layout.validated_iterations() == [0]
    assert not step_lines(layout) and not list(layout.checkpoints_dir.glob("step_*"))


def test_dynamic_sampling_refills_a_step_whose_groups_carry_no_gradient(tmp_path):
    """The random tiny model never succeeds: every group is flat, so each step plays its refill rounds with new
    profiles and seeds, logs them all in the step's file, and the controller sees every dialogue."""
    layout = RunLayout(
        train(
            load_config(
                [
                    *TINY,
                    "trainer.iterations=1",
                    "trainer.update.dynamic_sampling=true",
                    "trainer.update.refill_rounds=2",
                    f"run_dir={tmp_path / 'run'}",
                ]
            )
        )
    )
    cfg = load_config(["preset=tiny"]).trainer
    per_round = cfg.profiles_per_step * cfg.rollouts_per_profile
    for line in step_lines(layout):
        assert line["refill_rounds"] == 2 and line["groups"] == line["groups_dropped"] == 3 * cfg.profiles_per_step
        assert "skipped" in line and line["played_tokens"] > 0  # logged though nothing trained
        rollouts = [json.loads(l) for l in layout.rollouts(line["step"]).read_text().splitlines()]
        assert len(rollouts) == 3 * per_round
        assert (
            len({r["meta"]["seed"] for r in rollouts})
            == len({r["meta"]["episode_id"] for r in rollouts})
            == 3 * per_round
        )
        assert len({r["meta"]["group"] for r in rollouts}) == 3 * cfg.profiles_per_step


def test_groups_with_gradient_counts_groups_whose_rewards_differ():
    from types import SimpleNamespace

    def ep(group, total):
        return SimpleNamespace(meta={"group": group, "reward": None if total is None else {"total": total}})

    # group 0 differs; group 1 is flat; group 2 differs only through a simulator error, which is no reward
    eps = [ep(0, 0.0), ep(0, 0.5), ep(1, 1.0), ep(1, 1.0), ep(2, 0.0), ep(2, None)]
    assert groups_with_gradient(eps) == 1


def test_validation_every_k_iterations_still_measures_the_last(tmp_path):
    """benchmarks/learning_curve.py reweights the curriculum after every step but measures only at the end."""
    run = f"run_dir={tmp_path / 'run'}"
    cfg = load_config(
        ["preset=tiny", "trainer.iterations=3", "trainer.steps_per_iteration=1", "trainer.validation.every=2", run]
    )
    layout = RunLayout(train(cfg))
    assert layout.validated_iterations() == [0, 2, 3]
    assert len(list(layout.controller_dir.glob("controller_update_*.json"))) == 3


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def _replies(dialogues: Path) -> list:
    """Each validation dialogue's tokens and the log-probs the agent sampled them with (the tiny model's greedy
    text alone hardly tells two of its weights apart)."""
    return [
        [(s["ids"], s["logprobs"]) for s in r["segments"]] for r in map(json.loads, dialogues.read_text().splitlines())
    ]


def _measure(model: Path, tmp_path: Path, name: str) -> list:
    """Greedy validation of the saved model at `model`, in a run that only measures (as learning_curve.py does)."""
    reused = tmp_path / f"{name}_warmup"
    reused.mkdir()
    (reused / "model").symlink_to(model)
    summary = {"dialogues": 0, "imitated": 0, "reference_CR": None, "nll_first": 0, "nll_last": 0, "minutes": 0}
    (reused / "summary.json").write_text(json.dumps(summary))
    cfg = ["preset=tiny", "trainer.iterations=0", f"trainer.warmup.reuse={reused}", f"run_dir={tmp_path / name}"]
    return _replies(RunLayout(train(load_config(cfg))).validation_dialogues(0))


def test_weight_ema_validates_and_checkpoints_the_average_and_resumes_exactly(tmp_path):
    ema = [*TINY, "trainer.iterations=1", "trainer.weight_ema=0.5"]
    ref = RunLayout(train(load_config([*ema, f"run_dir={tmp_path / 'ref'}"])))
    one, two = CheckpointFolder(ref.checkpoint(1).path), CheckpointFolder(ref.checkpoint(2).path)
    p1, m1, p2, m2 = _weights(one.policy), _weights(one.model), _weights(two.policy), _weights(two.model)
    assert all(torch.equal(p1[k], m1[k]) for k in p1)  # the first update's weights start the average
    assert any(not torch.equal(p1[k], p2[k]) for k in p1)  # the second update moved the policy
    for k in p1:  # then half of each: torch's EMA rule
        torch.testing.assert_close(m2[k], p1[k] + 0.5 * (p2[k] - p1[k]), rtol=0, atol=1e-7)
    assert latest_checkpoint(ref.path)[1]["weight_average_updates"] == 2
    at = json.loads(ref.validation_metrics(1).read_text())["at"]
    assert at == {**at, "step": 2, "averaged": {"ema_decay": 0.5, "updates": 2}}
    # validation played the average, word for word as the checkpoint's model/ plays alone, not the live policy
    measured = _replies(ref.validation_dialogues(1))
    assert _measure(two.model, tmp_path, "average") == measured
    assert _measure(two.policy, tmp_path, "policy") != measured
    # killed after step 1's checkpoint: the resumed run ends with the same policy, average and state
    cut = RunLayout(train(load_config([*ema, f"run_dir={tmp_path / 'cut'}"])))
    shutil.rmtree(cut.checkpoint(2).path)
    train(load_config([*ema, f"run_dir={cut.path}", "resume=true"]))
    a, b = latest_checkpoint(ref.path), latest_checkpoint(cut.path)
    for clock in ("train_seconds", "longest_step_s"):  # wall clock: differs between runs
        a[1].pop(clock), b[1].pop(clock)
    assert a[1] == b[1]
    for folder in ("model", "policy"):
        x, y = _weights(a[0] / folder), _weights(b[0] / folder)
        assert all(torch.equal(x[k], y[k]) for k in x)


def test_weight_ema_needs_full_weights_and_the_embedded_trainer():
    with pytest.raises(SEADInputError, match="trainer.weight_ema"):
        train(load_config([*TINY, "trainer.weight_ema=0.9", "trainer.lora.enabled=true"]))


def test_a_short_warmup_reports_the_nll_of_its_first_and_last_steps_apart():
    """The warm-up's NLL line averages five optimiser steps at each end, or half of a shorter run each: a demo's
    four steps once printed one mean twice, as if nothing had been learnt."""
    from sead.trainer.warmup import _ends

    assert [_ends(n) for n in (1, 2, 4, 9, 10, 40)] == [1, 1, 2, 4, 5, 5]
