"""Dataclass schema of the `trainer` config group: config keys map 1:1 to these fields."""

from __future__ import annotations

from dataclasses import dataclass, field

from sead.config import number, one_of
from sead.trainer.lora import LoraSettings
from sead.trainer.policy import SamplingConfig
from sead.trainer.update import UpdateConfig
from sead.trainer.warmup import WarmupConfig


@dataclass
class ValidationConfig:
    profiles: int = number(30, ge=1)
    trials: int = number(1, ge=1)
    seed: int = number(4242, ge=0)
    at_start: bool = True  # also validate before the first RL step (after any warm-up), not only after iterations
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=0.0, top_p=1.0))


@dataclass
class LoggingConfig:
    tensorboard: bool = True
    wandb: bool = False
    wandb_mode: str = one_of("offline", "online", "disabled")


@dataclass
class TrainerConfig:
    iterations: int = number(5, ge=1)
    steps_per_iteration: int = number(10, ge=1)
    profiles_per_step: int = number(60, ge=1)
    rollouts_per_profile: int = number(8, ge=1)  # GRPO group size n
    save_every: int = number(5, ge=1)  # steps
    max_batch: int = number(64, ge=1)  # rows per batched generation call
    turn_cache_mb: float = number(4096, ge=0)  # memory for dialogues' keys/values kept between turns (0 = off)
    # training-time budget (warm-up + RL steps, not validation); once one RL step has been timed, none is started
    # that would overrun it; None = off
    max_minutes: float | None = number(None, gt=0)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
