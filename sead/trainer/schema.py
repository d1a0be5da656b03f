"""Dataclass schema of the `trainer` config group: config keys map 1:1 to these fields."""

from __future__ import annotations

from dataclasses import dataclass, field

from sead.trainer.lora import LoraSettings
from sead.trainer.policy import SamplingConfig
from sead.trainer.update import UpdateConfig
from sead.trainer.warmup import WarmupConfig


@dataclass
class ValidationConfig:
    profiles: int = 30
    trials: int = 1
    seed: int = 4242
    at_start: bool = True   # also validate before the first RL step (after any warm-up), not only after iterations
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=0.0, top_p=1.0))


@dataclass
class LoggingConfig:
    tensorboard: bool = True
    wandb: bool = False
    wandb_mode: str = "offline"


@dataclass
class TrainerConfig:
    iterations: int = 5
    steps_per_iteration: int = 10
    profiles_per_step: int = 60
    rollouts_per_profile: int = 8       # GRPO group size n
    save_every: int = 5
    max_batch: int = 64                 # rows per batched generation call
    turn_cache_mb: float = 4096         # memory for dialogues' keys/values kept between turns (0 = off)
    # training-time budget (warm-up + RL steps, not validation); once one RL step has been timed, none is started
    # that would overrun it; None = off
    max_minutes: float | None = None
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
