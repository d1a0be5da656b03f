"""The space of user states: named integer dimensions, which of them a profile samples, and their ranges."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sead.errors import SEADInputError

# User states are small scales (cooperation 0-4): a dimension's values and the joint states the controller weighs
# are built as lists, so ranges past these are refused before anything is built (a `high: 1000000000` typed for a
# small number would take minutes and gigabytes).
MAX_VALUES = 1001  # values of one dimension, low to high
MAX_JOINT_STATES = 100_000  # joint states the controller samples from: the product of the allowed values' counts


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
    def from_config(cls, cfg: Mapping, *, field: str = "scenario.dimensions") -> ProfileSpace:
        if not isinstance(cfg, Mapping) or not cfg:
            raise SEADInputError("must map dimension names to {low, high, sampled, allowed}", field=field)
        space = cls(tuple(_dimension(str(name), spec, f"{field}.{name}") for name, spec in cfg.items()))
        if not space.sampled:
            raise SEADInputError("no dimension is marked sampled: true", field=field)
        joint = math.prod(len(d.allowed) for d in space.sampled)
        if joint > MAX_JOINT_STATES:
            counts = " x ".join(f"{len(d.allowed)} ({d.name})" for d in space.sampled)
            raise SEADInputError(
                f"the sampled dimensions make {joint} joint states ({counts}), more than the {MAX_JOINT_STATES} "
                "the controller weighs; narrow their `allowed` values or sample fewer dimensions",
                field=field,
            )
        return space

    def check_value(self, name: str, value, *, path=None, line=None) -> int:
        """Validate one reported or profile value; raise naming the field when it is not a legal integer."""
        dim = self[name]
        # is_integer also turns away NaN (a missing parquet cell) and infinity, which int() cannot convert.
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
            raise SEADInputError(f"{value!r} is not an integer", path=path, line=line, field=name)
        if not dim.contains(int(value)):
            raise SEADInputError(f"{value} is out of range {dim.low}-{dim.high}", path=path, line=line, field=name)
        return int(value)


_DIMENSION_KEYS = {"low", "high", "sampled", "allowed"}


def _dimension(name: str, spec, field: str) -> Dimension:
    if not isinstance(spec, Mapping):
        raise SEADInputError("must be a mapping {low, high, sampled, allowed}", field=field)
    unknown = sorted(set(spec) - _DIMENSION_KEYS)
    if unknown:
        raise SEADInputError(
            f"unknown key(s) {unknown} (known: {sorted(_DIMENSION_KEYS)})", field=f"{field}.{unknown[0]}"
        )
    low, high = _integer(spec.get("low"), f"{field}.low"), _integer(spec.get("high"), f"{field}.high")
    if low > high:
        raise SEADInputError(f"low {low} is above high {high}", field=field)
    if high - low + 1 > MAX_VALUES:
        raise SEADInputError(
            f"{low}-{high} holds {high - low + 1} values; a user-state dimension holds at most {MAX_VALUES}",
            field=field,
        )
    sampled = spec.get("sampled", True)
    if not isinstance(sampled, bool):
        raise SEADInputError(f"must be true or false, got {sampled!r}", field=f"{field}.sampled")
    allowed = spec.get("allowed")
    if allowed is None:
        allowed = list(range(low, high + 1))
    elif not isinstance(allowed, (list, tuple)):
        raise SEADInputError(f"must be a list of integers, got {allowed!r}", field=f"{field}.allowed")
    allowed = [_integer(v, f"{field}.allowed") for v in allowed]
    bad = [v for v in allowed if not low <= v <= high]
    if bad:
        raise SEADInputError(f"allowed values {bad} fall outside {low}-{high}", field=f"{field}.allowed")
    if sampled and not allowed:
        raise SEADInputError("a sampled dimension needs at least one allowed value", field=f"{field}.allowed")
    return Dimension(name, low, high, sampled, tuple(sorted(set(allowed))))


def _integer(value, field: str) -> int:
    # bool is an int subclass: `low: yes` must not read as 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise SEADInputError(f"must be an integer, got {value!r}", field=field)
    return value


def normalise_distribution(dist: Mapping, dim: Dimension, *, field: str, tol: float = 1e-3) -> dict[int, float]:
    """Check a marginal {value: probability}: only sampled values carry weight, none negative, summing to 1.

    Weight on a value the controller never samples is refused rather than renormalised away: the distribution
    actually drawn would otherwise differ from the one written, without a word.
    """
    if not isinstance(dist, Mapping) or not dist:
        raise SEADInputError("must map values to probabilities, e.g. {1: 0.5, 2: 0.5}", field=field)
    out: dict[int, float] = {}
    for k, p in dist.items():
        try:
            v = int(k)
        except (TypeError, ValueError):
            raise SEADInputError(f"key {k!r} is not an integer value", field=field) from None
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise SEADInputError(f"probability of {v} must be a number in [0, 1], got {p!r}", field=field)
        if p > 0 and v not in dim.allowed:
            raise SEADInputError(
                f"puts weight {p} on {v}, which the scenario never samples (allowed: "
                f"{list(dim.allowed)}; edit scenario.dimensions.{dim.name}.allowed to sample it)",
                field=field,
            )
        if v in dim.allowed:
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
        for value, marginal in zip(state, marginals, strict=True):
            w *= marginal.get(value, 0.0)
        weights.append(w)
    total = sum(weights)
    if total <= 0:
        raise SEADInputError("the marginals put no mass on any allowed state", field="controller.marginals")
    return [w / total for w in weights]
