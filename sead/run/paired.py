"""Two models measured on the same held-out dialogues, compared dialogue by dialogue. Validation gives every dialogue
the episode id `val{profile index}-{trial}` and a seed fixed by those two numbers, so the same id in two runs with
the same validation settings is the same user and the same simulator draws (an evaluation's `p{profile}-t{trial}`
likewise, on one test set and seed): a paired design, where McNemar's test needs only the dialogues one model
completed and the other did not."""

from __future__ import annotations

import re
from pathlib import Path

from sead.dialogue.batch import EpisodeJob
from sead.dialogue.rollout_log import read_rollouts
from sead.dialogue.seeds import validation_episode_seed
from sead.scenario.profiles import Profile
from sead.stats import mcnemar_exact

VALIDATION_ID = re.compile(r"val(\d+)-(\d+)")


def validation_jobs(profiles: list[Profile], seed: int, trials: int) -> list[EpisodeJob]:
    """A validation's dialogues: each profile `trials` times, under the id and seed its (profile, trial) fixes."""
    return [
        EpisodeJob(p, seed=validation_episode_seed(seed, i, trial), episode_id=f"val{i}-{trial}", group=i)
        for i, p in enumerate(profiles)
        for trial in range(trials)
    ]


def held_out_outcomes(path: Path, ids: re.Pattern = VALIDATION_ID) -> dict[tuple[int, int], dict]:
    """Held-out dialogues (a validation's, or an evaluation's with `ids` = `sead.eval.run.EVAL_ID`) by (profile index,
    trial), read from the episode id: the profile and whether the user completed (None for a dialogue the simulator
    broke off: it says nothing about the agent)."""
    outcomes = {}
    for record in read_rollouts(path):
        episode_id = record["meta"]["episode_id"]
        match = ids.fullmatch(episode_id)
        if match is None:
            raise ValueError(f"{path}: {episode_id!r} is not a held-out dialogue id ({ids.pattern})")
        key = (int(match[1]), int(match[2]))
        if key in outcomes:
            raise ValueError(f"{path}: dialogue {episode_id} appears twice")
        success = None if record["end_reason"] == "sim_error" else bool(record["success"])
        outcomes[key] = {"profile": record["profile"], "success": success}
    return outcomes


def paired_comparison(a: dict[tuple[int, int], dict], b: dict[tuple[int, int], dict]) -> dict:
    """Completion of model a against model b on the same dialogues: the four cells of the paired table and the
    exact McNemar p-value. Refuses two sets that are not the same dialogues with the same users."""
    if a.keys() != b.keys():
        raise ValueError(
            f"not the same held-out dialogues: {len(a.keys() - b.keys())} only in the first, "
            f"{len(b.keys() - a.keys())} only in the second"
        )
    differing = [key for key in a if a[key]["profile"] != b[key]["profile"]]
    if differing:
        profile, trial = differing[0]
        raise ValueError(f"{len(differing)} dialogues pose different users, e.g. profile {profile}, trial {trial}")
    pairs = [(a[k]["success"], b[k]["success"]) for k in sorted(a)]
    scored = [(x, y) for x, y in pairs if x is not None and y is not None]
    only_a = sum(x and not y for x, y in scored)
    only_b = sum(y and not x for x, y in scored)
    both = sum(x and y for x, y in scored)
    return {
        "pairs": len(scored),
        "sim_errors": len(pairs) - len(scored),  # pairs dropped: a simulator error on either side
        "both": both,
        "only_a": only_a,
        "only_b": only_b,
        "neither": len(scored) - both - only_a - only_b,
        "gain_points": 100 * (only_a - only_b) / len(scored) if scored else None,
        "p_mcnemar": mcnemar_exact(only_a, only_b),
    }
