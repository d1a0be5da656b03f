"""The models a run trains: the policy, the KL reference and the tokenizer, fresh or from a checkpoint."""

from __future__ import annotations

import copy
from pathlib import Path

from sead.models.loading import ModelConfig, load_model
from sead.run.layout import CheckpointFolder
from sead.trainer import lora
from sead.trainer.schema import TrainerConfig


def build_models(model_cfg: ModelConfig, tc: TrainerConfig, resume: Path | None, warmed: Path, master: str):
    """(policy, KL reference or None, tokenizer, label), with weights in `master` precision. The reference is the
    base model, or the warmed-up model once a warm-up made one; with LoRA it is the policy's own base under
    switched-off adapters (no second copy)."""
    ref_model, tokenizer, label = load_model(model_cfg, master)
    if resume and (warmed / "config.json").exists():
        ref_model = load_model(model_cfg.at(warmed), master)[0]
    checkpoint = CheckpointFolder(resume) if resume else None
    if tc.lora.enabled:
        return lora.wrap(ref_model, tc.lora, checkpoint.adapter if checkpoint else None), None, tokenizer, label
    model = load_model(model_cfg.at(policy_weights(checkpoint)), master)[0] if checkpoint else copy.deepcopy(ref_model)
    ref = frozen(ref_model) if tc.update.kl_coef else None
    return model, ref, tokenizer, label


def frozen(model):
    """`model` as the KL reference: evaluation mode, no gradient."""
    return model.eval().requires_grad_(False)


def frozen_copy(model):
    """A KL reference with `model`'s weights as they are now."""
    return frozen(copy.deepcopy(model))


def policy_weights(checkpoint: CheckpointFolder) -> Path:
    """The live policy's weights: policy/ where the checkpoint's model/ holds their average (trainer.weight_ema)."""
    return checkpoint.policy if checkpoint.policy.is_dir() else checkpoint.model
