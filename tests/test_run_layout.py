"""The run directory's layout is a promise to users (docs/architecture.md) and to every reader of a run, so
its paths are pinned here, spelled out once; everything else, code and tests, builds them through RunLayout."""

import json
from pathlib import Path

from sead.run.checkpoints import commit_checkpoint, latest_checkpoint, new_checkpoint_dir
from sead.run.layout import CheckpointFolder, RunLayout, WarmupFolder


def test_every_path_of_a_run_directory_is_the_documented_one():
    root = Path("/runs/exp1")
    run = RunLayout(root)
    assert {
        name: str(path.relative_to(root))
        for name, path in {
            "lock": run.lock,
            "config": run.config,
            "resume_config": run.resume_config(12),
            "usersim": run.usersim,
            "resume_usersim": run.resume_usersim(12),
            "metrics": run.metrics,
            "tensorboard": run.tensorboard,
            "rollouts": run.rollouts(7),
            "branch_rollouts": run.branch_rollouts(7),
            "branch_sources": run.branch_sources(7),
            "validation_dialogues": run.validation_dialogues(3),
            "validation_metrics": run.validation_metrics(3),
            "controller_state": run.controller_state(2),
            "checkpoint": run.checkpoint(40).path,
            "partial_checkpoint": run.partial_checkpoint(40).path,
            "warmup": run.warmup.path,
            "response_cache": run.response_cache,
            "verl_iteration": run.verl_iteration(1),
        }.items()
    } == {
        "lock": ".lock",
        "config": "config.yaml",
        "resume_config": "config.resume_000012.yaml",
        "usersim": "usersim.json",
        "resume_usersim": "usersim.resume_000012.json",
        "metrics": "metrics.jsonl",
        "tensorboard": "tensorboard",
        "rollouts": "rollouts/step_000007.jsonl",
        "branch_rollouts": "rollouts/branches_000007.jsonl",
        "branch_sources": "rollouts/branch_sources_000007.jsonl",
        "validation_dialogues": "validation/iter_003.jsonl",
        "validation_metrics": "validation/iter_003.json",
        "controller_state": "controller/state_iter_002.json",
        "checkpoint": "checkpoints/step_000040",
        "partial_checkpoint": "checkpoints/step_000040.partial",
        "warmup": "warmup",
        "response_cache": "response_cache.jsonl",
        "verl_iteration": "verl/iter_001",
    }
    ckpt = CheckpointFolder(root / "checkpoints" / "step_000040")
    assert [p.name for p in (ckpt.model, ckpt.adapter, ckpt.optimizer, ckpt.rng, ckpt.trainer_state)] == [
        "model",
        "adapter",
        "optimizer.pt",
        "rng.pt",
        "trainer_state.json",
    ]
    warm = WarmupFolder(root / "warmup")
    assert [p.name for p in (warm.model, warm.summary, warm.dialogues)] == ["model", "summary.json", "dialogues.jsonl"]


def test_listings_read_back_what_was_written_in_numeric_order(tmp_path):
    run = RunLayout(tmp_path / "run")
    run.create()
    assert all(d.is_dir() for d in (run.rollouts_dir, run.validation_dir, run.controller_dir, run.checkpoints_dir))
    for step in (10, 2, 9):
        run.rollouts(step).write_text("")
        run.branch_rollouts(step).write_text("")  # a step's branches are not whole dialogues: not listed with them
        run.branch_sources(step).write_text("")  # nor the reference agent's dialogues they were cut from
    for iteration in (10, 0, 9):
        run.validation_metrics(iteration).write_text("{}")
        run.validation_dialogues(iteration).write_text("")
    for step in (100, 99):
        run.resume_config(step).write_text("")
    run.resume_usersim(7).write_text("{}")
    (run.path / "config.resume_latest.yaml").write_text("")  # not a step: not a record
    assert run.rollout_files() == [run.rollouts(2), run.rollouts(9), run.rollouts(10)]
    assert run.validated_iterations() == [0, 9, 10]
    assert run.resume_configs() == {99: run.resume_config(99), 100: run.resume_config(100)}
    assert run.resume_usersims() == {7: run.resume_usersim(7)}


def test_checkpoints_are_committed_into_the_layout_and_found_newest_first(tmp_path, caplog):
    run = RunLayout(tmp_path / "run")
    for step in (1, 2):
        tmp = new_checkpoint_dir(run.path, step)
        assert tmp == run.partial_checkpoint(step)
        tmp.model.mkdir()
        (tmp.model / "config.json").write_text("{}")
        assert commit_checkpoint(run.path, step, {"step": step}) == run.checkpoint(step)
        assert not tmp.path.exists()
    new_checkpoint_dir(run.path, 3)  # a run killed while writing step 3
    assert run.checkpoint_folders() == [run.partial_checkpoint(3).path, run.checkpoint(2).path, run.checkpoint(1).path]
    assert latest_checkpoint(run.path) == (run.checkpoint(2).path, {"step": 2})
    assert json.loads(run.checkpoint(2).trainer_state.read_text()) == {"step": 2}
    assert "checkpoints/step_000003.partial: skipped" in caplog.text
