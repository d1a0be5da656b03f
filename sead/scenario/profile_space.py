"""The space of user states: named integer dimensions, which of them a profile samples, and their ranges."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable, Mapping

from sead.errors import SEADInputError


@dataclass(frozen=True)
class Dimension:
    """One integer user-state dimension, e.g. cooperation 0-4.

    `allowed` are the values the controller may sample (the original excluded the extremes by default);
    every value in [low, high] is still a legal report from the simulator.
    """

    name: str
    low: int
    high: int
    sampled: bool
    allowed: tuple[int, ...]

    @property
    def span(self) -> int:
        return self.high - self.low

    def contains(self, value: int) -> bool:
        return self.low <= value <= self.high


@dataclass(frozen=True)
class ProfileSpace:
    dimensions: tuple[Dimension, ...]

    @property
    def sampled(self) -> tuple[Dimension, ...]:
        return tuple(d for d in self.dimensions if d.sampled)

    @property
    def sampled_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.sampled)

    def __getitem__(self, name: str) -> Dimension:
        for d in self.dimensions:
            if d.name == name:
                return d
        raise KeyError(name)

    def states(self) -> list[tuple[int, ...]]:
        """Every joint state the controller may sample, in a fixed (lexicographic) order."""
        return list(itertools.product(*(d.allowed for d in self.sampled)))

    @classmethod
    def from_config(cls, cfg: Mapping, *, field: str = "scenario.dimensions") -> "ProfileSpace":
        if not cfg:
            raise SEADInputError("at least one dimension is required", field=field)
        dims = []
        for name, spec in cfg.items():
            f = f"{field}.{name}"
            try:
                low, high = int(spec["low"]), int(spec["high"])
            except (KeyError, TypeError, ValueError):
                raise SEADInputError("needs integer 'low' and 'high'", field=f) from None
            if low > high:
                raise SEADInputError(f"low {low} is above high {high}", field=f)
            sampled = bool(spec.get("sampled", True))
            allowed = spec.get("allowed")
            allowed = tuple(range(low, high + 1)) if allowed is None else tuple(int(v) for v in allowed)
            bad = [v for v in allowed if not low <= v <= high]
            if bad:
                raise SEADInputError(f"allowed values {bad} fall outside {low}-{high}", field=f"{f}.allowed")
            if sampled and not allowed:
                raise SEADInputError("a sampled dimension needs at least one allowed value", field=f"{f}.allowed")
            dims.append(Dimension(str(name), low, high, sampled, tuple(sorted(set(allowed)))))
        space = cls(tuple(dims))
        if not space.sampled:
            raise SEADInputError("no dimension is marked sampled: true", field=field)
        return space

    def check_value(self, name: str, value, *, path=None, line=None) -> int:
        """Validate one reported or profile value; raise naming the field when it is not a legal integer."""
        dim = self[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise SEADInputError(f"{value!r} is not an integer", path=path, line=line, field=name)
        if not dim.contains(int(value)):
            raise SEADInputError(f"{value} is out of range {dim.low}-{dim.high}", path=path, line=line, field=name)
        return int(value)


def normalise_distribution(dist: Mapping, dim: Dimension, *, field: str, tol: float = 1e-3) -> dict[int, float]:
    """Check a marginal {value: probability}: values in range, non-negative, summing to 1 (within tol)."""
    out: dict[int, float] = {}
    for k, p in dist.items():
        try:
            v = int(k)
        except (TypeError, ValueError):
            raise SEADInputError(f"key {k!r} is not an integer value", field=field) from None
        if not dim.contains(v):
            raise SEADInputError(f"value {v} is out of range {dim.low}-{dim.high}", field=field)
        if float(p) < 0:
            raise SEADInputError(f"probability of {v} is negative ({p})", field=field)
        out[v] = float(p)
    total = sum(out.values())
    if abs(total - 1.0) > tol:
        raise SEADInputError(f"probabilities sum to {total:.4f}, not 1", field=field)
    return {v: p / total for v, p in sorted(out.items())}


def joint_from_marginals(states: Iterable[tuple[int, ...]], marginals: list[Mapping[int, float]]) -> list[float]:
    """Product distribution over joint states from per-dimension marginals (renormalised over `states`)."""
    weights = []
    for state in states:
        w = 1.0
        for value, marginal in zip(state, marginals):
            w *= marginal.get(value, 0.0)
        weights.append(w)
    total = sum(weights)
    if total <= 0:
        raise SEADInputError("the marginals put no mass on any allowed state", field="controller.marginals")
    return [w / total for w in weights]
