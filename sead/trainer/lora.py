"""Optional LoRA (peft): train small adapters instead of the whole model.

The KL reference is then the same network with its adapters switched off, so no second copy of the model is
held in memory (what makes a 7B-14B agent fit one GPU). Checkpoints keep both the adapter (for an exact
resume) and the merged model (a plain HF folder for evaluation and serving).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

from sead.config import number


@dataclass
class LoraSettings:
    # train low-rank adapters instead of every weight; the KL reference is the base with the adapters off (no
    # second copy of the model), checkpoints hold the adapter and the merged model
    enabled: bool = False
    r: int = number(16, ge=1, le=4096)  # the adapters' rank
    alpha: int = number(32, ge=1, le=65_536)  # their scale: the update is alpha / r times the low-rank product
    dropout: float = number(0.0, ge=0, lt=1)  # dropout on the adapters' input
    target_modules: list[str] = field(  # the linear layers that get adapters
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


def wrap(model, cfg: LoraSettings, adapter_dir: Path | None = None):
    """Add trainable adapters, fresh or restored from a checkpoint's adapter folder."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if adapter_dir is not None:
        return PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=True)
    return get_peft_model(
        model,
        LoraConfig(
            r=cfg.r,
            lora_alpha=cfg.alpha,
            lora_dropout=cfg.dropout,
            target_modules=list(cfg.target_modules),
            task_type="CAUSAL_LM",
        ),
    )


def is_lora(model) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "merge_and_unload")


def save(model, tokenizer, *, model_dir: Path, adapter_dir: Path) -> None:
    """The merged model as a plain HF folder, and the adapter alone, for resuming."""
    model.save_pretrained(adapter_dir)
    merged = copy.deepcopy(model).merge_and_unload()
    merged.save_pretrained(model_dir, safe_serialization=True)
    tokenizer.save_pretrained(model_dir)
