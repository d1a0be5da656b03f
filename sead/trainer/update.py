"""Phase 3: one GRPO update from a batch of episodes. The loss touches only tokens the agent sampled."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from sead.dialogue.episode import Episode
from sead.trainer.lora import is_lora
from sead.trainer.losses import (clipped_policy_loss, clipped_value_loss, entropy_from_logits, gae, grpo_advantages,
                                 low_var_kl, token_mean)
from sead.trainer.policy import common_prefix_length


@dataclass
class UpdateConfig:
    lr: float = 1e-6
    warmup_steps: int = 1
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    kl_coef: float = 0.001          # low_var_kl to the frozen reference; 0 disables the reference pass
    entropy_coef: float = 0.0
    clip_low: float = 0.2
    clip_high: float = 0.2          # > clip_low: DAPO clip-higher
    normalise_std: bool = True      # GRPO (r - mean) / std; False: Dr.GRPO-style centring only
    dynamic_sampling: bool = False  # drop groups whose rewards are all equal
    micro_batch: int = 2            # sequences per forward/backward
    ppo_epochs: int = 1
    temperature: float = 1.2        # the sampling temperature: logits are scaled the same way here
    estimator: str = "grpo"         # grpo (group-relative, no critic) | ppo (value head + GAE)
    gamma: float = 1.0              # ppo: discount over agent tokens
    lam: float = 0.95               # ppo: GAE lambda
    vf_coef: float = 0.1            # ppo: weight of the value loss
    value_clip: float = 0.2         # ppo: how far a value prediction may move from its rollout-time value


@dataclass
class Sequence:
    ids: torch.Tensor     # (T,)
    mask: torch.Tensor    # (T,) 1 = agent-sampled token
    advantage: float | torch.Tensor  # GRPO: one number per episode; PPO: one per agent token (from GAE)
    old_logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    episode: int = 0      # PPO: segments of one episode are chained for GAE
    reward: float = 0.0   # the episode's reward (PPO places it on the episode's last agent token)
    old_values: torch.Tensor | None = None
    returns: torch.Tensor | None = None


MIN_SHARED_PREFIX = 16  # below this, a separate prefix pass costs more than it saves


class Scored(NamedTuple):
    logps: list[torch.Tensor]
    entropies: list[torch.Tensor] | None
    hidden: list[torch.Tensor]   # last hidden state at each position that predicts an agent token


def build_sequences(episodes: list[Episode], rewards: list[float], groups: list[int],
                    cfg: UpdateConfig) -> tuple[list[Sequence], dict]:
    adv = grpo_advantages(torch.tensor(rewards, dtype=torch.float32), torch.tensor(groups),
                          normalise_std=cfg.normalise_std)
    stats = {"groups": len(set(groups)), "groups_dropped": 0}
    keep = [True] * len(episodes)
    if cfg.dynamic_sampling and cfg.estimator == "grpo":
        for g in set(groups):
            members = [i for i, gg in enumerate(groups) if gg == g]
            if len({rewards[i] for i in members}) == 1:
                stats["groups_dropped"] += 1
                for i in members:
                    keep[i] = False
    seqs = [Sequence(torch.tensor(seg.ids), torch.tensor(seg.mask), float(adv[i]), episode=i, reward=rewards[i])
            for i, ep in enumerate(episodes) if keep[i] for seg in ep.segments if sum(seg.mask)]
    return seqs, stats


def shared_prompt_length(seqs: list[Sequence], min_prefix: int = MIN_SHARED_PREFIX) -> int:
    """Leading tokens every sequence shares (the SOP prompt), stopping before the position that predicts the
    first agent token of any of them, so every trained prediction is computed with a gradient. 0 when short."""
    first_agent = min((int(s.mask.nonzero()[0, 0]) if s.mask.any() else len(s.ids) for s in seqs))
    k = common_prefix_length([s.ids for s in seqs], first_agent - 1)
    return k if k >= min_prefix else 0


def masked_logprobs(model, seqs: list[Sequence], temperature: float, with_entropy: bool = False,
                    share_prefix: bool = True):
    """Log-probs (and entropies) of the agent tokens of each sequence, one padded forward for all of them.

    The SOP prompt all sequences start with goes through the trunk once, without gradient, and its key/value
    cache serves every row (the prompt's own KV gets no gradient; every prediction of an agent token does).
    Only positions that predict an agent token go through the LM head: the full-vocabulary logits of the
    prompt and user text are never materialised."""
    device = next(model.parameters()).device
    shared = shared_prompt_length(seqs) if share_prefix else 0
    cache = None
    if shared:
        with torch.no_grad():
            cache = model(input_ids=seqs[0].ids[None, :shared].to(device), use_cache=True).past_key_values
        cache.batch_repeat_interleave(len(seqs))
    width = max(len(s.ids) for s in seqs) - shared
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    attn = torch.zeros((len(seqs), shared + width), dtype=torch.long)
    attn[:, :shared] = 1
    target = torch.zeros_like(ids, dtype=torch.bool)
    for i, s in enumerate(seqs):
        own = len(s.ids) - shared
        ids[i, :own], attn[i, shared:shared + own] = s.ids[shared:], 1
        target[i, :own] = s.mask[shared:].bool()
    ids, attn, target = ids.to(device), attn.to(device), target.to(device)
    positions = torch.arange(shared, shared + width, device=device).expand(len(seqs), -1)
    hidden = model(input_ids=ids, attention_mask=attn, position_ids=positions, past_key_values=cache,
                   output_hidden_states=True, logits_to_keep=1).hidden_states[-1]
    pick = target[:, 1:]  # hidden state at t predicts token t+1
    logits = model.get_output_embeddings()(hidden[:, :-1][pick]).float() / temperature
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:][pick][:, None]).squeeze(-1)
    counts = pick.sum(-1).tolist()
    ent = entropy_from_logits(logits) if with_entropy else None
    return Scored(list(torch.split(logp, counts)), list(torch.split(ent, counts)) if ent is not None else None,
                  list(torch.split(hidden[:, :-1][pick], counts)))


class Updater:
    def __init__(self, model, ref_model, cfg: UpdateConfig, total_steps: int):
        if cfg.estimator not in ("grpo", "ppo"):
            raise ValueError(f"trainer.update.estimator must be grpo or ppo, got {cfg.estimator!r}")
        self.model, self.ref, self.cfg = model, ref_model, cfg
        params = [p for p in model.parameters() if p.requires_grad]
        self.value_head = None
        if cfg.estimator == "ppo":  # a linear critic on the policy's last hidden state (shared trunk)
            device = next(model.parameters()).device
            self.value_head = torch.nn.Linear(model.config.hidden_size, 1).to(device)
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)
            params += list(self.value_head.parameters())
        self.opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        warm = max(1, cfg.warmup_steps)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm))
        self.total_steps = total_steps

    @property
    def _uses_kl(self) -> bool:
        return bool(self.cfg.kl_coef) and (self.ref is not None or is_lora(self.model))

    def _batches(self, seqs: list[Sequence]) -> list[list[Sequence]]:
        order = sorted(seqs, key=lambda s: len(s.ids))  # similar lengths share a micro-batch: less padding
        return [order[i:i + self.cfg.micro_batch] for i in range(0, len(order), self.cfg.micro_batch)]

    @torch.no_grad()
    def _prepare(self, seqs: list[Sequence]) -> None:
        self.model.eval()
        for mb in self._batches(seqs):
            scored = masked_logprobs(self.model, mb, self.cfg.temperature)
            for s, lp, h in zip(mb, scored.logps, scored.hidden):
                s.old_logp = lp.detach()
                if self.value_head is not None:
                    s.old_values = self._values(h).detach()
            if self._uses_kl:
                for s, lp in zip(mb, self._ref_logprobs(mb)):
                    s.ref_logp = lp.detach()

        if self.value_head is not None:
            self._gae(seqs)

    def _values(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.value_head(hidden.float()).squeeze(-1)

    def _gae(self, seqs: list[Sequence]) -> None:
        """Per-token advantages and returns, chaining the segments of each episode in order, then whitened
        over the batch."""
        episodes: dict[int, list[Sequence]] = {}
        for s in seqs:
            episodes.setdefault(s.episode, []).append(s)
        for parts in episodes.values():
            values = torch.cat([s.old_values.cpu() for s in parts])
            adv, ret = gae(values, parts[-1].reward, gamma=self.cfg.gamma, lam=self.cfg.lam)
            for s, a, r in zip(parts, torch.split(adv, [len(s.old_values) for s in parts]),
                               torch.split(ret, [len(s.old_values) for s in parts])):
                s.advantage, s.returns = a, r
        flat = torch.cat([s.advantage for s in seqs])
        mean, std = flat.mean(), flat.std() if flat.numel() > 1 else torch.tensor(1.0)
        for s in seqs:
            s.advantage = (s.advantage - mean) / (std + 1e-6)

    def _ref_logprobs(self, mb: list[Sequence]) -> list[torch.Tensor]:
        if self.ref is not None:
            return masked_logprobs(self.ref, mb, self.cfg.temperature)[0]
        with self.model.disable_adapter():  # LoRA: the reference is the base network under the adapters
            return masked_logprobs(self.model, mb, self.cfg.temperature)[0]

    def step(self, seqs: list[Sequence]) -> dict:
        if not seqs:
            return {"skipped": 1.0}
        cfg = self.cfg
        self._prepare(seqs)
        self.model.train()
        total = int(sum(int(s.mask.sum()) for s in seqs))
        sums = {"pg_loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0}
        if self.value_head is not None:
            sums["value_loss"] = 0.0
        grad_norm = 0.0
        for _ in range(cfg.ppo_epochs):
            self.opt.zero_grad(set_to_none=True)
            for mb in self._batches(seqs):
                logps, ents, hidden = masked_logprobs(self.model, mb, cfg.temperature, with_entropy=True)
                logp, ent = torch.cat(logps), torch.cat(ents)
                old = torch.cat([s.old_logp for s in mb])
                adv = torch.cat([torch.as_tensor(s.advantage, dtype=lp.dtype, device=lp.device).expand_as(lp)
                                 for s, lp in zip(mb, logps)])
                pg, clipped = clipped_policy_loss(logp, old, adv, clip_low=cfg.clip_low, clip_high=cfg.clip_high)
                loss = token_mean(pg, total) - cfg.entropy_coef * token_mean(ent, total)
                if self._uses_kl:
                    kl = low_var_kl(logp, torch.cat([s.ref_logp for s in mb]))
                    loss = loss + cfg.kl_coef * token_mean(kl, total)
                    sums["kl"] += float(kl.detach().sum())
                if self.value_head is not None:
                    device = logp.device
                    vf = clipped_value_loss(self._values(torch.cat(hidden)),
                                            torch.cat([s.old_values for s in mb]).to(device),
                                            torch.cat([s.returns for s in mb]).to(device), cfg.value_clip)
                    loss = loss + cfg.vf_coef * token_mean(vf, total)
                    sums["value_loss"] += float(vf.detach().sum())
                loss.backward()
                sums["pg_loss"] += float(pg.detach().sum())
                sums["entropy"] += float(ent.detach().sum())
                sums["clip_frac"] += float(clipped.sum())
            params = [p for g in self.opt.param_groups for p in g["params"]]
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip))
            self.opt.step()
        self.sched.step()
        n = total * cfg.ppo_epochs
        out = {k: v / n for k, v in sums.items()}
        out.update(grad_norm=grad_norm if math.isfinite(grad_norm) else -1.0, lr=self.sched.get_last_lr()[0],
                   trained_tokens=total, sequences=len(seqs))
        return out
