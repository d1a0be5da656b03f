"""The profile controller: phase 1 (sample user profiles) and phase 4 (reweight from completion rates).

All of its state (weights, statistics, RNG, counters) round-trips through JSON, so a run restored from a
checkpoint draws exactly the profiles an uninterrupted run would have drawn.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from sead.controller.curriculum import CurriculumRule
from sead.controller.stats import CompletionStats, state_label
from sead.errors import SEADInputError
from sead.scenario.profiles import Profile
from sead.scenario.scenario import Scenario


class ProfileController:
    def __init__(
        self,
        scenario: Scenario,
        rule: CurriculumRule,
        *,
        seed: int,
        update_every: int = 10,
        window: int = 1,
    ):
        if update_every < 1:
            raise SEADInputError(f"must be >= 1, got {update_every}", field="trainer.steps_per_iteration")
        if window < 1:
            raise SEADInputError(f"must be >= 1, got {window}", field="controller.window")
        self.scenario, self.rule, self.update_every = scenario, rule, update_every
        self.states = rule.states
        self.dims = scenario.space.sampled_names
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.probs = rule.initial()
        self.window = CompletionStats(self.dims)  # dialogues since the last update
        # the windows of the updates before it that the rule still reads: with few dialogues per update over many
        # joint states, one window leaves most states below the rule's min_count, so it could never act
        self.earlier: deque[CompletionStats] = deque(maxlen=window - 1)
        self.steps = 0
        self.updates = 0
        self.drawn = 0

    def sample(self, n: int) -> list[Profile]:
        lo, hi = self.scenario.behaviours_per_profile
        texts = [b.text for b in self.scenario.library.behaviours]
        out = []
        for _ in range(n):
            state = self.states[self.rng.choice(len(self.states), p=self.probs)]
            k = int(self.rng.integers(lo, hi + 1))
            picks = self.rng.choice(len(texts), size=k, replace=False)
            out.append(Profile.make(dict(zip(self.dims, (int(v) for v in state))), [texts[i] for i in picks]))
        self.drawn += n
        return out

    def observe(self, profile: Profile, success: bool | None) -> None:
        """Record one finished dialogue. `success=None` marks a simulator error: counted apart, never a failure."""
        if success is None:
            self.window.sim_errors += 1
            return
        self.window.record(profile.key(), success)

    def end_step(self) -> dict | None:
        """Count a training step; every `update_every` steps, reweight and return the update report."""
        self.steps += 1
        if self.steps % self.update_every:
            return None
        return self.update()

    def read(self) -> CompletionStats:
        """What the rule reweights from: this window pooled with the earlier ones kept."""
        return CompletionStats.pooled([*self.earlier, self.window])

    def update(self) -> dict:
        old, stats = list(self.probs), self.read()
        new, reason = self.rule.update(stats, old)
        self.probs = new
        self.updates += 1
        report = self._report(stats, old, new, reason)
        self.earlier.append(self.window)  # with window 1 (maxlen 0) nothing is kept
        self.window = CompletionStats(self.dims)
        return report

    def marginals(self, probs: list[float] | None = None) -> dict[str, dict[int, float]]:
        probs = self.probs if probs is None else probs
        out = {d: {} for d in self.dims}
        for state, p in zip(self.states, probs):
            for d, v in zip(self.dims, state):
                out[d][v] = out[d].get(v, 0.0) + p
        return {d: dict(sorted(m.items())) for d, m in out.items()}

    def _report(self, w: CompletionStats, old: list[float], new: list[float], reason: str) -> dict:
        per_value = {}
        for i, d in enumerate(self.dims):
            per_value[d] = {str(v): {"n": n, "cr": s / n} for v, (n, s) in w.per_value(i).items()}
        per_state = {}
        for state, p_old, p_new in zip(self.states, old, new):
            n, cr = w.state_rate(state)
            per_state[state_label(state)] = {"n": n, "cr": cr, "old_weight": p_old, "new_weight": p_new}
        return {
            "update": self.updates,
            "step": self.steps,
            "rule": self.rule.name,
            "reason": reason,
            "dims": list(self.dims),
            "windows": len(self.earlier) + 1,
            "dialogues": w.total,
            "sim_errors": w.sim_errors,
            "completion_rate": w.completion_rate(),
            "target": self.rule.target,
            "cr_per_value": per_value,
            "per_state": per_state,
            "old_marginals": _str_keys(self.marginals(old)),
            "new_marginals": _str_keys(self.marginals(new)),
        }

    def state_dict(self) -> dict:
        return {
            "rule": self.rule.name,
            "states": [state_label(s) for s in self.states],
            "probs": list(self.probs),
            "window": self.window.to_dict(),
            "earlier": [w.to_dict() for w in self.earlier],
            "steps": self.steps,
            "updates": self.updates,
            "drawn": self.drawn,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, d: dict) -> None:
        if d.get("rule") != self.rule.name or d.get("states") != [state_label(s) for s in self.states]:
            raise SEADInputError(
                f"saved controller (rule {d.get('rule')!r}) does not match this config "
                f"(rule {self.rule.name!r} over {len(self.states)} states)",
                field="controller",
            )
        if d.get("behaviour_probs") is not None or d.get("concern_focus"):
            # saved by a version that drew behaviours by concern kind: these draws would go on another way
            raise SEADInputError(
                "the saved controller drew behaviours by concern kind (concern_focus), which is no longer a "
                "setting: resuming would draw other profiles; start a new run from its weights",
                field="controller",
            )
        self.probs = [float(p) for p in d["probs"]]
        self.window = CompletionStats.from_dict(d["window"])
        self.earlier.clear()  # a state saved before windows were kept has none; one kept longer keeps its newest
        self.earlier.extend(CompletionStats.from_dict(w) for w in d.get("earlier", []))
        self.steps, self.updates, self.drawn = int(d["steps"]), int(d["updates"]), int(d["drawn"])
        self.rng.bit_generator.state = d["rng"]


def _str_keys(marginals: dict[str, dict[int, float]]) -> dict[str, dict[str, float]]:
    return {d: {str(v): p for v, p in m.items()} for d, m in marginals.items()}
