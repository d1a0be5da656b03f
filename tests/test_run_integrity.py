"""What a run directory promises (docs/architecture.md), measured on the tiny model: damaged checkpoints are
skipped with a warning naming what is wrong, no NaN reaches a checkpoint or metrics.jsonl, one writer per run
directory, a resume cannot quietly change the settings, Ctrl-C leaves a resumable run, torn metrics and dialogue
lines are skipped with a warning, a dead user simulator fails before the model loads, and the warm-up's reference
CR ignores simulator errors."""

import asyncio
import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from rich.progress import Progress
from safetensors.torch import load_file

from sead.cli.main import main
from sead.config import load_config
from sead.errors import SEADInputError
from sead.run.checkpoints import latest_checkpoint
from sead.run.frozen_config import resume_config
from sead.run.layout import CheckpointFolder, RunLayout
from sead.trainer.loop import Trainer
from sead.usersim.base import SimulatorError, UserSimulator

TINY = ["preset=tiny", "trainer.update.entropy_coef=0.05", "trainer.iterations=1"]  # finished_run: 2 steps, both saved
SEAD = str(Path(sys.executable).parent / "sead")


def strict_json_lines(path: Path) -> list[dict]:
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def reward_steps(run: Path) -> list[int]:
    return [r["step"] for r in strict_json_lines(RunLayout(run).metrics) if "reward" in r]


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:1000])


def garble(path: Path) -> None:  # 64 KiB of garbage in place: the size stays what it was
    with path.open("r+b") as f:
        f.seek(4096)
        f.write(os.urandom(64 * 1024))


