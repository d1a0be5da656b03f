"""How an agent samples its tokens: a config leaf (no torch), shared by training, validation and evaluation."""

from __future__ import annotations

from dataclasses import dataclass

from sead.config import MAX_TEMPERATURE, MIN_TEMPERATURE, number


@dataclass
class SamplingConfig:
    temperature: float = number(1.2, ge=MIN_TEMPERATURE, le=MAX_TEMPERATURE, also=(0,))  # 0 = greedy
    top_p: float = number(0.95, gt=0, le=1)  # nucleus sampling: the smallest set of tokens holding this much mass
    top_k: int = number(0, ge=0, le=1_000_000)  # only the k likeliest tokens; 0 = off
