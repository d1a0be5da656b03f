"""Where an update's advantages come from, chosen by `trainer.update.estimator`. The policy loss (clipped ratio, KL
to the reference, entropy bonus) is the same for every estimator; an estimator decides which token segments of a
batch are trained and with what advantage, and may bring a critic that is trained alongside the policy.

- `grpo`: an episode's reward against the other rollouts of its profile, the same advantage on all its tokens;
  no critic. With `dynamic_sampling`, groups whose rewards are all equal are left out: they carry no gradient.
- `ppo`: a linear value head on the policy's last hidden state (a shared trunk), and GAE over each episode's agent
  tokens with the reward on its last one, whitened over the batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch

from sead.dialogue.episode import Episode
from sead.trainer.losses import clipped_value_loss, gae, grpo_advantages

if TYPE_CHECKING:
    from sead.trainer.schema import UpdateConfig


@dataclass
class Sequence:
    ids: torch.Tensor  # (T,)
    mask: torch.Tensor  # (T,) 1 = agent-sampled token
    advantage: float | torch.Tensor  # GRPO: one number per episode; PPO: one per agent token (from GAE)
    old_logp: torch.Tensor | None = None
    rollout_logp: torch.Tensor | None = None  # per agent token, as the rollout engine sampled it (None: not given)
    ref_logp: torch.Tensor | None = None
    episode: int = 0  # segments of one episode share it (PPO chains them for GAE)
    reward: float = 0.0  # the episode's reward
    old_values: torch.Tensor | None = None
    returns: torch.Tensor | None = None


def episode_sequences(
    episodes: list[Episode], rewards: list[float], advantages: list[float], keep: list[bool]
) -> list[Sequence]:
    """Every token segment with agent tokens of the kept episodes, with its episode's advantage and reward."""
    return [
        Sequence(
            torch.tensor(seg.ids),
            torch.tensor(seg.mask),
            advantages[i],
            episode=i,
            reward=rewards[i],
            rollout_logp=_sampled_logprobs(seg),
        )
        for i, ep in enumerate(episodes)
        if keep[i]
        for seg in ep.segments
        if sum(seg.mask)
    ]


def batch_counts(episodes: list[Episode], groups: list[int], dropped: int) -> dict:
    """What `Estimator.sequences` reports beside the sequences: the step's groups, how many were left out, and the
    agent tokens every dialogue holds, kept or not (`update.loss_tokens=played`)."""
    played = sum(sum(seg.mask) for ep in episodes for seg in ep.segments)
    return {"groups": len(set(groups)), "groups_dropped": dropped, "played_tokens": played}


def _sampled_logprobs(seg) -> torch.Tensor | None:
    """The rollout's log-prob of each agent token; None when the agent reported none (all zeros: text agents)."""
    lp = torch.tensor(seg.logprobs, dtype=torch.float32)[torch.tensor(seg.mask, dtype=torch.bool)]
    return lp if bool(lp.ne(0).any()) else None


class Estimator(ABC):
    name: ClassVar[str]
    critic: torch.nn.Module | None = None  # trained with the policy and saved in its checkpoints

    def __init__(self, cfg: UpdateConfig, model):
        self.cfg = cfg

    @abstractmethod
    def sequences(
        self, episodes: list[Episode], rewards: list[float], groups: list[int]
    ) -> tuple[list[Sequence], dict]:
        """The batch's trained segments; how many groups it had and how many were left out; and how many agent
        tokens all of its dialogues hold (`played_tokens`)."""

    def observe(self, seq: Sequence, hidden: torch.Tensor) -> None:
        """`seq` under the policy that sampled it (no gradient): the last hidden state at each position that
        predicts one of its agent tokens."""

    def advantages(self, seqs: list[Sequence]) -> None:
        """Complete each sequence's advantage once every sequence of the batch has been observed."""

    def value_loss(self, mb: list[Sequence], hidden: list[torch.Tensor]) -> torch.Tensor | None:
        """Per agent token of the micro-batch `mb`, from each sequence's hidden states under the policy being
        trained; None: no critic."""
        return None


class GRPOEstimator(Estimator):
    name = "grpo"

    def sequences(self, episodes, rewards, groups):
        adv = grpo_advantages(
            torch.tensor(rewards, dtype=torch.float32), torch.tensor(groups), normalise_std=self.cfg.normalise_std
        )
        flat = set()
        if self.cfg.dynamic_sampling:
            flat = {g for g in set(groups) if len({r for r, gg in zip(rewards, groups) if gg == g}) == 1}
        seqs = episode_sequences(episodes, rewards, adv.tolist(), [g not in flat for g in groups])
        return seqs, batch_counts(episodes, groups, len(flat))


class PPOEstimator(Estimator):
    name = "ppo"

    def __init__(self, cfg: UpdateConfig, model):
        super().__init__(cfg, model)
        device = next(model.parameters()).device
        self.critic = torch.nn.Linear(model.config.hidden_size, 1).to(device)
        torch.nn.init.zeros_(self.critic.weight)
        torch.nn.init.zeros_(self.critic.bias)

    def _values(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.critic(hidden.float()).squeeze(-1)

    def sequences(self, episodes, rewards, groups):
        seqs = episode_sequences(episodes, rewards, [0.0] * len(episodes), [True] * len(episodes))
        return seqs, batch_counts(episodes, groups, 0)

    def observe(self, seq, hidden):
        seq.old_values = self._values(hidden).detach()

    def advantages(self, seqs):
        """Per-token advantages and returns, chaining the segments of each episode in order, then whitened over
        the batch."""
        episodes: dict[int, list[Sequence]] = {}
        for s in seqs:
            episodes.setdefault(s.episode, []).append(s)
        for parts in episodes.values():
            values = torch.cat([s.old_values.cpu() for s in parts])
            adv, ret = gae(values, parts[-1].reward, gamma=self.cfg.gamma, lam=self.cfg.lam)
            lengths = [len(s.old_values) for s in parts]
            for s, a, r in zip(parts, torch.split(adv, lengths), torch.split(ret, lengths)):
                s.advantage, s.returns = a, r
        flat = torch.cat([s.advantage for s in seqs])
        mean, std = flat.mean(), flat.std() if flat.numel() > 1 else torch.tensor(1.0)
        for s in seqs:
            s.advantage = (s.advantage - mean) / (std + 1e-6)

    def value_loss(self, mb, hidden):
        values = self._values(torch.cat(hidden))
        return clipped_value_loss(
            values,
            torch.cat([s.old_values for s in mb]).to(values.device),
            torch.cat([s.returns for s in mb]).to(values.device),
            self.cfg.value_clip,
        )


ESTIMATORS: dict[str, type[Estimator]] = {e.name: e for e in (GRPOEstimator, PPOEstimator)}
