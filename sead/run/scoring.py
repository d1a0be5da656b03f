"""The reward a run stores in each rollout record (`meta["reward"]`): `sead.reward.compute_reward` under the run's
weights, as {"total", "components"}. The embedded trainer scores each dialogue as it ends; the verl agent loop
scores it the same way for the record, and verl's reward function returns the same total to verl."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from sead.config import reward_weights, runner_config
from sead.dialogue.episode import Episode
from sead.reward import RewardWeights, compute_reward
from sead.scenario.profile_space import ProfileSpace
from sead.scenario.scenario import Scenario


@dataclass(frozen=True)
class EpisodeScorer:
    weights: RewardWeights
    space: ProfileSpace
    num_stages: int
    max_turns: int

    @classmethod
    def for_run(cls, cfg: DictConfig, scenario: Scenario) -> EpisodeScorer:
        return cls(reward_weights(cfg), scenario.space, len(scenario.stages), runner_config(cfg).max_turns)

    def __call__(self, ep: Episode) -> dict | None:
        """None for a dialogue the simulator broke off: it is left out of reward and training."""
        r = compute_reward(ep, self.weights, self.space, num_stages=self.num_stages, max_turns=self.max_turns)
        return None if r is None else {"total": r.total, "components": r.components}
