"""The agent as a local transformers model: batched sampling with a KV cache, for the episode runner.

Concurrent episodes call `generate`; requests that arrive together are sampled as one batch. Each row samples
with its own generator seeded from the request, so a dialogue's tokens do not depend on which other dialogues
happened to share its batch (that is what makes a resumed run replay exactly).

Two caches spare the model work it has done before (both are dropped when the weights change):
- every dialogue starts with the same SOP prompt, so the keys/values of the prefix all rows share are computed
  once and serve every row;
- each dialogue's own keys/values are kept between its turns (`TurnCache`), so a turn runs only the tokens
  added since the dialogue's previous turn.
Rows of one call with the same prompt (a branched group's members at their first turn) run it once.
The shared prefix's keys/values have one copy, which SEAD's attention (`sead.models.attention`) reads once per
step for all rows. Each row's own positions are laid out as [pad | cached turns | pad | new tokens | tokens to
decode] in one KV buffer sized for the whole call (`BatchCache`), with a 4-D attention mask over the pads and
the positions not decoded yet, and position ids that continue each row's own sequence. Decoding steps of models
the written-out step takes run through `DecodeLoop`, which on a GPU replays each call's step as one CUDA graph;
tokens are picked on the logits' device (`pick_tokens`), so a GPU sends back one token and log-prob per row.
"""

from __future__ import annotations

import contextlib

import torch

from sead.dialogue.agent import AgentOutput, AgentRequest, BatchingPolicy
from sead.models.attention import NAME as ATTENTION
from sead.models.decode_loop import DecodeLoop
from sead.models.decode_step import DecodeStep
from sead.models.packed_linear import PackedLinears
from sead.models.weights import weights_version
from sead.policy.sampling import pick_tokens
from sead.policy.settings import SamplingConfig
from sead.policy.turn_cache import BatchCache, CachedTurn, TurnCache


def common_prefix_length(rows, limit: int) -> int:
    """How many leading tokens all rows share, at most `limit`."""
    first, k = rows[0], 0
    while k < limit and all(int(r[k]) == int(first[k]) for r in rows):
        k += 1
    return k


def prompt_mask(attn: torch.Tensor, start: int, n: int) -> torch.Tensor:
    """(rows, 1, n, keys): query j (key column start + j) sees the real tokens up to itself, and always itself,
    so a padding query never has an empty row (its output is never used; an empty row would be NaN)."""
    keys = torch.arange(attn.shape[1], device=attn.device)
    cols = torch.arange(start, start + n, device=attn.device)[:, None]
    return (attn[:, None, None, :] & (keys <= cols)) | (keys == cols)


