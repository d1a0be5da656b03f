"""Rollout-vs-trainer mismatch: the engine that sampled the tokens (a bf16 copy on CPU, vLLM on GPUs) does not
give exactly the trainer's probabilities, so the update is off-policy by that much. Truncated importance sampling
(TIS) weights each token's policy loss by min(p_trainer / p_rollout, threshold): unbiased where the ratio stays
under the threshold, bounded variance where it does not. The mismatch itself is measured every step, corrected
or not, so a precision change that moves the numbers shows in metrics.jsonl."""

from __future__ import annotations

import torch


class RolloutMismatch:
    """Collects one update's mismatch statistics over its micro-batches and gives each one's TIS weights."""

    def __init__(self):
        self.tokens = self.capped = 0
        self.kl_sum = 0.0
        self.ratio_max = 0.0

    def weights(self, trainer_logp: torch.Tensor, rollout_logp: list, counts: list[int], cfg) -> torch.Tensor | None:
        """Per-token TIS weights for a micro-batch (trainer log-probs detached, concatenated over its sequences;
        `rollout_logp` one tensor or None per sequence); None when nothing is to be weighted."""
        if all(r is None for r in rollout_logp):
            return None
        parts = [r.to(trainer_logp.device) if r is not None else None for r in rollout_logp]
        own = torch.split(trainer_logp, counts)
        rollout = torch.cat([r if r is not None else t for r, t in zip(parts, own)])  # no rollout numbers: ratio 1
        known = torch.cat([torch.full((n,), r is not None, dtype=torch.bool) for r, n in zip(parts, counts)])
        log_ratio = (trainer_logp - rollout).clamp(-20.0, 20.0)
        ratio = log_ratio.exp()
        if bool(known.any()):
            # k3 estimate of KL(rollout || trainer) on tokens the rollout sampled: >= 0, low variance
            self.kl_sum += float((ratio - 1.0 - log_ratio)[known].sum())
            self.tokens += int(known.sum())
            self.ratio_max = max(self.ratio_max, float(ratio[known].max()))
            self.capped += int((ratio[known] > cfg.rollout_is_threshold).sum())
        if cfg.rollout_is == "off":
            return None
        return ratio.clamp(max=cfg.rollout_is_threshold)

    def summary(self) -> dict:
        if not self.tokens:
            return {}
        return {
            "rollout_kl": self.kl_sum / self.tokens,
            "rollout_ratio_max": self.ratio_max,
            "rollout_is_capped": self.capped / self.tokens,
        }
