"""Atomic, self-checking checkpoints. A checkpoint folder is written under a temporary name and renamed only
once complete; on resume, a partial or corrupt one is skipped with a warning and the previous one is used."""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from sead.trainer import lora

log = logging.getLogger(__name__)
COMPLETE = "COMPLETE"


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step_{step:06d}"


def save_checkpoint(run_dir: Path, step: int, *, model, tokenizer, updater, state: dict) -> Path:
    final = step_dir(run_dir, step)
    tmp = final.with_name(final.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    if lora.is_lora(model):
        lora.save(model, tokenizer, tmp)
    else:
        model.save_pretrained(tmp / "model", safe_serialization=True)
        tokenizer.save_pretrained(tmp / "model")
    head = updater.value_head.state_dict() if updater.value_head is not None else None
    torch.save({"optimizer": updater.opt.state_dict(), "scheduler": updater.sched.state_dict(), "value_head": head},
               tmp / "optimizer.pt")
    torch.save({"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
               tmp / "rng.pt")
    (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1), encoding="utf-8")
    (tmp / COMPLETE).write_text(str(step))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return final


def _valid(path: Path) -> dict | None:
    try:
        if not (path / COMPLETE).exists() or not (path / "model" / "config.json").exists():
            return None
        return json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def latest_checkpoint(run_dir: Path) -> tuple[Path, dict] | None:
    """The newest complete checkpoint; anything newer that is incomplete or unreadable is reported."""
    root = run_dir / "checkpoints"
    if not root.exists():
        return None
    for path in sorted(root.glob("step_*"), reverse=True):
        if path.name.endswith(".partial"):
            log.warning("ignoring partial checkpoint %s (the run stopped while writing it)", path)
            continue
        state = _valid(path)
        if state is None:
            log.warning("checkpoint %s is incomplete or corrupt; falling back to an earlier one", path)
            continue
        return path, state
    return None


def load_training_state(path: Path, updater) -> None:
    opt = torch.load(path / "optimizer.pt", weights_only=False)
    updater.opt.load_state_dict(opt["optimizer"])
    updater.sched.load_state_dict(opt["scheduler"])
    if updater.value_head is not None:
        if opt.get("value_head") is None:
            raise ValueError(f"{path} has no value head: it was written by a run with another estimator")
        updater.value_head.load_state_dict(opt["value_head"])
    rng = torch.load(path / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
