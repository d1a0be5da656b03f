"""Phase 3: one policy-gradient update from a batch of episodes. The loss touches only tokens the agent sampled;
where the advantages come from (GRPO's groups, PPO's critic) is the estimator's part (`sead.trainer.estimators`),
how the sequences are split `sead.trainer.batching`'s, and their log-probabilities `sead.trainer.scoring`'s."""

from __future__ import annotations

import contextlib
import math

import torch

from sead import host_memory
from sead.errors import SEADInputError
from sead.trainer.batching import micro_batches, mini_batches
from sead.trainer.estimators import ESTIMATORS, Sequence
from sead.trainer.lora import is_lora
from sead.trainer.losses import clipped_policy_loss, low_var_kl, token_mean
from sead.trainer.rollout_correction import RolloutMismatch
from sead.trainer.schema import UpdateConfig
from sead.trainer.scoring import SharedContext, masked_logprobs


class Updater:
    def __init__(
        self, model, ref_model, cfg: UpdateConfig, *, temperature: float, forward_context=contextlib.nullcontext
    ):
        """`temperature` is the one the rollouts were sampled at (`trainer.sampling.temperature`): log-probs are
        taken under the distribution the tokens were drawn from, so it is passed in, never set twice.
        `forward_context`: the context the forwards run in (the trainer's: `Precision.autocast`, bf16 matmuls over
        fp32 master weights, and activation recomputation where `trainer.recompute_activations` is set)."""
        self.model, self.ref, self.cfg, self.temperature = model, ref_model, cfg, temperature
        self.forward_context = forward_context
        self.estimator = ESTIMATORS[cfg.estimator](cfg, model)
        params = [p for p in model.parameters() if p.requires_grad]
        if self.estimator.critic is not None:
            params += list(self.estimator.critic.parameters())
        self.opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        warm = max(1, cfg.warmup_steps)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm))

    @property
    def _uses_kl(self) -> bool:
        return bool(self.cfg.kl_coef) and (self.ref is not None or is_lora(self.model))

    def _batches(self, seqs: list[Sequence]) -> list[list[Sequence]]:
        return micro_batches(seqs, self.cfg.micro_batch)

    @torch.no_grad()
    def _prepare(self, seqs: list[Sequence]) -> None:
        """What the update compares against: the sampling policy's log-probs (and the reference's), and the
        advantages."""
        self.model.eval()
        # each network's share of the SOP prompt once for the pass, as in the update
        with self.forward_context():
            context = SharedContext.of(self.model, seqs) if self._needs_old_pass else None
        if self._uses_kl:
            ref, ref_scope = self._reference()
            with ref_scope(), self.forward_context():
                ref_context = SharedContext.of(ref, seqs)
        for mb in self._batches(seqs):
            if self._needs_old_pass:
                with self.forward_context():
                    scored = masked_logprobs(self.model, mb, self.temperature, context=context)
                for s, lp, h in zip(mb, scored.logps, scored.hidden):
                    s.old_logp = lp.detach()
                    self.estimator.observe(s, h)
            if self._uses_kl:
                with ref_scope(), self.forward_context():
                    ref_logps = masked_logprobs(ref, mb, self.temperature, context=ref_context).logps
                for s, lp in zip(mb, ref_logps):
                    s.ref_logp = lp.detach()
        self.estimator.advantages(seqs)

    @property
    def _needs_old_pass(self) -> bool:
        """With one epoch and no critic, the policy that sampled is the one being trained, so its log-probs come
        from the training forward itself (detached): a whole forward pass saved."""
        return self.cfg.ppo_epochs > 1 or self.cfg.mini_batches > 1 or self.estimator.critic is not None

    @property
    def _entropy_bonus(self) -> bool:
        """Whether the loss has an entropy term; without one the entropies are logged values, kept out of the
        autograd graph (a log-softmax product over the whole vocabulary for every agent token, and its backward)."""
        return self.cfg.entropy_coef != 0

    def _reference(self):
        """The reference network and the scope it runs in: its own frozen copy, or with LoRA the base network
        under the adapters."""
        if self.ref is not None:
            return self.ref, contextlib.nullcontext
        return self.model, self.model.disable_adapter

    def _imitation(self, anchor: list[Sequence]) -> float:
        """The imitation anchor's gradient, added to the optimiser step's: imitation_coef x the mean NLL of the
        anchor's agent tokens at temperature 1 (as the warm-up trained them). Returns that NLL."""
        total, nll = sum(int(s.mask.sum()) for s in anchor), 0.0
        for mb in self._batches(anchor):
            with self.forward_context():
                part = -torch.cat(masked_logprobs(self.model, mb, temperature=1.0).logps).sum()
            if not math.isfinite(float(part.detach())):
                raise _non_finite("the imitation anchor's loss", self.cfg, self.temperature)
            (self.cfg.imitation_coef * part / total).backward()
            nll += float(part.detach())
        return nll / total

    def _apply_gradient(self) -> float:
        """Clip the gradient the backward passes left, take the optimiser step, and return the norm before
        clipping; a non-finite norm or weight stops the run."""
        params = [p for g in self.opt.param_groups for p in g["params"]]
        norm = float(torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip))
        if not math.isfinite(norm):
            raise _non_finite("the gradient norm", self.cfg, self.temperature)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)  # as large as the weights: not held through the rollouts that follow
        if not bool(torch.stack([p.detach().isfinite().all() for p in params]).all()):
            raise _non_finite("a weight after the optimiser step", self.cfg, self.temperature)
        return norm

    def imitate(self, anchor: list[Sequence]) -> dict:
        """One optimiser step on the imitation anchor alone (`policy_gradient=false`): the control that tells a
        run's gain from the anchor's. Same optimiser, schedule and clipping as `step`, no policy-gradient term."""
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        nll = self._imitation(list(anchor))
        norm = self._apply_gradient()
        self.sched.step()
        return {"imitation_nll": nll, "grad_norm": norm, "optimiser_steps": 1, "lr": self.sched.get_last_lr()[0]}

    def step(
        self, seqs: list[Sequence], played_tokens: int | None = None, anchor: list[Sequence] | None = None
    ) -> dict:
        """One update from the kept sequences `seqs`; `played_tokens`: the agent tokens of every dialogue the step
        played, the loss's denominator under `loss_tokens=played` (None: the kept ones'); `anchor`: the imitation
        anchor's sequences (`imitation_coef`), in every optimiser step of the update."""
        if not seqs:
            return {"skipped": 1.0}
        cfg = self.cfg
        self._prepare(seqs)
        self.model.train()
        total = int(sum(int(s.mask.sum()) for s in seqs))
        # each optimiser step's token mean is over its own part; `played` widens every part's by the same factor
        widen = max(1.0, played_tokens / total) if cfg.loss_tokens == "played" and played_tokens else 1.0
        sums = {"pg_loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0}
        mismatch = RolloutMismatch()
        if self.estimator.critic is not None:
            sums["value_loss"] = 0.0
        norms, imitation, parts = [], [], mini_batches(seqs, cfg.mini_batches)
        for part in (p for _ in range(cfg.ppo_epochs) for p in parts):
            self.opt.zero_grad(set_to_none=True)
            part_tokens = widen * int(sum(int(s.mask.sum()) for s in part))
            with self.forward_context():
                context = SharedContext.of(self.model, part)  # the SOP prompt: once per part, not per micro-batch
            for mb in self._batches(part):
                # pages the last micro-batch (or the old and reference passes) freed go back first: the heap then
                # grows to this micro-batch's own need, not onto the holes the last one left
                host_memory.give_back()
                with self.forward_context():
                    logps, ents, hidden = masked_logprobs(
                        self.model,
                        mb,
                        self.temperature,
                        with_entropy=True,
                        context=context,
                        entropy_grad=self._entropy_bonus,
                    )
                logp, ent = torch.cat(logps), torch.cat(ents)
                old = torch.cat([s.old_logp if s.old_logp is not None else lp.detach() for s, lp in zip(mb, logps)])
                adv = torch.cat(
                    [
                        torch.as_tensor(s.advantage, dtype=lp.dtype, device=lp.device).expand_as(lp)
                        for s, lp in zip(mb, logps)
                    ]
                )
                pg, clipped = clipped_policy_loss(logp, old, adv, clip_low=cfg.clip_low, clip_high=cfg.clip_high)
                weight = mismatch.weights(old, [s.rollout_logp for s in mb], [len(lp) for lp in logps], cfg)
                if weight is not None:
                    pg = pg * weight
                loss = token_mean(pg, part_tokens)
                if self._entropy_bonus:
                    loss = loss - cfg.entropy_coef * token_mean(ent, part_tokens)
                if self._uses_kl:
                    kl = low_var_kl(logp, torch.cat([s.ref_logp for s in mb]))
                    loss = loss + cfg.kl_coef * token_mean(kl, part_tokens)
                    sums["kl"] += float(kl.detach().sum())
                vf = self.estimator.value_loss(mb, hidden)
                if vf is not None:
                    loss = loss + cfg.vf_coef * token_mean(vf, part_tokens)
                    sums["value_loss"] += float(vf.detach().sum())
                if not math.isfinite(float(loss.detach())):
                    raise _non_finite("the loss", cfg, self.temperature)
                loss.backward()
                sums["pg_loss"] += float(pg.detach().sum())
                sums["entropy"] += float(ent.detach().sum())
                sums["clip_frac"] += float(clipped.sum())
            if context is not None:
                context.backward()
            if cfg.imitation_coef and anchor:
                imitation.append(self._imitation(list(anchor)))
            norms.append(self._apply_gradient())
        self.sched.step()
        n = total * cfg.ppo_epochs
        out = {k: v / n for k, v in sums.items()}
        out.update(
            grad_norm=sum(norms) / len(norms),
            optimiser_steps=len(norms),
            lr=self.sched.get_last_lr()[0],
            trained_tokens=total,
            sequences=len(seqs),
        )
        out.update(mismatch.summary())
        if imitation:
            out["imitation_nll"] = sum(imitation) / len(imitation)
        return out


def _non_finite(what: str, cfg: UpdateConfig, temperature: float) -> SEADInputError:
    """A NaN or infinity stops the run: skipping the step would leave the cause in place for the next one, and
    saving would put it into a checkpoint that every resume and evaluation then loads. The error names the
    setting at fault where one is not finite (the config's ranges refuse that at load, but code can set any), else
    the lr, the usual cause, beside every other setting that scales the update."""
    settings = {f"trainer.update.{k}": getattr(cfg, k) for k in SCALING}
    settings["trainer.sampling.temperature"] = temperature
    field = next((k for k, v in settings.items() if not math.isfinite(v)), "trainer.update.lr")
    values = ", ".join(f"{k.rpartition('.')[2]}={v:g}" for k, v in settings.items() if k != "trainer.update.lr")
    return SEADInputError(
        f"{what} is not finite; the run stops before any checkpoint can hold it. Likely cause: trainer.update.lr="
        f"{cfg.lr:g} too high for this model (the policy diverged); check also {values} (a coefficient too large, "
        "a temperature too close to 0: the logits are divided by it)",
        field=field,
    )


SCALING = ("lr", "kl_coef", "weight_decay", "entropy_coef", "imitation_coef", "vf_coef")  # what scales an update
