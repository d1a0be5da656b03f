"""The embedded trainer's checkpoint: HF model (or LoRA adapter + merged model), optimiser (and PPO value head),
RNG states and trainer state, written through `sead.run.checkpoints` (temporary folder, manifest, rename)."""

from __future__ import annotations

import errno
import random
from pathlib import Path

import numpy as np
import torch

from sead.run.checkpoints import commit_checkpoint, new_checkpoint_dir
from sead.run.layout import CheckpointFolder
from sead.trainer import lora


def save_checkpoint(run_dir: Path, step: int, **parts) -> None:
    """Write step `step`'s checkpoint (see `_write` for `parts`). A write that fails (a full or read-only disk)
    leaves a partial folder, which a resume skips; the error is an OSError naming it, whatever library wrote."""
    from safetensors import SafetensorError

    tmp = new_checkpoint_dir(run_dir, step)
    try:
        _write(tmp, **parts)
    except (RuntimeError, SafetensorError) as e:  # torch.save and safetensors report a failed write this way
        problem = " ".join(str(e).split())[:200]
        raise OSError(errno.EIO, f"writing the checkpoint failed ({problem}); is the disk full?", str(tmp.path)) from e
    commit_checkpoint(run_dir, step, parts["state"])


def _write(tmp, *, model, tokenizer, updater, state: dict, averaged=None) -> None:
    """`averaged`: the weights' average (trainer.weight_ema), once it exists; it becomes model/, the live policy
    policy/."""
    if lora.is_lora(model):
        lora.save(model, tokenizer, model_dir=tmp.model, adapter_dir=tmp.adapter)
    else:
        saved = {tmp.model: model} if averaged is None else {tmp.model: averaged, tmp.policy: model}
        for folder, weights in saved.items():
            weights.save_pretrained(folder, safe_serialization=True)
            tokenizer.save_pretrained(folder)
    critic = updater.estimator.critic
    # "value_head": the key checkpoints have always had for PPO's critic
    torch.save(
        {
            "optimizer": updater.opt.state_dict(),
            "scheduler": updater.sched.state_dict(),
            "value_head": None if critic is None else critic.state_dict(),
        },
        tmp.optimizer,
    )
    torch.save({"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}, tmp.rng)


def load_training_state(path: Path, updater) -> None:
    folder = CheckpointFolder(path)
    opt = torch.load(folder.optimizer, weights_only=False)
    updater.opt.load_state_dict(opt["optimizer"])
    updater.sched.load_state_dict(opt["scheduler"])
    # Both state dicts carry the lr and weight decay they were made with; the config in effect decides (the same
    # values, unless resume_allow_changes let them change).
    lr, sched = updater.cfg.lr, updater.sched
    sched.base_lrs = [lr for _ in updater.opt.param_groups]
    for group, scale in zip(updater.opt.param_groups, sched.lr_lambdas, strict=True):
        group.update(lr=lr * scale(sched.last_epoch), initial_lr=lr, weight_decay=updater.cfg.weight_decay)
    critic = updater.estimator.critic
    if critic is not None:
        if opt.get("value_head") is None:
            raise ValueError(f"{path} has no value head: it was written by a run with another estimator")
        critic.load_state_dict(opt["value_head"])
    rng = torch.load(folder.rng, weights_only=False)
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
