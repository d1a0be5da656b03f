"""The training reward: one definition, used by the embedded trainer, the verl reward function and validation.

Completion is the only term on by default (as the original). Other terms are opt-in through weights in config;
every component is returned for logging whether or not its weight is zero. Shaped terms are measured on the
user's side wherever the agent could claim them itself: stage progress counts the stages the user acknowledged,
never the `<stage>` tags the agent writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sead.config import number
from sead.dialogue.episode import Episode
from sead.metrics import completion, concerns_answered, false_positive, portrait_accuracy, stages_acknowledged
from sead.scenario.profile_space import ProfileSpace


@dataclass
class RewardWeights:
    # Each component already points the right way (agent_hangup is -1 when it happens): a weight only scales it.
    completion: float = number(1.0, ge=0, le=1000)  # 1 when the user did what the SOP asked (the original's only term)
    format: float = number(0.0, ge=0, le=1000)  # fraction of agent turns whose tags all parsed
    # fraction of SOP stages the user acknowledged (scripted user only)
    stage_progress: float = number(0.0, ge=0, le=1000)
    # share of its voiced concerns the user took as answered (idem)
    concerns_answered: float = number(0.0, ge=0, le=1000)
    # UPA: how near the agent's portrait scores were the user's state
    portrait_accuracy: float = number(0.0, ge=0, le=1000)
    agent_hangup: float = number(0.0, ge=0, le=1000)  # the component is -1 when the agent ends the call without success
    # -1 when the user hung up. Of the dialogue's failures it is the user's own verdict, and the only one that tells
    # apart short branched continuations (trainer.branch.turns) that all end before any success. Weigh
    # agent_hangup alike, or ending the call itself becomes the agent's way out of a user about to hang up.
    user_hangup: float = number(0.0, ge=0, le=1000)
    turn_efficiency: float = number(0.0, ge=0, le=1000)  # successful dialogues only: 1 - turns / max_turns


@dataclass
class Reward:
    total: float
    components: dict[str, float] = field(default_factory=dict)


def stage_progress(ep: Episode, num_stages: int) -> float:
    """Share of SOP stages the user acknowledged (`sead.metrics.stages_acknowledged`). Only the scripted
    simulator reports them; with any other the term is 0, as it is for a dialogue in which no stage landed."""
    return stages_acknowledged(ep) / num_stages


def compute_reward(
    ep: Episode, weights: RewardWeights, space: ProfileSpace, *, num_stages: int, max_turns: int
) -> Reward | None:
    """None for a dialogue that ended by simulator error: it must not train the agent either way."""
    if ep.sim_error:
        return None
    agent = [t.agent for t in ep.turns]
    components = {
        "completion": completion(ep),
        "format": sum(not a.problems for a in agent) / len(agent) if agent else 0.0,
        "stage_progress": stage_progress(ep, num_stages),
        "concerns_answered": concerns_answered(ep) or 0.0,  # no concern voiced: nothing was answered
        "portrait_accuracy": portrait_accuracy(ep, space) or 0.0,
        "agent_hangup": -(false_positive(ep) or 0.0),
        "user_hangup": -float(ep.end_reason == "user_hangup"),
        "turn_efficiency": max(0.0, 1.0 - ep.num_turns / max_turns) if ep.success else 0.0,
    }
    total = sum(getattr(weights, name) * value for name, value in components.items())
    return Reward(total, components)
