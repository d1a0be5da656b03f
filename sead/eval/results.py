"""results.json of one evaluated model: every metric (from sead.metrics, the one definition), pass^k, CR per
state value and per joint state, the hack monitors (scenarios with a rules file), tokens and cost, and everything
needed to reproduce the numbers."""

from __future__ import annotations

import platform
from collections.abc import Sequence
from importlib import metadata

from sead.dialogue import Episode
from sead.hack_monitor import HackMonitor
from sead.metrics import completion, compute_metrics
from sead.scenario import ProfileSpace
from sead.stats import pass_hat_k, summarise

PACKAGES = ("sead", "torch", "transformers", "openai", "numpy")


def cr_by_state(episodes: Sequence[Episode], space: ProfileSpace, *, seed: int = 0) -> dict:
    """CR per value of each sampled dimension, and per joint state ("1-2-3" in sampled-dimension order)."""
    valid = [e for e in episodes if not e.sim_error]
    per_value: dict[str, dict[str, dict]] = {}
    for i, dim in enumerate(space.sampled_names):
        groups: dict[int, list[float]] = {}
        for e in valid:
            groups.setdefault(e.profile.key()[i], []).append(completion(e))
        per_value[dim] = {str(v): summarise(groups[v], seed=seed, rate=True) for v in sorted(groups)}
    joint: dict[tuple, list[float]] = {}
    for e in valid:
        joint.setdefault(e.profile.key(), []).append(completion(e))
    return {
        "dimensions": list(space.sampled_names),
        "per_value": per_value,
        "per_joint_state": {
            "-".join(map(str, k)): {"CR": sum(v) / len(v), "n": len(v)} for k, v in sorted(joint.items())
        },
    }


def pass_hat(episodes: Sequence[Episode], profile_index: Sequence[int], trials: int) -> dict:
    """pass^1..pass^k over the profiles' k trials (simulator errors leave a profile with fewer trials)."""
    outcomes: dict[int, list[bool]] = {}
    for e, i in zip(episodes, profile_index):
        if not e.sim_error:
            outcomes.setdefault(i, []).append(e.success)
    return {f"pass^{k}": pass_hat_k(list(outcomes.values()), k) for k in range(1, trials + 1)}


def build_results(
    episodes: Sequence[Episode],
    space: ProfileSpace,
    info: dict,
    *,
    seed: int,
    trials: int,
    prices: dict,
    agent_params: int | None,
    monitor: HackMonitor | None = None,
) -> dict:
    m = compute_metrics(episodes, space, seed=seed, prices=prices, monitor=monitor)
    return {
        **m,
        "pass_hat_k": pass_hat(episodes, info["profile_index"], trials) if trials > 1 else {},
        "cr_by_state": cr_by_state(episodes, space, seed=seed),
        "agent_params": agent_params,
        "prices_per_million_tokens": prices,
        "wall_time_s": info["wall_time_s"],
        "dialogues_played": info["dialogues_played"],
        "dialogues_resumed": info["dialogues_resumed"],
        "settings": info["settings"],
        "versions": versions(),
    }


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out
