"""Where each file of a run directory lives. Both training backends write a run through this class and every reader
(`sead eval`, `sead report`, `sead audit-mask`, the benchmarks) finds its files through it, so a path is spelled
here and nowhere else:

  .lock                         the PID of the one process writing the run (its flock is on the folder)
  config.yaml                   the resolved config the run started with (frozen once it has a checkpoint)
  config.resume_NNNNNN.yaml     the config a resume from step NNNNNN ran with, where it differs
  usersim.json                  the user simulator's identity and settings, and how agent turns are read
  usersim.resume_NNNNNN.json    the same for a resume from step NNNNNN, where it differs (resume_allow_changes)
  machine.json                  CPU, flags, torch, threads and the precision chosen, one record per start (embedded)
  rollouts/step_NNNNNN.jsonl    every training dialogue (profile, transcript, statuses, reward, token ids + mask)
  rollouts/branches_NNNNNN.jsonl  the step's branched dialogues (trainer.branch), which start from a replayed prefix
  validation/iter_NNN.json(l)   validation dialogues (.jsonl) and their metrics (.json); 0 = before training
  validation/base.json(l)       the same for the base model, before a warm-up (trainer.validation.before_warmup)
  controller/                   update reports (JSON + heat map); state_iter_NNN.json after each iteration
  metrics.jsonl, tensorboard/   per-step numbers, one strict-JSON line per record
  checkpoints/step_NNNNNN/      model/ (HF, safetensors; LoRA merged; the weights' average with trainer.weight_ema),
                                policy/ (the live policy, with trainer.weight_ema only), adapter/ (LoRA), optimizer.pt
                                (with PPO's value head), rng.pt, trainer_state.json (step, controller, counters),
                                manifest.json
  warmup/                       dialogues.jsonl of the reference agent, the warmed model/, summary.json (embedded)
  warmup/epoch<k>/              the same after epoch k of a longer warm-up (trainer.warmup.keep_epochs)
  response_cache.jsonl          user replies kept for replay (dialogue.response_cache, embedded)
  verl/iter_NNN/                verl's own files of one iteration (verl backend)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PARTIAL = ".partial"  # suffix of a checkpoint folder still being written
CHECKPOINT_NAME = re.compile(r"step_(\d+)((?:\.partial)?)")  # what `RunLayout.checkpoint` names a folder
BASE_MODEL = "base"  # the validation of the model before any warm-up, beside the iterations'


def _validation_stem(iteration: int | str) -> str:
    if iteration == BASE_MODEL:
        return BASE_MODEL
    if isinstance(iteration, int):
        return f"iter_{iteration:03d}"
    raise ValueError(f"a validation is an iteration number or {BASE_MODEL!r}, not {iteration!r}")


class Entry:
    """A file or folder of fixed name inside a folder object's `path`: declared once as a class attribute, read as
    the full path on an instance."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, folder, owner=None):
        return self if folder is None else folder.path / self.name


@dataclass(frozen=True)
class CheckpointFolder:
    """One checkpoint, checkpoints/step_NNNNNN/ (step_NNNNNN.partial/ while it is written)."""

    path: Path
    model = Entry("model")  # the run's model: what validation measured
    policy = Entry("policy")  # the weights rollouts sample from, where they differ from model/ (trainer.weight_ema)
    adapter = Entry("adapter")
    optimizer = Entry("optimizer.pt")
    rng = Entry("rng.pt")
    trainer_state = Entry("trainer_state.json")


@dataclass(frozen=True)
class WarmupFolder:
    """A run's warmup/, which another run may start from (trainer.warmup.reuse)."""

    path: Path
    model = Entry("model")
    summary = Entry("summary.json")
    dialogues = Entry("dialogues.jsonl")

    def epoch(self, k: int) -> WarmupFolder:
        """The model after epoch `k` of a longer warm-up (`trainer.warmup.keep_epochs`), itself a reusable warm-up."""
        return WarmupFolder(self.path / f"epoch{k}")


