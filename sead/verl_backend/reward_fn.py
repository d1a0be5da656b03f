"""The reward verl's reward workers compute, set as `reward.custom_reward_function` (pkg://sead.verl_backend.reward_fn).

verl's naive reward manager merges the agent loop's extra fields into `extra_info`, so the whole episode record
is there; the score is the run's `EpisodeScorer` of it, the same scorer the embedded trainer and the agent loop's
rollout records use. The decoded `solution_str` is not read: it mixes agent and user text, and the record already
has both, parsed.
"""

from __future__ import annotations

from dataclasses import fields

from sead.dialogue.episode import Episode
from sead.reward import RewardWeights
from sead.verl_backend.episode_io import load_context

# Every component has a weight, so the weights' fields name them all.
REWARD_COMPONENTS = tuple(f.name for f in fields(RewardWeights))


def compute_score(
    data_source: str, solution_str: str, ground_truth, extra_info: dict | None = None, *, sead_config: str, **_
) -> dict:
    """{"score": total, "reward_<component>": value, "sim_error": 0/1}. A simulator error scores 0: its
    trajectory has an all-zero loss mask (episode_io.trajectory_tokens), so the value trains nothing."""
    if not extra_info or "sead_episode" not in extra_info:
        raise ValueError(
            f"extra_info has no 'sead_episode' (data_source {data_source!r}): this reward function "
            "only scores trajectories of the sead_dialogue agent loop"
        )
    ctx = load_context(sead_config)
    reward = ctx.score(Episode.from_dict(extra_info["sead_episode"]))
    components = reward["components"] if reward else {}
    # Keys are fixed whatever happens: verl builds its arrays from the first trajectory's keys.
    out = {"score": reward["total"] if reward else 0.0, "sim_error": int(reward is None)}
    out.update({f"reward_{name}": float(components.get(name, 0.0)) for name in REWARD_COMPONENTS})
    return out
