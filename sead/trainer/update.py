"""Phase 3: one policy-gradient update from a batch of episodes. The loss touches only tokens the agent sampled;
where the advantages come from (GRPO's groups, PPO's critic) is the estimator's part (`sead.trainer.estimators`)."""

from __future__ import annotations

import contextlib
import math
from typing import NamedTuple

import torch
from transformers import DynamicCache

from sead.errors import SEADInputError
from sead.models import training_attention
from sead.models.attention import NAME as ATTENTION
from sead.policy.hf import common_prefix_length
from sead.trainer.estimators import ESTIMATORS, Sequence
from sead.trainer.lora import is_lora
from sead.trainer.losses import clipped_policy_loss, low_var_kl, token_mean
from sead.trainer.rollout_correction import RolloutMismatch
from sead.trainer.schema import UpdateConfig
from sead.trainer.token_logprobs import token_logprobs

MIN_SHARED_PREFIX = 16  # below this, a separate prefix pass costs more than it saves


class Scored(NamedTuple):
    logps: list[torch.Tensor]
    entropies: list[torch.Tensor] | None
    hidden: list[torch.Tensor]  # last hidden state at each position that predicts an agent token


def first_agent_position(s: Sequence) -> int:
    return int(s.mask.nonzero()[0, 0]) if s.mask.any() else len(s.ids)


def shared_prompt_length(seqs: list[Sequence], min_prefix: int = MIN_SHARED_PREFIX) -> int:
    """Leading tokens every sequence shares (the SOP prompt; a branched group's replayed context), stopping
    before the position that predicts the first agent token of any of them, so every trained prediction is computed
    in the rows' own pass. 0 when short."""
    first_agent = min(first_agent_position(s) for s in seqs)
    k = common_prefix_length([s.ids for s in seqs], first_agent - 1)
    return k if k >= min_prefix else 0


def micro_batches(seqs: list[Sequence], size: int) -> list[list[Sequence]]:
    """Micro-batches of at most `size` sequences of similar length (little padding). Sequences with one context
    up to their first agent token (the members of a branched group) stay together where running that context
    once for all of them (`masked_logprobs`) saves more tokens than padding them to one length costs; a group of
    whole dialogues, which share only an opening, goes by length."""
    if not seqs:
        return []
    anyway = shared_prompt_length(seqs, min_prefix=0)  # what every micro-batch shares (the SOP prompt)
    families: dict[bytes, list[Sequence]] = {}
    for s in sorted(seqs, key=lambda s: len(s.ids)):
        families.setdefault(s.ids[: first_agent_position(s)].numpy().tobytes(), []).append(s)
    together, loose = [], []
    for family in families.values():
        context = first_agent_position(family[0]) - anyway
        for chunk in (family[i : i + size] for i in range(0, len(family), size)):
            padding = sum(len(chunk[-1].ids) - len(s.ids) for s in chunk)  # sorted: the last is the longest
            if padding < (len(chunk) - 1) * context:
                together.append(chunk)
            else:
                loose += chunk
    loose.sort(key=lambda s: len(s.ids))
    return together + [loose[i : i + size] for i in range(0, len(loose), size)]


def mini_batches(seqs: list[Sequence], parts: int) -> list[list[Sequence]]:
    """`seqs` in up to `parts` consecutive parts of about equal tokens, each dialogue's segments (one `episode`)
    in one part, so that each optimiser step sees whole dialogues and branched groups (consecutive) stay
    mostly together."""
    episodes: dict[int, list[Sequence]] = {}
    for s in seqs:
        episodes.setdefault(s.episode, []).append(s)
    total = sum(len(s.ids) for s in seqs)
    out: list[list[Sequence]] = [[]]
    done = 0
    for segments in episodes.values():
        size = sum(len(s.ids) for s in segments)
        if out[-1] and len(out) < parts and done + size / 2 > total * len(out) / parts:  # nearer the next part
            out.append([])
        out[-1] += segments
        done += size
    return out


