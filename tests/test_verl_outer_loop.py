"""The verl backend's outer loop and fail-fast paths, without verl: a fake verl run plays each row through the
same `play_row` the agent loop calls, so the run directory, controller feedback, checkpoints and resume are
tested on CPU in seconds. (What runs inside verl is tested in test_verl_backend.py.)"""

import asyncio
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl_fakes import verl_run_config

from sead.cli.main import main
from sead.errors import SEADInputError
from sead.policy.scripted import ReferenceAgent
from sead.run.checkpoints import latest_checkpoint
from sead.run.layout import RunLayout
from sead.run.lock import run_dir_lock
from sead.run.manifest import manifest_problem
from sead.verl_backend.episode_io import RunPlays, dialogue_of_row, load_context, play_row
from sead.verl_backend.launcher import check_sead_config, verl_settings
from sead.verl_backend.outer_loop import VerlTrainer, train_with_verl
from sead.verl_backend.preflight import check_gpus, gpu_plan

ROOT = Path(__file__).resolve().parent.parent
FAST = [
    "trainer.iterations=2",
    "trainer.steps_per_iteration=2",
    "trainer.profiles_per_step=2",
    "trainer.rollouts_per_profile=2",
    "trainer.validation.profiles=2",
]


class FakeVerl:
    """What one `python -m verl.trainer.main_ppo` run leaves behind, read off the overrides it is given:
    validation before training (first run) and after the last step, every training row n times, the HF export
    and verl's metrics file."""

    def __init__(self):
        self.runs: list[dict] = []

    def __call__(self, overrides, env, log_file):
        o = dict(x.lstrip("+").split("=", 1) for x in overrides)
        self.runs.append(o)
        spi, batch, n, trials = (
            int(o[k])
            for k in (
                "trainer.total_training_steps",
                "data.train_batch_size",
                "actor_rollout_ref.rollout.n",
                "actor_rollout_ref.rollout.val_kwargs.n",
            )
        )
        loop = yaml.safe_load(open(o["actor_rollout_ref.rollout.agent.agent_loop_config_path"]))[0]
        # agent loop and reward read one config: the one in effect (a resume may have its own file)
        assert o["reward.custom_reward_function.reward_kwargs.sead_config"] == loop["sead_config"]
        ctx = load_context(loop["sead_config"])
        tok = AutoTokenizer.from_pretrained(o["actor_rollout_ref.model.path"])
        agent = ReferenceAgent(ctx.scenario, tok)
        plays = RunPlays(Path(loop["plays_file"]), loop["steps_per_iteration"], tuple(loop["validations"]), n, trials)
        train = pd.read_parquet(o["data.train_files"]).to_dict("records")
        val = pd.read_parquet(o["data.val_files"]).to_dict("records")
        # as verl's legacy trainer plays them: the rows alone, each n times (validation: trials times)
        rounds = [(val, trials)] if o["trainer.val_before_train"] == "True" else []
        rounds += [(train[(s - 1) * batch : s * batch], n) for s in range(1, spi + 1)] + [(val, trials)]

        async def play_all():
            for rows, times in rounds:
                await asyncio.gather(
                    *(
                        play_row(
                            ctx,
                            agent,
                            tok,
                            extra_info=r["extra_info"],
                            plays=plays,
                            response_length=int(o["data.max_response_length"]),
                        )
                        for r in rows
                        for _ in range(times)
                    )
                )

        asyncio.run(play_all())
        hf = Path(o["trainer.default_local_dir"]) / f"global_step_{spi}" / "actor" / "huggingface"
        shutil.copytree(o["actor_rollout_ref.model.path"], hf)
        Path(env["VERL_FILE_LOGGER_PATH"]).write_text(
            "".join(json.dumps({"step": s, "data": {"actor/kl_loss": 0.01 * s}}) + "\n" for s in range(1, spi + 1))
        )