DAMAGE = {
    "truncated weights": ("model/model.safetensors", truncate, "model/model.safetensors has 1000 bytes, manifest says"),
    "garbage in the weights": ("model/model.safetensors", garble, "model/model.safetensors does not match its SHA-256"),
    "optimizer deleted": ("optimizer.pt", Path.unlink, "optimizer.pt is missing"),
    "rng deleted": ("rng.pt", Path.unlink, "rng.pt is missing"),
    "tokenizer deleted": ("model/tokenizer.json", Path.unlink, "model/tokenizer.json is missing"),
    "trainer state rewritten": (
        "trainer_state.json",
        lambda p: p.write_text("{not json"),
        "trainer_state.json has 9 bytes, manifest says",
    ),
    "no manifest (old format)": ("manifest.json", Path.unlink, "no manifest.json"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_checkpoint_is_skipped_with_a_warning_naming_the_file(run, caplog, damage):
    name, harm, warning = DAMAGE[damage]
    harm(RunLayout(run).checkpoint(2).path / name)
    path, state = latest_checkpoint(run)
    assert path == RunLayout(run).checkpoint(1).path and state["step"] == 1
    assert f"checkpoints/step_000002: skipped, {warning}" in caplog.text


def test_a_partial_checkpoint_is_skipped_with_a_warning(run, caplog):
    layout = RunLayout(run)
    shutil.copytree(layout.checkpoint(2).path, layout.partial_checkpoint(3).path)
    assert latest_checkpoint(run)[0] == layout.checkpoint(2).path
    assert "checkpoints/step_000003.partial: skipped, a partial checkpoint" in caplog.text


def test_resume_over_garbage_weights_falls_back_and_trains_on_sound_weights(run, caplog):
    garble(RunLayout(run).checkpoint(2).model / "model.safetensors")
    assert main(["train", *TINY, f"run_dir={run}", "resume=true"]) == 0
    assert "step_000002: skipped, model/model.safetensors does not match" in caplog.text
    assert reward_steps(run) == [1, 2]  # step 2 replayed, its old line replaced
    path, state = latest_checkpoint(run)  # the rewritten step 2 verifies again
    assert state["step"] == 2
    weights = load_file(CheckpointFolder(path).model / "model.safetensors")
    assert all(torch.isfinite(t).all() for t in weights.values())


def test_a_diverging_update_stops_the_run_before_a_checkpoint_or_a_nan_is_written(tmp_path, capsys, monkeypatch):
    # the second optimiser step diverges, every weight overflowing as under an lr far too high (a finite lr that
    # high, once 3e37 here, is now refused at load)
    step, calls = torch.optim.AdamW.step, []

    def diverging(self, *args, **kwargs):
        out = step(self, *args, **kwargs)
        calls.append(self)
        if len(calls) == 2:
            with torch.no_grad():
                for group in self.param_groups:
                    for p in group["params"]:
                        p.mul_(float("inf"))
        return out

    monkeypatch.setattr(torch.optim.AdamW, "step", diverging)
    run = tmp_path / "run"
    assert main(["train", *TINY, f"run_dir={run}"]) == 2
    out = capsys.readouterr().out
    assert "[trainer.update.lr]" in out and "is not finite; the run stops" in out
    layout = RunLayout(run)
    assert list(layout.checkpoints_dir.iterdir()) == [layout.checkpoint(1).path]  # no step 2
    weights = load_file(layout.checkpoint(1).model / "model.safetensors")
    assert all(torch.isfinite(t).all() for t in weights.values())
    assert reward_steps(run) == [1]  # the failed step logged nothing, and every line is strict JSON
    # the setting behind the original report: greedy training rollouts made the update divide the logits by 0;
    # now refused at load, before a folder exists
    assert main(["train", *TINY, "trainer.sampling.temperature=0", f"run_dir={tmp_path / 'zero'}"]) == 2
    assert "[trainer.sampling.temperature]: must be >= 0.01 and <= 10, got 0" in capsys.readouterr().out
    assert not (tmp_path / "zero").exists()


@pytest.mark.parametrize(
    "fault,message,field",
    [
        ("nan weight", "the loss is not finite", "trainer.update.lr"),
        ("infinite lr", "a weight after the optimiser step is not finite", "trainer.update.lr"),
        # set in code, past the config's ranges: the error names the setting that is not finite, not the lr
        ("infinite weight decay", "a weight after the optimiser step is not finite", "trainer.update.weight_decay"),
    ],
)
def test_the_update_step_refuses_non_finite_numbers(fault, message, field, tiny):
    import copy

    from sead.trainer.estimators import Sequence
    from sead.trainer.schema import UpdateConfig
    from sead.trainer.update import Updater

    model, tok = copy.deepcopy(tiny[0]), tiny[1]  # this test breaks the weights on purpose
    ids = torch.tensor(
        tok.encode(
            "<|im_start|>user\nwho?<|im_end|>\n<|im_start|>assistant\nAlex here<|im_end|>", add_special_tokens=False
        )
    )
    mask = torch.zeros_like(ids)
    mask[-4:] = 1
    decay = float("inf") if fault == "infinite weight decay" else 0.0
    updater = Updater(model, None, UpdateConfig(lr=1e-2, kl_coef=0.0, weight_decay=decay), temperature=1.0)
    if fault == "nan weight":
        model.model.norm.weight.data[0] = float("nan")
    elif fault == "infinite lr":
        updater.opt.param_groups[0]["lr"] = float("inf")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(SEADInputError, match=message) as e:
        updater.step([Sequence(ids, mask, 1.0)])
    assert e.value.field == field and "weight_decay=" in e.value.detail
    if fault == "nan weight":  # caught before the optimiser step: the weights are as they were
        for k, v in model.state_dict().items():
            torch.testing.assert_close(v, before[k], rtol=0, atol=0, equal_nan=True)


def test_metrics_lines_are_strict_json(tmp_path):
    from sead.run.metrics_log import MetricsLogger

    logger = MetricsLogger(RunLayout(tmp_path), tensorboard=False)
    logger.log(1, {"kl": float("nan"), "time": {"s": float("inf")}, "xs": [1.0, float("-inf")]})
    logger.close()
    assert strict_json_lines(RunLayout(tmp_path).metrics) == [
        {"step": 1, "kl": None, "time": {"s": None}, "xs": [1.0, None]}
    ]


def hold_lock(run: Path) -> subprocess.Popen:
    """Another process holding the run directory, as a second `sead train` would: an flock on the folder, its PID
    in .lock (replacing what an earlier run wrote: a PID that is a prefix of the earlier one would otherwise read as
    that one)."""
    code = (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
        "fcntl.flock(fd, fcntl.LOCK_EX); open(os.path.join(sys.argv[1], '.lock'), 'w').write(str(os.getpid())); "
        "print('held', flush=True); "
        "time.sleep(600)"
    )
    run.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_one_writer_per_run_directory_and_a_stale_lock_blocks_nothing(run, capsys):
    holder = hold_lock(run)
    before = sorted(p.name for p in run.iterdir())
    try:
        assert main(["train", *TINY, f"run_dir={run}", "resume=true"]) == 2
        out = capsys.readouterr().out
        assert str(run) in out and f"PID {holder.pid}" in out
        assert sorted(p.name for p in run.iterdir()) == before
    finally:
        holder.kill()  # SIGKILL: no chance to clean up, the lock file stays
        holder.wait()
    assert RunLayout(run).lock.read_text().strip() == str(holder.pid)
    assert main(["train", *TINY, f"run_dir={run}", "resume=true"]) == 0
    fd = os.open(run, os.O_RDONLY)  # and the finished run released it
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)


def test_resume_refuses_changed_run_settings_unless_allowed(run, capsys, caplog):
    layout = RunLayout(run)
    original = layout.config.read_text()
    assert main(["train", *TINY, "trainer.update.lr=0.5", "seed=3", f"run_dir={run}", "resume=true"]) == 2
    out = capsys.readouterr().out
    assert "seed 0 -> 3" in out and "trainer.update.lr 0.001 -> 0.5" in out and "resume_allow_changes" in out
    assert layout.config.read_text() == original and not layout.resume_configs()

    # allowed: the new lr is the one in effect (not the optimiser state's), both configs are kept
    longer = ["train", *TINY, "trainer.iterations=2", "trainer.update.lr=0.5", f"run_dir={run}", "resume=true"]
    assert main([*longer, "resume_allow_changes=true"]) == 0
    steps = [r for r in strict_json_lines(layout.metrics) if "reward" in r]
    assert [s["step"] for s in steps] == [1, 2, 3, 4] and [s["lr"] for s in steps] == [0.001, 0.001, 0.5, 0.5]
    assert layout.config.read_text() == original
    assert OmegaConf.load(layout.resume_config(2)).trainer["update"].lr == 0.5
    assert "from step 2 the run continues with trainer.update.lr 0.001 -> 0.5" in caplog.text

    # the next resume is held to the settings now in effect: naming the old lr is a change, leaving it out
    # continues at 0.5, and more iterations need no permission
    assert main(["train", *TINY, "trainer.update.lr=0.001", f"run_dir={run}", "resume=true"]) == 2
    assert "trainer.update.lr 0.5 -> 0.001" in capsys.readouterr().out
    assert main(["train", f"run_dir={run}", "trainer.iterations=3", "resume=true"]) == 0
    steps = [r for r in strict_json_lines(layout.metrics) if "reward" in r]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6] and [s["lr"] for s in steps[4:]] == [0.5, 0.5]