class SharedContext:
    """The tokens every sequence of an update starts with (the SOP prompt), run through the trunk once per update
    with gradient. Each micro-batch reads its keys/values through leaf tensors of its own, whose gradients are
    summed here in fp32; `backward()` then sends the sum through the context's own forward once. The update's
    gradient is the full forward's, for one pass of the context instead of one per micro-batch."""

    def __init__(self, model, ids: torch.Tensor):
        self.ids = ids
        device = next(model.parameters()).device
        packed = _packs(model)
        cache = model(input_ids=ids[None].to(device), use_cache=True, **_segments(packed, [len(ids)]))
        self._computed = [t for layer in cache.past_key_values.layers for t in (layer.keys, layer.values)]
        self._sums: list[torch.Tensor | None] = [None] * len(self._computed)

    @classmethod
    def of(cls, model, seqs: list[Sequence]) -> SharedContext | None:
        """The context of `seqs` (`shared_prompt_length`), or None where they share too little to be worth it."""
        shared = shared_prompt_length(seqs)
        return cls(model, seqs[0].ids[:shared]) if shared else None

    def _add(self, i: int, grad: torch.Tensor) -> None:
        self._sums[i] = grad.float() if self._sums[i] is None else self._sums[i] + grad.float()

    def cache(self) -> DynamicCache:
        """A one-row cache over fresh leaves; what a micro-batch runs on it stays in that micro-batch's graph."""
        leaves = [t.detach().requires_grad_() for t in self._computed]
        for i, leaf in enumerate(leaves):
            leaf.register_hook(lambda g, i=i: self._add(i, g))
        return DynamicCache(ddp_cache_data=list(zip(leaves[::2], leaves[1::2])))

    def backward(self) -> None:
        used = [(t, g.to(t.dtype)) for t, g in zip(self._computed, self._sums) if g is not None]
        if used:
            torch.autograd.backward([t for t, _ in used], [g for _, g in used])


def masked_logprobs(
    model,
    seqs: list[Sequence],
    temperature: float,
    with_entropy: bool = False,
    share_prefix: bool = True,
    context: SharedContext | None = None,
    entropy_grad: bool = True,
):
    """Log-probs (and entropies) of the agent tokens of each sequence, one forward for all of them: packed into one
    row where SEAD's training attention kernel serves the model (`_packed_forward`), else padded rows.

    The context all sequences start with (the SOP prompt; for the members of a branched group, everything before
    the cut) goes through the trunk once, and its key/value cache serves every row. It keeps its gradient: the
    rows' gradients meet in the one copy, so the result is the full forward's, at a fraction of the cost. With
    `context` (the update's `SharedContext`), the part of it every sequence of the update shares is not run again
    here, and the caller owes `context.backward()` after this micro-batch's backward pass.
    Only positions that predict an agent token go through the LM head (`token_logprobs`: the vocabulary-wide work
    a slice of rows at a time): the full-vocabulary logits of the prompt and user text are never materialised.
    Without `entropy_grad` the entropies are values only (for the log): nothing is sent back through them."""
    device = next(model.parameters()).device
    shared = shared_prompt_length(seqs) if share_prefix else 0
    packed = _packs(model)
    cache = None
    if shared:
        done = len(context.ids) if context is not None and shared >= len(context.ids) else 0
        cache = context.cache() if done else None
        if shared > done:  # what this micro-batch's rows share beyond the update's context, run once for them
            rest = seqs[0].ids[None, done:shared].to(device)
            cache = model(input_ids=rest, past_key_values=cache, use_cache=True, **_segments(packed, [rest.shape[1]]))
            cache = cache.past_key_values
        if not packed:
            cache.batch_repeat_interleave(len(seqs))
    forward = _packed_forward if packed else _padded_forward
    scored, labels, counts = forward(model, seqs, shared, cache, device)
    logp, ent = token_logprobs(model.get_output_embeddings(), scored, labels, temperature)
    ent = (ent if entropy_grad else ent.detach()) if with_entropy else None
    return Scored(
        list(torch.split(logp, counts)),
        list(torch.split(ent, counts)) if ent is not None else None,
        list(torch.split(scored, counts)),
    )


def _packs(model) -> bool:
    """Whether `masked_logprobs` packs its sequences into one row for this model: SEAD's attention, served by the
    compiled training kernel here (`sead.models.training_attention`). Else padded rows and torch's kernel."""
    return getattr(model.config, "_attn_implementation", None) == ATTENTION and training_attention.serves(model)