def test_outer_loop_writes_the_embedded_run_layout_and_feeds_the_controller(tmp_path):
    cfg, scenario = verl_run_config(tmp_path, *FAST)
    fake = FakeVerl()
    run = VerlTrainer(cfg, runner=fake).run()
    layout = RunLayout(run)
    steps = [json.loads(l) for l in layout.metrics.read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert steps[0]["dialogues"] == 4 and 0 <= steps[0]["CR"] <= 1 and steps[1]["verl"] == {"actor/kl_loss": 0.02}
    assert [s.get("controller_update") is not None for s in steps] == [False, True, False, True]
    # the step record and validation metrics both backends write (sead.run.steps)
    assert {"reward", "reward_components", "CR", "turns", "UPA", "sim_errors", "controller_marginals"} <= set(steps[0])
    assert json.loads(layout.validation_metrics(1).read_text())["at"] == {"step": 2, "train_minutes": None}
    reports = [layout.controller_dir / f"controller_update_{k:03d}.json" for k in (1, 2)]
    assert sorted(layout.controller_dir.glob("*.json")) == sorted(
        [*reports, layout.controller_state(1), layout.controller_state(2)]
    )
    assert layout.validated_iterations() == [0, 1, 2]
    rec = json.loads(layout.rollouts(3).read_text().splitlines()[0])
    assert rec["meta"]["reward"]["components"] and rec["segments"][0]["mask"] and rec["meta"]["step"] == 3
    assert layout.config.exists() and json.loads(layout.usersim.read_text())["name"] == "scripted"
    # Each verl run starts from the previous iteration's weights; the profiles are the controller's draws.
    path, state = latest_checkpoint(run)
    assert path == layout.checkpoint(4).path and state["step"] == 4 and state["backend"] == "verl"
    assert manifest_problem(path) is None  # checked on resume like the embedded trainer's
    assert fake.runs[1]["actor_rollout_ref.model.path"] == str(layout.checkpoint(2).model)
    assert [r["trainer.val_before_train"] for r in fake.runs] == ["True", "False"]
    drawn = [
        json.loads(r["extra_info"]["profile"])
        for r in pd.read_parquet(fake.runs[0]["data.train_files"]).to_dict("records")
    ][:2]
    played = [json.loads(l)["profile"] for l in layout.rollouts(1).read_text().splitlines()]
    assert sorted(map(json.dumps, played)) == sorted(map(json.dumps, drawn * 2))  # step 1: its rows, n=2 each

    # Resume after iteration 1: the controller state comes back, and iteration 2 draws the same profiles.
    second = fake.runs[1]["data.train_files"]
    before = pd.read_parquet(second).to_dict("records")
    shutil.rmtree(layout.checkpoint(4).path)
    shutil.rmtree(layout.verl_iteration(1))
    again = FakeVerl()
    VerlTrainer(OmegaConf.merge(cfg, {"resume": True}), runner=again).run()
    assert len(again.runs) == 1 and pd.read_parquet(second).to_dict("records") == before
    assert [json.loads(l)["step"] for l in layout.metrics.read_text().splitlines()] == [1, 2, 3, 4]
    with pytest.raises(SEADInputError, match="already holds a run"):
        VerlTrainer(cfg, runner=fake)
    # the same run directory rules as the embedded trainer: frozen settings, one writer
    with pytest.raises(SEADInputError, match="trainer.profiles_per_step 2 -> 3"):
        VerlTrainer(OmegaConf.merge(cfg, {"resume": True, "trainer": {"profiles_per_step": 3}}), runner=fake)
    with run_dir_lock(run), pytest.raises(SEADInputError, match=f"PID {os.getpid()}"):
        train_with_verl(OmegaConf.merge(cfg, {"resume": True}), runner=fake)


def _claims(path, row, times):
    plays = RunPlays(path, 1, (1,), 1, 1)
    return [plays.claim(row) for _ in range(times)]


def test_each_play_of_a_row_is_its_own_dialogue_with_nothing_but_the_row(tmp_path):
    """verl's legacy trainer hands the agent loop the row alone, n times: the row says its step and its place among
    the step's profiles, the count of its plays so far its rollout (validation: which validation, which trial)."""
    plays = RunPlays(tmp_path / "plays.txt", steps_per_iteration=2, validations=(0, 1), group_size=3, val_trials=2)
    row = {"index": 7, "split": "train", "step": 4, "group": 1, "profile": "{}"}
    ids = [dialogue_of_row(row, plays.claim(row), plays).episode_id for _ in range(3)]
    assert ids == ["train-s4-p1-r0", "train-s4-p1-r1", "train-s4-p1-r2"]
    assert plays.claim({**row, "group": 2}) == 0 and plays.claim({**row, "step": 5}) == 0
    val = {"index": 0, "split": "val", "group": 0, "profile": "{}"}
    played = [dialogue_of_row(val, plays.claim(val), plays) for _ in range(4)]
    assert [(d.step, d.session) for d in played] == [(0, 0), (0, 1), (2, 0), (2, 1)]  # before training, then after
    # agent-loop workers are processes of their own: their claims on one row never collide
    with multiprocessing.get_context("fork").Pool(4) as pool:
        claimed = pool.starmap(_claims, [(tmp_path / "shared.txt", row, 25)] * 4)
    assert sorted(sum(claimed, [])) == list(range(100))


@pytest.mark.parametrize(
    "override,field",
    [
        ("trainer.update.estimator=ppo", "trainer.update.estimator"),
        ("dialogue.max_total_tokens=99999", "verl.max_response_length"),
        ("dialogue.max_context_tokens=4096", "dialogue.max_context_tokens"),
        ("verl.tensor_parallel=4", "verl.tensor_parallel"),
        ("trainer.update.mini_batches=3", "trainer.update.mini_batches"),  # does not divide 2 profiles
        ("+verl.bogus=1", "verl"),
    ],
)
def test_config_the_verl_backend_cannot_run_names_the_field(tmp_path, override, field):
    cfg, _ = verl_run_config(tmp_path, override)
    with pytest.raises(SEADInputError) as e:
        check_sead_config(cfg, verl_settings(cfg))
    assert e.value.field.startswith(field)


@pytest.mark.parametrize("preset", ["gpu1", "gpu8"])
def test_every_verl_setting_can_be_overridden_under_any_preset(tmp_path, preset):
    cfg, _ = verl_run_config(
        tmp_path, f"preset={preset}", "verl.gradient_checkpointing=false", "verl.param_offload=true"
    )
    vs = verl_settings(cfg)
    assert (vs.gradient_checkpointing, vs.param_offload) == (False, True)


def test_gpu_checks_and_the_gpu_split(tmp_path):
    cfg, _ = verl_run_config(tmp_path, "preset=gpu8")
    with pytest.raises(SEADInputError, match="has none"):
        check_gpus(verl_settings(cfg), 0)
    with pytest.raises(SEADInputError, match="6 training GPUs"):
        check_gpus(verl_settings(cfg), 4)
    assert gpu_plan(cfg, 8)["TRAIN_GPUS"] == "0,1,2,3,4,5" and gpu_plan(cfg, 8)["USERSIM_GPUS"] == "6,7"
    one, _ = verl_run_config(tmp_path / "one")
    assert gpu_plan(one, 1)["TRAIN_GPUS"] == "0" == gpu_plan(one, 1)["USERSIM_GPUS"]  # gpu1 shares its GPU


def test_train_with_verl_fails_fast_without_gpus(tmp_path, capsys):
    assert main(["train", "backend=verl", "preset=gpu1", f"model.path={tmp_path}", f"run_dir={tmp_path / 'run'}"]) == 2
    out = capsys.readouterr().out
    assert "needs NVIDIA GPUs" in out and "backend" in out
    assert not (tmp_path / "run").exists()  # nothing written, nothing started


def test_main_sh_with_verl_fails_fast_on_a_machine_without_gpus():
    t0 = time.monotonic()
    r = subprocess.run(
        ["bash", str(ROOT / "scripts" / "main.sh"), "backend=verl", "preset=gpu8"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 2 and "needs NVIDIA GPUs" in r.stderr
    assert time.monotonic() - t0 < 10  # before any install or server start


def test_sead_and_its_verl_launcher_never_import_verl():
    code = (
        "import sys, sead, sead.cli.commands, sead.trainer.loop, sead.verl_backend.outer_loop, "
        "sead.verl_backend.preflight, sead.verl_backend.reward_fn; "
        "sys.exit(1 if any(m == 'verl' or m.startswith('verl.') for m in sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0