def test_resume_refuses_a_user_simulator_that_reads_replies_otherwise_unless_allowed(run, capsys, caplog):
    """Code that reads replies by other rules changes the run's environment though no setting changed: a run from
    an older SEAD is not continued as if it had met one user throughout. A run moved to another folder (its rules
    file now has another path) is the same environment."""
    layout = RunLayout(run)
    today = json.loads(layout.usersim.read_text())
    moved = {**today, "rules": f"/elsewhere/assets/{Path(today['rules']).name}"}
    layout.usersim.write_text(json.dumps(moved))
    assert main(["train", f"run_dir={run}", "trainer.iterations=2", "resume=true"]) == 0
    assert reward_steps(run) == [1, 2, 3, 4] and not layout.resume_usersims()

    older = {**moved, "agent_reading": today["agent_reading"] - 1}
    layout.usersim.write_text(json.dumps(older))
    further = ["train", f"run_dir={run}", "trainer.iterations=3", "resume=true"]
    assert main(further) == 2
    out = capsys.readouterr().out
    reading = f"user_simulator.agent_reading {older['agent_reading']} -> {today['agent_reading']}"
    assert reading in out and "usersim.json" in out and "resume_allow_changes" in out
    assert reward_steps(run) == [1, 2, 3, 4] and json.loads(layout.usersim.read_text()) == older

    assert main([*further, "resume_allow_changes=true"]) == 0
    assert reward_steps(run) == [1, 2, 3, 4, 5, 6]
    assert json.loads(layout.usersim.read_text()) == older  # what the first four steps met stays on record
    assert json.loads(layout.resume_usersim(4).read_text()) == today
    assert f"from step 4 the run continues with {reading}" in caplog.text
    # held from now on to the simulator in effect since step 4: the next resume needs no permission
    assert main(["train", f"run_dir={run}", "trainer.iterations=4", "resume=true"]) == 0
    assert reward_steps(run) == [1, 2, 3, 4, 5, 6, 7, 8] and list(layout.resume_usersims()) == [4]


def test_a_torn_simulator_record_is_named_and_a_run_without_one_gets_one_at_its_resume(run):
    layout = RunLayout(run)
    environment = json.loads(layout.usersim.read_text())
    cfg = load_config([f"run_dir={run}", "resume=true"])
    layout.usersim.write_text('{"name": "scri')
    with pytest.raises(SEADInputError, match="cannot read the run's user simulator record") as refused:
        resume_config(run, cfg, 2, environment)
    assert refused.value.path == layout.usersim and not layout.resume_usersims()
    layout.usersim.unlink()
    assert resume_config(run, cfg, 2, environment) == layout.config
    assert json.loads(layout.resume_usersim(2).read_text()) == environment


