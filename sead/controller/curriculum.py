"""Curriculum rules: how completion statistics reweight the sampling distribution over joint user states.

Every rule maps (statistics of the last window, current joint distribution) to a new joint distribution and a
one-line reason. The distribution is always over `ProfileSpace.states()` in that fixed order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

from sead.controller.stats import CompletionStats
from sead.errors import SEADInputError
from sead.scenario.profile_space import ProfileSpace, joint_from_marginals

CURRICULA: dict[str, type[CurriculumRule]] = {}


def register(name: str):
    def deco(cls):
        cls.name = name
        CURRICULA[name] = cls
        return cls

    return deco


class CurriculumRule(ABC):
    name: str

    def __init__(
        self,
        space: ProfileSpace,
        marginals: Mapping[str, Mapping[int, float]],
        *,
        target: float = 0.5,
        band: float = 0.1,
        eps: float = 0.05,
        min_count: int = 1,
    ):
        if not 0.0 <= target <= 1.0:
            raise SEADInputError(f"target {target} must lie in [0, 1]", field="controller.target")
        if band < 0 or eps <= 0 or min_count < 1:
            raise SEADInputError("need band >= 0, eps > 0 and min_count >= 1", field="controller")
        self.space, self.target, self.band, self.eps, self.min_count = space, target, band, eps, min_count
        self.states = space.states()
        self.initial_marginals = [dict(marginals[d.name]) for d in space.sampled]

    def initial(self) -> list[float]:
        return joint_from_marginals(self.states, self.initial_marginals)

    @abstractmethod
    def update(self, stats: CompletionStats, current: list[float]) -> tuple[list[float], str]:
        """New joint distribution and the reason for it."""


@register("fixed")
class FixedCurriculum(CurriculumRule):
    """The given marginals, never changed (the original's first iteration)."""

    def update(self, stats, current):
        return list(current), "fixed rule: weights do not change"


@register("sead_marginal")
class SeadMarginalCurriculum(CurriculumRule):
    """The original code's rule, per dimension, around a target completion rate with a +-band.

    With d = CR - target over the window:
    - d < -band (too hard): w(v) = 1 + 2|d| * SR(v), favouring values where the agent succeeds more;
    - d > +band (too easy): w(v) = 1 + 2d * (1 - SR(v)), favouring harder values;
    - otherwise: w(v) = 1 + 0.1 / n(v), near uniform with a nudge toward rarely seen values.
    An unseen value counts as SR = 0.5, n = 1. Weights are normalised per dimension, then multiplied out.
    """

    def update(self, stats, current):
        cr = stats.completion_rate()
        if cr is None or stats.total < self.min_count:
            return list(current), f"only {stats.total} dialogues (< min_count {self.min_count}): weights kept"
        d = cr - self.target
        if d < -self.band:
            branch, rule = "too hard", lambda sr, n: 1 + 2 * abs(d) * sr
        elif d > self.band:
            branch, rule = "too easy", lambda sr, n: 1 + 2 * d * (1 - sr)
        else:
            branch, rule = "on target", lambda sr, n: 1 + 0.1 / n
        marginals = []
        for i, dim in enumerate(self.space.sampled):
            seen = stats.per_value(i)
            weights = {}
            for v in dim.allowed:
                n, s = seen.get(v, (0, 0))
                weights[v] = rule(s / n if n else 0.5, n if n else 1)
            total = sum(weights.values())
            marginals.append({v: w / total for v, w in weights.items()})
        return (
            joint_from_marginals(self.states, marginals),
            f"CR {cr:.3f} vs target {self.target:.2f} +- {self.band:.2f}: {branch}",
        )


@register("sead_joint")
class SeadJointCurriculum(CurriculumRule):
    """The paper's rule over joint states: p(s) proportional to max(eps, 1 - |CR(s) - target|).

    A state with fewer than `min_count` dialogues in the window counts as being at the target.
    """

    def update(self, stats, current):
        weights, seen = [], 0
        for state in self.states:
            n, cr = stats.state_rate(state)
            if n < self.min_count or cr is None:
                cr = self.target
            else:
                seen += 1
            weights.append(max(self.eps, 1.0 - abs(cr - self.target)))
        total = sum(weights)
        return (
            [w / total for w in weights],
            f"{seen}/{len(self.states)} states with >= {self.min_count} dialogues; others at target {self.target:.2f}",
        )


def make_curriculum(name: str, space: ProfileSpace, marginals, **params) -> CurriculumRule:
    if name not in CURRICULA:
        raise SEADInputError(
            f"unknown curriculum {name!r}; choose one of {', '.join(sorted(CURRICULA))}", field="controller.rule"
        )
    return CURRICULA[name](space, marginals, **params)
