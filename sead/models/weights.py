"""Telling whether a model's weights have changed, without comparing them."""

from __future__ import annotations


def weights_version(model) -> int:
    """Changes with every in-place update of the parameters (their version counters): an optimiser step, a
    `load_state_dict` into the rollout copy. Caches built from the weights key on it."""
    return sum(p._version for p in model.parameters())
