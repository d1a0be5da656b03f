"""How an agent samples its tokens: a config leaf (no torch), shared by training, validation and evaluation."""

from __future__ import annotations

from dataclasses import dataclass

from sead.config import number


@dataclass
class SamplingConfig:
    temperature: float = number(1.2, ge=0)  # 0 = greedy
    top_p: float = number(0.95, gt=0, le=1)  # nucleus sampling: the smallest set of tokens holding this much mass
    top_k: int = number(0, ge=0)  # only the k likeliest tokens; 0 = off
