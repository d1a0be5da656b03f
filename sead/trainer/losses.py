"""The pieces of the policy-gradient loss, as pure tensor functions (tested against hand-computed values)."""

from __future__ import annotations

import torch


def grpo_advantages(
    rewards: torch.Tensor, groups: torch.Tensor, *, eps: float = 1e-6, normalise_std: bool = True
) -> torch.Tensor:
    """(r - mean of its group) / (std of its group + eps); sample std, as the original. A group of one, or
    a group whose rewards are all equal, gets advantage 0."""
    adv = torch.zeros_like(rewards)
    for g in torch.unique(groups):
        idx = groups == g
        r = rewards[idx]
        if r.numel() < 2:
            continue
        centred = r - r.mean()
        std = r.std(unbiased=True)
        # Equal rewards carry no signal: their advantage is 0 even with eps = 0 (not 0/0).
        adv[idx] = centred / (std + eps) if normalise_std and std > 0 else (centred if not normalise_std else 0.0)
    return adv


def low_var_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi || ref) per token: exp(ref - logp) - (ref - logp) - 1, clamped for stability."""
    d = torch.clamp(ref_logp - logp, -20.0, 20.0)
    return torch.clamp(torch.exp(d) - d - 1.0, -10.0, 10.0)


def clipped_policy_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, *, clip_low: float = 0.2, clip_high: float = 0.2
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO clipped surrogate (to minimise) and whether the clip was active.
    Separate low/high bounds allow DAPO's clip-higher (clip_high > clip_low)."""
    ratio = torch.exp(logp - old_logp)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    return torch.maximum(unclipped, clipped), (clipped > unclipped).float()


def entropy_from_logp(logp: torch.Tensor) -> torch.Tensor:
    """Entropy of each row's distribution, from its log-probabilities over the whole vocabulary."""
    return -(logp.exp() * logp).sum(-1)


def token_mean(values: torch.Tensor, total_tokens: float) -> torch.Tensor:
    """Sum over this micro-batch's agent tokens divided by the token count of the whole mini-batch, so
    gradient accumulation over micro-batches equals one token-mean over the mini-batch."""
    return values.sum() / max(1, total_tokens)


def gae(
    values: torch.Tensor, reward: float, *, gamma: float = 1.0, lam: float = 0.95, bootstrap: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over one episode's agent tokens (in order) with the outcome reward
    on the last token. Returns (advantages, returns = advantages + values)."""
    T = values.numel()
    adv = torch.zeros(T, dtype=torch.float32)
    nxt_value, running = bootstrap, 0.0
    for t in range(T - 1, -1, -1):
        r = reward if t == T - 1 else 0.0
        delta = r + gamma * nxt_value - float(values[t])
        running = delta + gamma * lam * running
        adv[t] = running
        nxt_value = float(values[t])
    return adv, adv + values.float()


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float = 0.2
) -> torch.Tensor:
    """Per-token PPO value loss with the prediction kept within `clip` of the rollout-time value."""
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    return 0.5 * torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
