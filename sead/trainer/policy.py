"""The agent as a local transformers model: batched sampling with a KV cache, for the episode runner.

Concurrent episodes call `generate`; requests that arrive together are sampled as one left-padded batch.
Each row samples with its own generator seeded from the request, so a dialogue's tokens do not depend on
which other dialogues happened to share its batch (that is what makes a resumed run replay exactly).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import torch

from sead.dialogue.agent import AgentOutput, AgentPolicy, AgentRequest


@dataclass
class SamplingConfig:
    temperature: float = 1.2   # 0 = greedy
    top_p: float = 0.95
    top_k: int = 0             # 0 = off


class HFPolicy(AgentPolicy):
    name = "hf"

    def __init__(self, model, tokenizer, sampling: SamplingConfig, *, max_batch: int = 16, label: str = ""):
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        self.max_batch, self.label = max_batch, label
        self._pending: list[tuple[AgentRequest, asyncio.Future]] = []
        self._worker: asyncio.Task | None = None
        self.generated_tokens = 0

    def identity(self) -> dict:
        return {"name": self.name, "model": self.label, "sampling": vars(self.sampling)}

    async def generate(self, request: AgentRequest) -> AgentOutput:
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((request, fut))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        while self._pending:
            for _ in range(3):  # let every episode that is ready submit its request before batching
                await asyncio.sleep(0)
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch:]
            try:
                outs = await asyncio.to_thread(self.sample, [r for r, _ in batch])
            except Exception as e:
                for _, fut in batch:
                    fut.set_exception(e)
                continue
            for (_, fut), out in zip(batch, outs):
                fut.set_result(out)

    @torch.no_grad()
    def sample(self, requests: list[AgentRequest]) -> list[AgentOutput]:
        model, s = self.model, self.sampling
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id or self.tokenizer.eos_token_id
        width = max(len(r.prompt_ids) for r in requests)
        ids = torch.full((len(requests), width), pad, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for i, r in enumerate(requests):
            ids[i, width - len(r.prompt_ids):] = torch.tensor(r.prompt_ids)
            attn[i, width - len(r.prompt_ids):] = 1
        ids, attn = ids.to(device), attn.to(device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        gens = [torch.Generator().manual_seed(int(r.seed) & 0x7FFFFFFF) for r in requests]
        limits = [r.max_new_tokens for r in requests]
        out_ids: list[list[int]] = [[] for _ in requests]
        out_lp: list[list[float]] = [[] for _ in requests]
        done = [False] * len(requests)
        step = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True)
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