@dataclass(frozen=True)
class RunLayout:
    path: Path
    lock = Entry(".lock")
    config = Entry("config.yaml")
    usersim = Entry("usersim.json")
    machine = Entry("machine.json")
    metrics = Entry("metrics.jsonl")
    tensorboard = Entry("tensorboard")
    rollouts_dir = Entry("rollouts")
    validation_dir = Entry("validation")
    controller_dir = Entry("controller")
    checkpoints_dir = Entry("checkpoints")
    response_cache = Entry("response_cache.jsonl")

    def resume_config(self, step: int) -> Path:
        return resume_record(self.config, step)

    def resume_configs(self) -> dict[int, Path]:
        """Every resume record of the config, by the step it resumed from."""
        return resume_records(self.config)

    def resume_usersim(self, step: int) -> Path:
        return resume_record(self.usersim, step)

    def resume_usersims(self) -> dict[int, Path]:
        return resume_records(self.usersim)

    def rollouts(self, step: int) -> Path:
        return self.rollouts_dir / f"step_{step:06d}.jsonl"

    def branch_rollouts(self, step: int) -> Path:
        return self.rollouts_dir / f"branches_{step:06d}.jsonl"

    def branch_sources(self, step: int) -> Path:
        """The reference agent's dialogues a step's branches were cut from (trainer.branch.source=reference)."""
        return self.rollouts_dir / f"branch_sources_{step:06d}.jsonl"

    def rollout_files(self) -> list[Path]:
        return sorted(self.rollouts_dir.glob("step_*.jsonl"))

    def validation_dialogues(self, iteration: int | str) -> Path:
        return self.validation_dir / f"{_validation_stem(iteration)}.jsonl"

    def validation_metrics(self, iteration: int | str) -> Path:
        """An iteration's validation metrics, or BASE_MODEL's (the model before a warm-up)."""
        return self.validation_dir / f"{_validation_stem(iteration)}.json"

    def validated_iterations(self) -> list[int]:
        """The iterations whose validation metrics are on disk, in order."""
        return sorted(int(p.stem.split("_")[1]) for p in self.validation_dir.glob("iter_*.json"))

    def controller_state(self, iteration: int) -> Path:
        return self.controller_dir / f"state_iter_{iteration:03d}.json"

    def checkpoint(self, step: int) -> CheckpointFolder:
        return CheckpointFolder(self.checkpoints_dir / f"step_{step:06d}")

    def partial_checkpoint(self, step: int) -> CheckpointFolder:
        return CheckpointFolder(self.checkpoints_dir / f"step_{step:06d}{PARTIAL}")

    def checkpoint_folders(self) -> list[Path]:
        """Every checkpoint folder, complete or partial, highest step first (a partial one before the complete one
        of its step: it is the newer write). Folders of other names (a copy named `step_best`) are not listed: a
        name's sort order is not its step."""
        root = self.checkpoints_dir
        if not root.is_dir():
            return []
        steps = {p: checkpoint_step(p) for p in root.iterdir()}
        named = [(step, p.name.endswith(PARTIAL), p) for p, step in steps.items() if step is not None]
        return [p for *_, p in sorted(named, reverse=True)]

    @property
    def warmup(self) -> WarmupFolder:
        return WarmupFolder(self.path / "warmup")

    def verl_iteration(self, iteration: int) -> Path:
        return self.path / "verl" / f"iter_{iteration:03d}"

    def create(self) -> None:
        """The folders every backend writes into."""
        for folder in (self.rollouts_dir, self.validation_dir, self.controller_dir, self.checkpoints_dir):
            folder.mkdir(parents=True, exist_ok=True)


def checkpoint_step(folder: Path) -> int | None:
    """The step of a checkpoint folder's name (step_NNNNNN or step_NNNNNN.partial), None for any other name."""
    m = CHECKPOINT_NAME.fullmatch(folder.name)
    return int(m[1]) if m else None


def resume_record(original: Path, step: int) -> Path:
    """Beside a file a run starts with (config.yaml), the one a resume from `step` ran with
    (config.resume_NNNNNN.yaml)."""
    return original.with_name(f"{original.stem}.resume_{step:06d}{original.suffix}")


def resume_records(original: Path) -> dict[int, Path]:
    """Every resume record of `original`, by the step it resumed from."""
    found = {}
    for path in original.parent.glob(f"{original.stem}.resume_*{original.suffix}"):
        step = path.stem.rpartition("_")[2]
        if step.isdigit():
            found[int(step)] = path
    return found