class HFPolicy(BatchingPolicy):
    name = "hf"

    def __init__(
        self,
        model,
        tokenizer,
        sampling: SamplingConfig,
        *,
        max_batch: int = 16,
        label: str = "",
        share_prefix: bool = True,
        min_prefix: int = 16,
        turn_cache_mb: float = 4096,
        pack_weights: bool = True,
        fast_decode: bool = True,
        cuda_graph: bool = True,
    ):
        super().__init__(max_batch)
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        self.label = label
        self.share_prefix, self.min_prefix = share_prefix, min_prefix
        self._prefix: tuple[tuple, tuple[int, ...], list] | None = None  # (weights version, prefix ids, its KV)
        self.turns = TurnCache(turn_cache_mb)
        self.packed = PackedLinears.for_model(model) if pack_weights else None  # oneDNN-packed weights while sampling
        # decoding steps written out (same logits, fewer operations); None: the model's own forward
        self.decode_step = DecodeStep.for_model(model) if fast_decode else None
        self.cuda_graph = cuda_graph  # on a GPU, the written-out step's decoding replayed as one CUDA graph a call
        self.generated_tokens = 0

    def identity(self) -> dict:
        dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")  # machines choose it (model.dtype)
        return {"name": self.name, "model": self.label, "dtype": dtype, "sampling": vars(self.sampling)}

    def release(self) -> None:
        """Free what sampling keeps for its next call: the dialogues' keys/values, the shared prompt's, and the
        weights packed for decoding. A trainer calls it once a phase's dialogues are played: the update that follows
        changes the weights, so all of it would be made again anyway, and it is as large as the model."""
        self.turns.clear()
        self._prefix = None
        for held in (self.decode_step, self.packed):
            if held is not None:
                held.release()

    @torch.no_grad()
    def sample(self, requests: list[AgentRequest]) -> list[AgentOutput]:
        with self.packed.active() if self.packed else contextlib.nullcontext():
            return self._sample(requests)

    def _sample(self, requests: list[AgentRequest]) -> list[AgentOutput]:
        model = self.model
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id or self.tokenizer.eos_token_id
        version = weights_version(model)
        self.turns.for_weights(version)
        prompts = [tuple(r.prompt_ids) for r in requests]
        prefix, prefix_kv = self._shared_prefix(prompts, version)
        hits = [self.turns.lookup(p, prefix) if self.turns.enabled else None for p in prompts]
        P, rows = len(prefix), len(requests)
        cached = [len(h.ids) - P if h else 0 for h in hits]  # each row's own positions already computed
        new = [p[P + c :] for p, c in zip(prompts, cached)]  # what this call runs through the model
        C, S = max(cached), max(len(n) for n in new)
        limits = [r.max_new_tokens for r in requests]
        total = C + S + max(limits)  # every row's own key position this call can reach (after the prefix)
        ids = torch.full((rows, S), pad, dtype=torch.long)
        attn = torch.zeros((rows, total), dtype=torch.bool)  # which of them are real tokens, so far
        pos = torch.zeros_like(ids)
        for i, (c, own) in enumerate(zip(cached, new)):
            attn[i, C - c : C] = True
            ids[i, S - len(own) :] = torch.tensor(own)
            attn[i, C + S - len(own) : C + S] = True
            pos[i, S - len(own) :] = torch.arange(P + c, P + c + len(own))
        ids, attn, pos = ids.to(device), attn.to(device), pos.to(device)
        shared = {"shared_kv": prefix_kv} if prefix_kv else {}  # read by sead_gqa attention, once for all rows
        # Rows with one prompt (the members of a branched or shared-user group) are run through the model once;
        # their keys/values and first logits are then copied to every such row, and they sample apart from there.
        first: dict[tuple[int, ...], int] = {}  # prompt -> the first row with it, in row order
        source = [first.setdefault(p, i) for i, p in enumerate(prompts)]
        unique = list(first.values())
        u = torch.tensor(unique, device=device)
        step = model(
            input_ids=ids[u],
            attention_mask=self._mask(prompt_mask(attn[u], C, S)),
            position_ids=pos[u],
            past_key_values=self._batch_cache(
                [hits[i] for i in unique], [cached[i] for i in unique], C, capacity=total
            ),
            use_cache=True,
            logits_to_keep=1,
            **shared,
        )
        cache, step_logits = step.past_key_values, step.logits
        if len(unique) < rows:
            slot = {row: k for k, row in enumerate(unique)}
            spread = torch.tensor([slot[i] for i in source], device=device)
            for layer in cache.layers:
                layer.keys, layer.values = layer.keys.index_select(0, spread), layer.values.index_select(0, spread)
            step_logits = step_logits.index_select(0, spread)
        gens = [torch.Generator().manual_seed(int(r.seed) & 0x7FFFFFFF) for r in requests]
        out_ids: list[list[int]] = [[] for _ in requests]
        out_lp: list[list[float]] = [[] for _ in requests]
        live = list(range(rows))  # rows still sampling
        last_pos, col = pos[:, -1], C + S
        nxt = torch.full((rows,), pad, dtype=torch.long)
        fast = None
        if self.decode_step is not None and self.decode_step.usable():
            fast = DecodeLoop(self.decode_step.ready(), cache, attn, last_pos, col, prefix_kv or None, self.cuda_graph)
        for _ in range(max(limits)):
            # on the logits' device: a GPU sends back a token and a log-prob per row, not every row's logits
            toks, lps = pick_tokens(step_logits[live, -1].float(), [gens[i] for i in live], self.sampling)
            for i, tok, lp in zip(live, toks.tolist(), lps.tolist()):
                out_ids[i].append(tok)
                out_lp[i].append(lp)
                nxt[i] = tok
            live = [i for i in live if out_ids[i][-1] != eos and len(out_ids[i]) < limits[i]]
            if not live:
                break
            if fast is not None:
                step_logits = fast(nxt)
                continue
            attn[:, col] = True
            col, last_pos = col + 1, last_pos + 1
            step = model(
                input_ids=nxt[:, None].to(device),
                attention_mask=self._mask(attn[:, None, None, :]),
                position_ids=last_pos[:, None],
                past_key_values=cache,
                use_cache=True,
                **shared,
            )
            cache, step_logits = step.past_key_values, step.logits
        if self.turns.enabled:
            self._keep_turns(cache, prompts, prefix, hits, cached, new, out_ids, C, S)
        model.train(was_training)
        self.generated_tokens += sum(len(o) for o in out_ids)
        return [AgentOutput(i, lp) for i, lp in zip(out_ids, out_lp)]

    def _shared_prefix(self, prompts: list[tuple[int, ...]], version) -> tuple[tuple[int, ...], list | None]:
        """The prefix every row shares and its keys/values. The last one computed is kept while every prompt
        still starts with it and the weights are unchanged, so the dialogues' cached turns stay usable."""
        if not self.share_prefix or self.model.config._attn_implementation != ATTENTION:
            return (), None  # only SEAD's attention reads a prefix kept apart from the rows' caches
        shortest = min(len(p) for p in prompts)
        if self._prefix is not None:
            v, ids, kv = self._prefix
            if v == version and len(ids) < shortest and all(p[: len(ids)] == ids for p in prompts):
                return ids, kv
        k = common_prefix_length(prompts, shortest - 1)  # every row keeps at least one token of its own
        if k < self.min_prefix:
            return (), None
        ids = prompts[0][:k]
        device = next(self.model.parameters()).device
        out = self.model(input_ids=torch.tensor([ids], device=device), use_cache=True, logits_to_keep=1)
        kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        self._prefix = (version, ids, kv)
        return ids, kv

    def _mask(self, allowed: torch.Tensor) -> torch.Tensor:
        """The 4-D mask in the form the model's attention takes: boolean for sdpa-style kernels, additive for
        `eager`."""
        if self.model.config._attn_implementation != "eager":
            return allowed
        dtype = next(self.model.parameters()).dtype
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
            ~allowed, torch.finfo(dtype).min
        )

    def _batch_cache(self, hits, cached, C: int, capacity: int) -> BatchCache:
        """One cache of `capacity` positions per row after the shared prefix (which has one copy, passed to the
        attention apart): each row's cached turns right-aligned in the first C, the rest for this call's new
        prompt tokens and what it decodes."""
        cache = BatchCache(capacity)
        if not C:
            return cache
        source = next(h.kv for h in hits if h)  # any entry gives the layers' shapes
        for layer, ref in enumerate(source):
            keys_values = []
            for j in (0, 1):  # keys, values
                full = ref[j].new_zeros((len(hits), ref[j].shape[1], C, ref[j].shape[3]))
                for i, (h, c) in enumerate(zip(hits, cached)):
                    if c:
                        full[i, :, C - c :] = h.kv[layer][j][0]
                keys_values.append(full)
            cache.update(*keys_values, layer)
        return cache

    def _keep_turns(self, cache, prompts, prefix, hits, cached, new, out_ids, C: int, S: int) -> None:
        """Store each row's own keys/values: its cached turns, its new tokens and the tokens it sampled (all but
        the last, which was never run through the model)."""
        for i, prompt in enumerate(prompts):
            n = len(out_ids[i]) - 1
            keep = torch.cat([torch.arange(C - cached[i], C), torch.arange(C + S - len(new[i]), C + S + n)]).to(
                cache.layers[0].keys.device
            )
            kv = [
                (layer.keys[i : i + 1].index_select(2, keep), layer.values[i : i + 1].index_select(2, keep))
                for layer in cache.layers
            ]
            self.turns.store(
                CachedTurn(prompt + tuple(out_ids[i][:n]), prefix, kv), replaces=hits[i].ids if hits[i] else None
            )
