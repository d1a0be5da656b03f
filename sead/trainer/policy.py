"""The agent as a local transformers model: batched sampling with a KV cache, for the episode runner.

Concurrent episodes call `generate`; requests that arrive together are sampled as one batch. Each row samples
with its own generator seeded from the request, so a dialogue's tokens do not depend on which other dialogues
happened to share its batch (that is what makes a resumed run replay exactly).

Every dialogue starts with the same SOP prompt, so the key/value cache of the prompt tokens all rows share is
computed once and reused (until the weights change): each row then only runs its own suffix. Rows are laid out
as [shared prefix | padding | own suffix], with position ids that continue the prefix.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from sead.dialogue.agent import AgentOutput, AgentRequest, BatchingPolicy


@dataclass
class SamplingConfig:
    temperature: float = 1.2   # 0 = greedy
    top_p: float = 0.95
    top_k: int = 0             # 0 = off


def common_prefix_length(rows, limit: int) -> int:
    """How many leading tokens all rows share, at most `limit`."""
    first, k = rows[0], 0
    while k < limit and all(int(r[k]) == int(first[k]) for r in rows):
        k += 1
    return k


class HFPolicy(BatchingPolicy):
    name = "hf"

    def __init__(self, model, tokenizer, sampling: SamplingConfig, *, max_batch: int = 16, label: str = "",
                 share_prefix: bool = True, min_prefix: int = 16):
        super().__init__(max_batch)
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        self.label = label
        self.share_prefix, self.min_prefix = share_prefix, min_prefix
        self._prefix: tuple[tuple, object] | None = None  # ((prefix ids, weights version), cache)
        self.generated_tokens = 0

    def identity(self) -> dict:
        return {"name": self.name, "model": self.label, "sampling": vars(self.sampling)}

    @torch.no_grad()
    def sample(self, requests: list[AgentRequest]) -> list[AgentOutput]:
        model, s = self.model, self.sampling
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id or self.tokenizer.eos_token_id
        prompts = [r.prompt_ids for r in requests]
        shared = self._shared_length(prompts) if self.share_prefix else 0
        past = self._prefix_cache(prompts[0][:shared], len(requests)) if shared else None
        width = max(len(p) for p in prompts) - shared
        ids = torch.full((len(requests), width), pad, dtype=torch.long)
        attn = torch.zeros((len(requests), shared + width), dtype=torch.long)
        attn[:, :shared] = 1
        pos = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            own = p[shared:]
            ids[i, width - len(own):] = torch.tensor(own)
            attn[i, shared + width - len(own):] = 1
            pos[i, width - len(own):] = torch.arange(shared, len(p))
        ids, attn, pos = ids.to(device), attn.to(device), pos.to(device)
        gens = [torch.Generator().manual_seed(int(r.seed) & 0x7FFFFFFF) for r in requests]
        limits = [r.max_new_tokens for r in requests]
        out_ids: list[list[int]] = [[] for _ in requests]
        out_lp: list[list[float]] = [[] for _ in requests]
        done = [False] * len(requests)
        step = model(input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=past, use_cache=True)
        cache, last_pos = step.past_key_values, pos[:, -1]
        for t in range(max(limits)):
            logits = step.logits[:, -1].float().cpu()
            nxt = torch.full((len(requests),), pad, dtype=torch.long)
            for i in range(len(requests)):
                if done[i]:
                    continue
                tok, lp = self._pick(logits[i], gens[i])
                out_ids[i].append(tok)
                out_lp[i].append(lp)
                nxt[i] = tok
                done[i] = tok == eos or len(out_ids[i]) >= limits[i]
            if all(done):
                break
            attn = torch.cat([attn, torch.ones((len(requests), 1), dtype=attn.dtype, device=device)], dim=1)
            last_pos = last_pos + 1
            step = model(input_ids=nxt[:, None].to(device), attention_mask=attn, position_ids=last_pos[:, None],
                         past_key_values=cache, use_cache=True)
            cache = step.past_key_values
        model.train(was_training)
        self.generated_tokens += sum(len(o) for o in out_ids)
        return [AgentOutput(i, lp) for i, lp in zip(out_ids, out_lp)]

    def _shared_length(self, prompts: list[list[int]]) -> int:
        """Length of the common prefix, leaving every row at least one token of its own (0 if too short)."""
        k = common_prefix_length(prompts, min(len(p) for p in prompts) - 1)
        return k if k >= self.min_prefix else 0

    def _prefix_cache(self, prefix: list[int], rows: int):
        """A per-batch copy of the prefix's KV cache, recomputed only when the prefix or the weights changed
        (every in-place weight update bumps the parameters' version counters)."""
        version = sum(p._version for p in self.model.parameters())
        key = (tuple(prefix), version)
        if self._prefix is None or self._prefix[0] != key:
            device = next(self.model.parameters()).device
            out = self.model(input_ids=torch.tensor([prefix], device=device), use_cache=True)
            self._prefix = (key, out.past_key_values)
        cache = copy.deepcopy(self._prefix[1])
        cache.batch_repeat_interleave(rows)
        return cache

    def _pick(self, logits: torch.Tensor, gen: torch.Generator) -> tuple[int, float]:
        s = self.sampling
        if s.temperature <= 0:
            tok = int(logits.argmax())
            return tok, float(torch.log_softmax(logits, -1)[tok])
        scaled = logits / s.temperature
        logp = torch.log_softmax(scaled, -1)
        filtered = scaled.clone()
        if s.top_k and s.top_k > 0:
            kth = torch.topk(filtered, min(s.top_k, filtered.numel())).values[-1]
            filtered[filtered < kth] = float("-inf")
        if s.top_p < 1.0:
            order = torch.argsort(filtered, descending=True)
            probs = torch.softmax(filtered[order], -1)
            cut = torch.cumsum(probs, -1) - probs > s.top_p  # keep the smallest set reaching top_p
            filtered[order[cut]] = float("-inf")
        tok = int(torch.multinomial(torch.softmax(filtered, -1), 1, generator=gen))
        # The log-prob under the temperature-scaled policy: what the training forward computes.
        return tok, float(logp[tok])
