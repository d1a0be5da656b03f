"""The trained model's log-probabilities (and entropies) of the agent tokens of a batch of sequences: the shared
prompt run once with gradient (`SharedContext`), rows padded or packed into one row for the compiled kernel."""

from __future__ import annotations

from typing import NamedTuple

import torch
from transformers import DynamicCache

from sead.models import training_attention
from sead.models.attention import NAME as ATTENTION
from sead.trainer.batching import shared_prompt_length
from sead.trainer.estimators import Sequence
from sead.trainer.token_logprobs import token_logprobs


class Scored(NamedTuple):
    logps: list[torch.Tensor]
    entropies: list[torch.Tensor] | None
    hidden: list[torch.Tensor]  # last hidden state at each position that predicts an agent token


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