def _segments(packed: bool, lengths) -> dict:
    """The model-call keyword that tells SEAD's attention the packed row's segments (their lengths)."""
    return {"segments": torch.as_tensor(lengths)} if packed else {}


def _padded_forward(model, seqs: list[Sequence], shared: int, cache, device):
    """The sequences' own positions as rows right-padded to one width, the mask saying so -> (the last hidden state
    at each position that predicts an agent token, those tokens, how many per sequence)."""
    width = max(len(s.ids) for s in seqs) - shared
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    attn = torch.zeros((len(seqs), shared + width), dtype=torch.long)
    attn[:, :shared] = 1
    target = torch.zeros_like(ids, dtype=torch.bool)
    for i, s in enumerate(seqs):
        own = len(s.ids) - shared
        ids[i, :own], attn[i, shared : shared + own] = s.ids[shared:], 1
        target[i, :own] = s.mask[shared:].bool()
    ids, attn, target = ids.to(device), attn.to(device), target.to(device)
    positions = torch.arange(shared, shared + width, device=device).expand(len(seqs), -1)
    hidden = model(
        input_ids=ids,
        attention_mask=attn,
        position_ids=positions,
        past_key_values=cache,
        output_hidden_states=True,
        logits_to_keep=1,
    ).hidden_states[-1]
    pick = target[:, 1:]  # hidden state at t predicts token t+1
    return hidden[:, :-1][pick], ids[:, 1:][pick], pick.sum(-1).tolist()


def _packed_forward(model, seqs: list[Sequence], shared: int, cache, device):
    """The sequences' own positions one after another in one row (no padding), each a segment of its own for the
    attention; returns as `_padded_forward`. A segment's first token is never an agent token (`shared` stops before
    the first one), so the state before it, the previous segment's last, never predicts one."""
    lengths = torch.tensor([len(s.ids) - shared for s in seqs])
    ids = torch.cat([s.ids[shared:] for s in seqs])[None].to(device)
    target = torch.cat([s.mask[shared:] for s in seqs]).bool().to(device)
    if bool(target[(lengths.cumsum(0) - lengths).to(device)].any()):
        raise AssertionError("a packed segment starts with an agent token")
    positions = torch.cat([torch.arange(shared, shared + int(n)) for n in lengths])[None].to(device)
    hidden = model(
        input_ids=ids,
        position_ids=positions,
        past_key_values=cache,
        output_hidden_states=True,
        logits_to_keep=1,
        **_segments(True, lengths),
    ).hidden_states[-1][0]
    pick = target[1:]
    counts = [int(s.mask[shared:].sum()) for s in seqs]
    return hidden[:-1][pick], ids[0, 1:][pick], counts


class Updater:
    def __init__(self, model, ref_model, cfg: UpdateConfig, *, temperature: float, autocast=contextlib.nullcontext):
        """`temperature` is the one the rollouts were sampled at (`trainer.sampling.temperature`): log-probs are
        taken under the distribution the tokens were drawn from, so it is passed in, never set twice. `autocast`:
        a context the forwards run in (`Precision.autocast`: bf16 matmuls over fp32 master weights)."""
        self.model, self.ref, self.cfg, self.temperature = model, ref_model, cfg, temperature
        self.autocast = autocast
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
        with self.autocast():
            context = SharedContext.of(self.model, seqs) if self._needs_old_pass else None
        if self._uses_kl:
            ref, ref_scope = self._reference()
            with ref_scope(), self.autocast():
                ref_context = SharedContext.of(ref, seqs)
        for mb in self._batches(seqs):
            if self._needs_old_pass:
                with self.autocast():
                    scored = masked_logprobs(self.model, mb, self.temperature, context=context)
                for s, lp, h in zip(mb, scored.logps, scored.hidden):
                    s.old_logp = lp.detach()
                    self.estimator.observe(s, h)
            if self._uses_kl:
                with ref_scope(), self.autocast():
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
            with self.autocast():
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
            with self.autocast():
                context = SharedContext.of(self.model, part)  # the SOP prompt: once per part, not per micro-batch
            for mb in self._batches(part):
                with self.autocast():
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