def test_a_resume_needs_only_the_run_dir_and_a_preset_named_on_it_is_a_change(run, capsys):
    """Started with a preset and overrides, `run_dir=R resume=true` continues under the run's own settings. A preset
    named on the resume sets what it changes, which the resume refuses like any change of a setting, naming it
    (it was once dropped for the run's own values without a word)."""
    before = RunLayout(run).config.read_text()
    cfg = load_config([f"run_dir={run}", "resume=true"])
    assert cfg.model.preset == "tiny" and cfg.trainer["update"].entropy_coef == 0.05
    assert cfg.trainer.iterations == 1 and str(cfg.run_dir) == str(run)
    assert load_config([f"run_dir={run}", "resume=true", "preset=cpu"]).dialogue.max_turns == 4
    assert main(["train", f"run_dir={run}", "resume=true", "preset=cpu"]) == 2
    out = capsys.readouterr().out
    assert "dialogue.max_turns 2 -> 4" in out and "resume_allow_changes" in out
    assert RunLayout(run).config.read_text() == before


def test_a_run_saved_with_a_retired_key_resumes_under_its_settings(run, caplog):
    """Runs from before `trainer.update.temperature` and `controller.update_every` were derived, or saved with
    `controller.concern_focus` off, still resume: the saved copies are dropped (with a warning), and the values
    now come from the keys they had to equal."""
    layout = RunLayout(run)
    saved = OmegaConf.load(layout.config)
    saved.trainer["update"].temperature = saved.trainer.sampling.temperature
    saved.controller.update_every = saved.trainer.steps_per_iteration
    saved.controller.concern_focus = 0
    layout.config.write_text(OmegaConf.to_yaml(saved))
    assert main(["train", f"run_dir={run}", "trainer.iterations=2", "resume=true"]) == 0
    assert reward_steps(run) == [1, 2, 3, 4]
    assert "trainer.update.temperature in config.yaml is no longer a setting" in caplog.text
    assert "controller.update_every in config.yaml is no longer a setting" in caplog.text
    assert "controller.concern_focus in config.yaml is no longer a setting" in caplog.text


