"""Statistics over dialogues, one definition each: a mean with its CI (a bootstrap's, or Wilson's for a rate), the
Wilson interval of a rate, McNemar's exact test of two models on the same dialogues, and pass^k over repeated
trials."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction

import numpy as np


def summarise(values: Iterable[float | None], *, seed: int = 0, resamples: int = 2000, rate: bool = False) -> dict:
    """Mean, sample std, 95% CI and count, ignoring None. The CI is a seeded percentile bootstrap's, or with
    `rate` (values are 0/1 outcomes) Wilson's."""
    x = np.array([v for v in values if v is not None], dtype=float)
    if x.size == 0:
        return {"mean": None, "std": None, "ci95": [None, None], "n": 0}
    std = float(x.std(ddof=1)) if x.size > 1 else 0.0
    if rate:
        return {"mean": float(x.mean()), "std": std, "ci95": wilson_interval(int(x.sum()), x.size), "n": int(x.size)}
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {"mean": float(x.mean()), "std": std, "ci95": [float(lo), float(hi)], "n": int(x.size)}


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> list[float]:
    """95% Wilson score interval of a binomial rate: 0 of 128 gives [0, 0.029], where a bootstrap gives [0, 0]."""
    if not 0 <= successes <= n or n == 0:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got {successes} of {n}")
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # the interval holds the rate; at 0 or n of n rounding could leave it a hair outside (a negative error bar)
    return [min(p, max(0.0, centre - half)), max(p, min(1.0, centre + half))]


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar test of two models on the same dialogues, from the discordant pairs: `only_a`
    dialogues only the first completed, `only_b` only the second. With no difference each discordant pair goes
    either way with probability 1/2, so p is twice the binomial tail of the rarer side, capped at 1 (10 vs 0
    gives 2 / 2**10). Integer arithmetic: exact at any count, where 0.5**n would underflow past n = 1074."""
    if only_a < 0 or only_b < 0:
        raise ValueError(f"discordant counts must be >= 0, got {only_a} and {only_b}")
    n = only_a + only_b
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1))
    return min(1.0, float(Fraction(2 * tail, 2**n)))


def pass_hat_k(trials: Sequence[Sequence[bool]], k: int) -> float | None:
    """pass^k: chance that k trials of one profile ALL succeed, estimated without bias per profile as
    C(c, k) / C(n, k) from n trials with c successes, then averaged over profiles with n >= k."""
    scores = [math.comb(sum(t), k) / math.comb(len(t), k) for t in trials if len(t) >= k]
    return float(np.mean(scores)) if scores else None
