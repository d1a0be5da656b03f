"""Every dialogue's seed, named by what the dialogue is for. A seed fixes the dialogue (the agent's sampling and the
user simulator's choices on each turn), so these formulas are part of what a run is: a resumed or repeated run,
and the same step in the other backend, replays the same dialogues only while they stay exactly as they are.

Within one kind, different (step, profile, rollout) give different seeds as long as the rollout index stays below
its multiplier; the kinds use different multipliers so that they do not share seeds in practice.
"""

from __future__ import annotations

# Seeds of one training step lie within this many of each other (every kind keyed by step uses it).
STEP_STRIDE = 10_007


def train_episode_seed(run_seed: int, step: int, profile_index: int, rollout: int, group_size: int) -> int:
    """A training rollout: rollout `rollout` (0..group_size-1) of the step's profile `profile_index`. The embedded
    trainer and verl's agent loop both use it, so both backends play the same dialogues for one step's profiles."""
    return run_seed * 1_000_003 + step * STEP_STRIDE + profile_index * group_size + rollout


def validation_episode_seed(validation_seed: int, profile_index: int, trial: int) -> int:
    """A validation dialogue: the same at every iteration, so each validation measures the policy on one set."""
    return validation_seed * 7919 + profile_index * 31 + trial


def eval_episode_seed(eval_seed: int, profile_index: int, trial: int) -> int:
    """A dialogue of `sead eval`: trial `trial` of test-set profile `profile_index`."""
    return eval_seed * 1_000_003 + profile_index * 101 + trial


def warmup_episode_seed(warmup_seed: int, index: int) -> int:
    """The reference agent's `index`-th warm-up dialogue."""
    return warmup_seed * 104_729 + index


# Members of one group that meets one draw of the user: the stride of `group_agent_seed`.
MAX_GROUP_MEMBERS = 101
# Groups of one step that `group_agent_seed` keeps apart from the next step's (99).
MAX_SEEDED_GROUPS = STEP_STRIDE // MAX_GROUP_MEMBERS


def group_agent_seed(run_seed: int, step: int, group: int, member: int) -> int:
    """The agent's sampling in member `member` (below MAX_GROUP_MEMBERS) of a GRPO group whose members meet one
    draw of the user (a branched group, or trainer.group_user=shared): the user's seed is the group's, so the
    members differ by the agent's choices alone. One member stride for every kind of group, whatever its size, so a
    branched group and a full one never share a seed, within a step or with the next one while a step has at most
    MAX_SEEDED_GROUPS groups (the trainer's config check refuses more). Negative: apart from every other kind of
    seed."""
    return -(run_seed * 1_000_003 + step * STEP_STRIDE + group * MAX_GROUP_MEMBERS + member + 1)


def turn_seed(episode_seed: int, turn_index: int) -> int:
    """What the agent samples and the user simulator answers with on one turn of a dialogue."""
    return episode_seed * 1000 + turn_index


def profile_check_seed(run_seed: int, step: int) -> int:
    """The plausibility pass over training step `step`'s profiles (which library entries it offers)."""
    return run_seed * 1_000_003 + step


def imitation_seed(run_seed: int, step: int) -> int:
    """Which of the warm-up's dialogues the imitation anchor (trainer.update.imitation_coef) draws at step `step`:
    the same on a resume or a repeat of the run."""
    return run_seed * 7919 + step
