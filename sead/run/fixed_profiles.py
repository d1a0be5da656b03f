"""Profiles drawn by the `fixed` rule (the scenario's default marginals, never reweighted), so that a set depends on
its seed alone: the held-out validation set of both training backends, the warm-up's dialogues and the test sets of
`sead eval`."""

from __future__ import annotations

from sead.controller import ProfileController, make_curriculum
from sead.scenario.profiles import Profile
from sead.scenario.scenario import Scenario


def fixed_profiles(scenario: Scenario, n: int, seed: int) -> list[Profile]:
    rule = make_curriculum("fixed", scenario.space, scenario.default_marginals)
    return ProfileController(scenario, rule, seed=seed).sample(n)
