"""How a training command takes its run directory (sead/run/start.py, contents.py, lock.py): a new run never writes
into a folder holding a run or a user's files, a failed start does not block its retry, a resume continues from
the checkpoint of the highest step that verifies, measures again what it replays, and never starts over from step
0 on top of checkpoints it cannot verify; one writer per folder, whatever happens to the `.lock` file."""

import json
import os
import shutil
from pathlib import Path

import pytest

from sead.cli.main import main
from sead.config import load_config
from sead.errors import SEADInputError
from sead.run.checkpoints import latest_checkpoint
from sead.run.layout import RunLayout
from sead.run.lock import folder_lock
from sead.run.start import start_or_resume

TINY = ["preset=tiny"]  # finished_run: 2 iterations of 2 steps, each saved, validated at steps 0, 2, 4
ENVIRONMENT = {"name": "scripted"}


def metrics_steps(run: Path) -> list[tuple[int, str]]:
    lines = [json.loads(line) for line in RunLayout(run).metrics.read_text().splitlines()]
    return [(r["step"], "validation" if "validation" in r else "step") for r in lines]


FINISHED = [(0, "validation"), (1, "step"), (2, "step"), (2, "validation"), (3, "step"), (4, "step"), (4, "validation")]


@pytest.mark.parametrize("changed", [[], ["trainer.update.lr=0.002", "resume_allow_changes=true"]])
def test_a_resume_that_replays_a_validated_step_measures_it_again(run, caplog, changed):
    layout = RunLayout(run)
    assert metrics_steps(run) == FINISHED
    (layout.checkpoint(4).path / "rng.pt").unlink()  # step 4's checkpoint no longer verifies: step 3's is resumed
    assert main(["train", f"run_dir={run}", "resume=true", *changed]) == 0
    assert "validation/iter_002.json measured step 4, which this resume from step 3 replays" in caplog.text
    assert metrics_steps(run) == FINISHED  # step 4 and its validation logged again, once each
    assert json.loads(layout.validation_metrics(2).read_text())["at"]["step"] == 4


def test_a_resume_never_starts_over_checkpoints_it_cannot_verify(run, capsys):
    """A run written before manifests: every checkpoint is intact but none verifies."""
    layout = RunLayout(run)
    for folder in layout.checkpoint_folders():
        (folder / "manifest.json").unlink()
    metrics = layout.metrics.read_bytes()
    before = sorted((p.relative_to(run), p.stat().st_size) for p in run.rglob("*") if p.is_file())
    assert main(["train", f"run_dir={run}", "resume=true"]) == 2
    out = capsys.readouterr().out
    assert "no checkpoint of this run verifies" in out and "Nothing was changed" in out
    assert "step_000004, step_000003, step_000002, step_000001" in out and "metrics.jsonl with 7 lines" in out
    assert "another run_dir" in out
    assert layout.metrics.read_bytes() == metrics
    assert sorted((p.relative_to(run), p.stat().st_size) for p in run.rglob("*") if p.is_file()) == before


def test_the_newest_checkpoint_is_the_highest_step_that_verifies_not_the_last_name(run, caplog):
    layout = RunLayout(run)
    shutil.copytree(layout.checkpoint(2).path, layout.checkpoints_dir / "step_best")  # a user's copy of step 2
    assert latest_checkpoint(run)[0] == layout.checkpoint(4).path
    assert "checkpoints/step_best: ignored, not a checkpoint's name" in caplog.text
    shutil.copytree(layout.checkpoint(2).path, layout.checkpoint(9).path)  # renamed by hand: its state is step 2's
    assert latest_checkpoint(run)[0] == layout.checkpoint(4).path
    assert "step_000009: skipped, its trainer state is of step 2, not of step 9" in caplog.text


def new_start(run_dir: Path):
    return start_or_resume(run_dir, load_config([f"run_dir={run_dir}"]), ENVIRONMENT)


def test_a_new_run_refuses_a_folder_with_a_users_files_and_leaves_them_as_they_were(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.yaml").write_text("my: own settings\n")
    with pytest.raises(SEADInputError, match=r"holds files that are not a SEAD run's \(config.yaml\)") as e:
        new_start(mine)
    assert e.value.field == "run_dir" and (mine / "config.yaml").read_text() == "my: own settings\n"
    (mine / "notes.txt").write_text("notes")
    with pytest.raises(SEADInputError, match=r"\(config.yaml, notes.txt\)"):
        new_start(mine)
    assert main(["train", *TINY, f"run_dir={mine}"]) == 2  # which takes the folder's lock first
    assert sorted(p.name for p in mine.iterdir()) == ["config.yaml", "notes.txt"]


def test_a_new_run_refuses_a_folder_holding_a_run(run):
    with pytest.raises(SEADInputError, match="already holds a run .metrics.jsonl with 7 lines; checkpoints"):
        new_start(run)


def test_a_failed_start_does_not_block_its_retry(tmp_path, caplog):
    """What a start that crashed before its first result leaves (config, simulator record, an empty metrics file,
    half a validation's dialogues) is taken over by the next start, not taken for a run."""
    failed = RunLayout(tmp_path / "run")
    failed.create()
    for path, text in [
        (failed.lock, "123\n"),
        (failed.config, "seed: 0\n"),
        (failed.usersim, "{}"),
        (failed.metrics, ""),
    ]:
        path.write_text(text)
    failed.validation_dialogues(0).write_text('{"profile": {}}\n')
    new_start(failed.path)
    assert "holds what a start that failed before its first result left" in caplog.text
    assert not failed.validation_dialogues(0).exists() and "run_dir" in failed.config.read_text()


@pytest.mark.parametrize(
    "where, named",
    [
        ("", "[run_dir]: is empty"),
        ("file", "file: is a file, not a folder"),
        ("file/sub/run", "file: is a file, so no folder can be made inside it for run_dir="),  # the file in the way
        ("loop", "loop [run_dir]: cannot be resolved"),
    ],
)
def test_a_run_dir_that_cannot_be_a_folder_is_named(tmp_path, capsys, monkeypatch, where, named):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("x")
    os.symlink("loop", tmp_path / "loop")
    assert main(["train", *TINY, f"run_dir={where}"]) == 2
    assert named in capsys.readouterr().out.replace(f"{tmp_path}/", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "loop"]


def test_deleting_the_lock_file_lets_no_second_writer_in(tmp_path):
    folder = tmp_path / "run"
    with folder_lock(folder):
        (folder / ".lock").unlink()
        with pytest.raises(SEADInputError, match="another process .PID unknown. is writing this run directory"):
            with folder_lock(folder):
                pass
    with folder_lock(folder):  # released once its holder is done
        assert (folder / ".lock").read_text().strip() == str(os.getpid())


@pytest.mark.parametrize(
    "change, named",
    [
        ("trainer.lora.enabled=true", "trainer.lora.enabled False -> True"),  # once a traceback: no adapter to load
        ("trainer.update.estimator=ppo", "trainer.update.estimator 'grpo' -> 'ppo'"),  # no value head in it
    ],
)
def test_a_resume_cannot_change_what_its_checkpoint_was_made_under(run, capsys, change, named):
    before = sorted(p.name for p in run.iterdir())
    assert main(["train", f"run_dir={run}", "resume=true", "resume_allow_changes=true", change]) == 2
    out = capsys.readouterr().out
    assert f"cannot change {named}, even with resume_allow_changes=true" in out and "model.path=" in out
    assert sorted(p.name for p in run.iterdir()) == before
