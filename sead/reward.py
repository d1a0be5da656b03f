"""The training reward: one definition, used by the embedded trainer, the verl reward function and validation.

Completion is the only term on by default (as the original). Other terms are opt-in through weights in config;
every component is returned for logging whether or not its weight is zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sead.dialogue.episode import Episode
from sead.metrics import completion, false_positive, portrait_accuracy
from sead.scenario.profile_space import ProfileSpace


@dataclass
class RewardWeights:
    completion: float = 1.0
    format: float = 0.0           # fraction of agent turns whose tags all parsed
    stage_progress: float = 0.0   # fraction of SOP stages reached: stages 0..k all declared at some point
    portrait_accuracy: float = 0.0
    agent_hangup: float = 0.0     # the component is -1 when the agent ends the call without user success
    turn_efficiency: float = 0.0  # successful dialogues only: 1 - turns / max_turns


@dataclass
class Reward:
    total: float
    components: dict[str, float] = field(default_factory=dict)


def stage_progress(ep: Episode, num_stages: int) -> float:
    declared = {t.agent.stage for t in ep.turns if t.agent.stage is not None}
    reached = 0
    while reached in declared:
        reached += 1
    return reached / num_stages


def compute_reward(ep: Episode, weights: RewardWeights, space: ProfileSpace, *, num_stages: int,
                   max_turns: int) -> Reward | None:
    """None for a dialogue that ended by simulator error: it must not train the agent either way."""
    if ep.sim_error:
        return None
    agent = [t.agent for t in ep.turns]
    components = {
        "completion": completion(ep),
        "format": sum(not a.problems for a in agent) / len(agent) if agent else 0.0,
        "stage_progress": stage_progress(ep, num_stages),
        "portrait_accuracy": portrait_accuracy(ep, space) or 0.0,
        "agent_hangup": -(false_positive(ep) or 0.0),
        "turn_efficiency": max(0.0, 1.0 - ep.num_turns / max_turns) if ep.success else 0.0,
    }
    total = sum(getattr(weights, name) * value for name, value in components.items())
    return Reward(total, components)