def test_resume_of_a_folder_without_a_run_says_so(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for where in ("empty", "missing"):
        assert main(["train", *TINY, f"run_dir={tmp_path / where}", "resume=true"]) == 2
        assert f"{tmp_path / where} holds no run" in capsys.readouterr().out
    assert not RunLayout(tmp_path / "empty").config.exists()


def test_ctrl_c_prints_the_resume_command_and_leaves_a_run_that_resumes(tmp_path):
    run, args = tmp_path / "run", [*TINY[:-1], "trainer.iterations=3"]
    proc = subprocess.Popen(
        [SEAD, "train", *args, f"run_dir={run}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # as from a terminal: a test runner started in the background (`cmd &`) ignores SIGINT, and its children
        # would inherit that and never see the Ctrl-C
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 300
    while not (RunLayout(run).metrics.exists() and reward_steps(run)):
        assert time.time() < deadline and proc.poll() is None, "the run never logged a step"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 130, out
    assert "Traceback" not in out
    hints = [line for line in out.splitlines() if "resume with:" in line]
    assert len(hints) == 1
    command = shlex.split(hints[0].split("resume with: ", 1)[1])
    assert command == ["sead", "train", f"run_dir={run}", "resume=true"]  # the run's own settings apply
    assert 1 <= len(reward_steps(run)) < 6  # every line whole
    subprocess.run([SEAD, *command[1:]], check=True, capture_output=True, timeout=600)
    assert reward_steps(run) == [1, 2, 3, 4, 5, 6]


def test_a_torn_last_metrics_line_is_skipped_by_report_and_resume(run, caplog):
    from sead.eval.training_report import write_training_report

    metrics = RunLayout(run).metrics
    with metrics.open("a") as f:
        f.write('{"step": 3, "reward": 0.')  # killed mid-write
    assert write_training_report(run).exists()
    assert "metrics.jsonl:5: skipping the last line" in caplog.text
    assert main(["train", *TINY, f"run_dir={run}", "resume=true"]) == 0
    # the resume rewrote the file without the torn line: validation 0, steps 1 and 2, validation 1
    assert [r["step"] for r in strict_json_lines(metrics)] == [0, 1, 2, 2]
    lines = metrics.read_text().splitlines()
    metrics.write_text("\n".join([lines[0], "garbage", *lines[1:]]) + "\n")
    with pytest.raises(SEADInputError, match=r"metrics.jsonl:2: invalid JSON"):
        write_training_report(run)  # damage before the last line is not a torn write: named, not skipped


def test_a_torn_last_validation_dialogue_is_named_by_the_report(run, caplog):
    """The dialogue logs are read as metrics.jsonl is: a torn last line dropped with a warning, not in silence."""
    from sead.eval.training_report import write_training_report

    dialogues = RunLayout(run).validation_dialogues(1)  # the last validation: the report's dialogue viewer
    lines = dialogues.read_text().splitlines()
    dialogues.write_text("\n".join(lines) + '\n{"profile": {"values": ')  # killed mid-write
    assert write_training_report(run).exists()
    assert f"validation/iter_001.jsonl:{len(lines) + 1}: skipping the last line" in caplog.text
    dialogues.write_text("\n".join([lines[0], "garbage", *lines[1:]]) + "\n")
    with pytest.raises(SEADInputError, match=r"iter_001.jsonl:2: invalid JSON"):
        write_training_report(run)


@pytest.mark.parametrize("damage", ["{not json", "[1, 2]", "folder"])
def test_an_unreadable_machine_record_is_kept_aside_and_the_records_start_again(tmp_path, caplog, damage):
    from sead.models.precision import Precision
    from sead.run.machine import record_machine

    layout = RunLayout(tmp_path)
    if damage == "folder":
        layout.machine.mkdir()
    else:
        layout.machine.write_text(damage)
    record_machine(layout, Precision("float32", "float32", "cpu"), step=4)
    assert "machine.json is unreadable" in caplog.text and "kept as machine.json.unreadable" in caplog.text
    assert [r["from_step"] for r in json.loads(layout.machine.read_text())] == [4]
    assert layout.machine.with_name("machine.json.unreadable").exists()


def test_a_dead_user_simulator_fails_before_the_model_loads(tmp_path, capsys, monkeypatch):
    def no_loading(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("sead.trainer.loop.load_model", no_loading)
    dead = ["usersim=openai", "usersim.base_urls=[http://127.0.0.1:9/v1]"]
    assert main(["train", *TINY, *dead, f"run_dir={tmp_path / 'run'}"]) == 2
    assert "http://127.0.0.1:9/v1" in capsys.readouterr().out
    assert not (tmp_path / "run").exists()  # no empty run left behind


def test_a_run_that_fails_before_any_result_leaves_no_folder_but_never_removes_one_it_found(tmp_path, capsys):
    bad_model = ["preset=tiny", "model.preset=path", f"model.path={tmp_path / 'missing'}"]
    assert main(["train", *bad_model, f"run_dir={tmp_path / 'new'}"]) == 2
    assert "no config.json" in capsys.readouterr().out and not (tmp_path / "new").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's own file")
    assert main(["train", *bad_model, f"run_dir={mine}"]) == 2
    assert (mine / "notes.txt").read_text() == "the user's own file"


class DownForEveryOtherDialogue(UserSimulator):
    """The scripted user behind a link that is down for dialogues with an even seed (the runner passes each turn
    the dialogue's seed * 1000 + the turn's index)."""

    def __init__(self, inner):
        super().__init__(inner.scenario)
        self.inner = inner

    async def respond(self, profile, history, agent_response, *, seed):
        if seed // 1000 % 2 == 0:
            raise SimulatorError("connection refused")
        return await self.inner.respond(profile, history, agent_response, seed=seed)


def test_warmup_reference_cr_leaves_out_simulator_errors(tmp_path):
    from sead.trainer.warmup import warmup

    trainer = Trainer(
        load_config([*TINY, f"run_dir={tmp_path / 'run'}", "trainer.warmup.dialogues=6", "dialogue.user_retries=0"])
    )
    out = trainer.layout.warmup
    with Progress() as progress:
        summary = asyncio.run(
            warmup(
                trainer.tc.warmup,
                model=trainer.model,
                tokenizer=trainer.tokenizer,
                scenario=trainer.scenario,
                user=DownForEveryOtherDialogue(trainer.user),
                runner_cfg=trainer.runner_cfg,
                out=out,
                progress=progress,
            )
        )
    played = [json.loads(line) for line in out.dialogues.read_text().splitlines()]
    valid = [d for d in played if d["end_reason"] != "sim_error"]
    assert summary["sim_errors"] == len(played) - len(valid) == 3
    won = sum(d["success"] for d in valid)
    assert won > 0 and summary["reference_CR"] == won / len(valid)
    trainer.logger.close()
