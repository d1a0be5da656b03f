"""The policy's weights averaged over RL updates (`trainer.weight_ema`): an exponential moving average that starts at
the first update's weights, kept by torch's `AveragedModel`. Rollouts sample from the live policy, whose own samples
the update needs; validation and each checkpoint's `model/` are the average. Why: one run's greedy CR moved by 17
points between checkpoints a few steps apart (measured 2026-11-28)."""

from __future__ import annotations

from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


class WeightAverage:
    def __init__(self, decay: float):
        self.decay = decay
        self._averaged: AveragedModel | None = None  # made at the first update: after any warm-up

    def _wrap(self, model) -> AveragedModel:
        # parameters only: the models SEAD trains hold no buffers that learn (RoPE's frequencies are fixed)
        averaged = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(self.decay), use_buffers=False)
        return averaged.eval().requires_grad_(False)

    @property
    def updates(self) -> int:
        """RL updates averaged so far (0: none yet, the average is not made)."""
        return 0 if self._averaged is None else int(self._averaged.n_averaged)

    @property
    def model(self):
        """The averaged model (an HF model like the policy), or None before the first update."""
        return None if self._averaged is None else self._averaged.module

    def update(self, policy) -> None:
        """Fold in the policy's weights after an optimiser step (the first one is copied)."""
        if self._averaged is None:
            self._averaged = self._wrap(policy)
        self._averaged.update_parameters(policy)

    def resume(self, averaged_model, updates: int) -> None:
        """Continue from a checkpoint's average (its `model/`) over `updates` updates."""
        self._averaged = self._wrap(averaged_model)
        self._averaged.n_averaged.fill_(updates)
