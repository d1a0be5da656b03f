"""Choosing the next token of every row of a batch at once: greedy, or temperature with top-k / top-p.

Each row draws its randomness from its own generator (one uniform number per token), so a row's tokens do not
depend on which other rows share its batch. Top-p is exact (masses summed in fp64) and on a CPU never sorts the
vocabulary: a row takes the cheapest way its own probabilities allow (`_nucleus_tokens`). A flat row, whose nucleus
holds thousands of tokens (a base model at temperature >= 1), has its probabilities summed in log-spaced bins
(`_binned_nucleus_mask`): every token outside one bin is then known to be in or out, and only that bin is sorted.
Such a row draws by inverse CDF over its nucleus in vocabulary order: the same distribution as in sorted order. A
full sort of SmolLM2's 49k vocabulary costs 3.5 ms a row on a 2-vCPU EPYC, as much as a tenth of a decoding step
(`benchmarks/sampling.py`). On a GPU the logits stay there and flat rows are sorted whole, all in one call.
"""

from __future__ import annotations

import torch

from sead.policy.settings import SamplingConfig

# Bins of 1/16 nat over log-probs down to -32 (p ~ 1e-14); rarer tokens share the last bin. Any binning gives the
# same nucleus; these keep the one bin sorted per row to a few hundred tokens for SmolLM2's 49k vocabulary.
BINS_PER_NAT, BINS = 16, 512
CANDIDATES = 256  # the most likely tokens a row's nucleus is first looked for among (a partial sort)


def pick_tokens(
    logits: torch.Tensor, gens: list[torch.Generator], cfg: SamplingConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next token per row of `logits` (rows x vocabulary, float, on any device) and its log-prob under the
    temperature-scaled distribution before any filtering (what the training forward computes). The generators are
    the CPU's: each row's uniform number is drawn there and the rest runs where the logits are."""
    if cfg.temperature <= 0:
        tok = logits.argmax(-1)
        return tok, torch.log_softmax(logits, -1).gather(1, tok[:, None])[:, 0]
    scaled = logits / cfg.temperature
    logp = torch.log_softmax(scaled, -1)
    u = torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in gens]).to(scaled.device, scaled.dtype)
    vocab = scaled.shape[-1]
    top_k = min(cfg.top_k, vocab) if cfg.top_k and cfg.top_k > 0 else vocab
    if top_k < vocab:
        tok = _top_k_tokens(scaled, u, top_k, cfg.top_p)
    elif cfg.top_p < 1.0:
        tok = _nucleus_tokens(logp, u, cfg.top_p)
    else:  # plain temperature sampling
        tok = _inverse_cdf(logp.exp(), u)
    return tok, logp.gather(1, tok[:, None])[:, 0]


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Row-wise: the first index whose cumulative probability exceeds u times the row's total."""
    cum = probs.cumsum(-1)
    idx = torch.searchsorted(cum, (u * cum[:, -1])[:, None].contiguous(), right=True)[:, 0]
    return idx.clamp_(max=probs.shape[-1] - 1)


def _top_k_tokens(scaled: torch.Tensor, u: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Sample each row from the smallest set of its top-k tokens whose probability, normalised over the top k,
    reaches top_p."""
    vals, idx = _stable_top(scaled, top_k)
    return _draw_sorted(torch.softmax(vals.double(), -1), idx, u, top_p)[0]


def _nucleus_tokens(logp: torch.Tensor, u: torch.Tensor, top_p: float) -> torch.Tensor:
    """Sample each row from its nucleus, by the cheapest exact way that row allows: a row whose most likely token
    alone holds more than top_p (most rows of a trained policy) has that token for its nucleus, no draw needed;
    one whose nucleus lies within its `CANDIDATES` most likely tokens draws among them in sorted order; only the
    rest (a flat row: a base model at temperature >= 1) have their nucleus found in bins (`_nucleus_mask`). The
    way depends on the row's own probabilities only, never on the other rows of the batch."""
    top, tok = logp.max(-1)  # the first index among equals, as in the nucleus's order
    rows = (top.double().exp() <= top_p).nonzero()[:, 0]
    if not len(rows):
        return tok
    sub, u = _take(logp, rows), _take(u, rows)
    vals, idx = _stable_top(sub, min(CANDIDATES, sub.shape[-1]))
    tok[rows], keep = _draw_sorted(vals.double().exp(), idx, u, top_p)  # fp64 masses, as in `_nucleus_mask`
    # the nucleus may reach past the candidates, or end among equals of which the candidates hold only some
    last_kept = vals.gather(1, keep.sum(-1, keepdim=True) - 1)[:, 0]
    wide = (keep[:, -1] | (last_kept == vals[:, -1])).nonzero()[:, 0]
    if len(wide):
        probs, keep = _nucleus_mask(_take(sub, wide), top_p)
        tok[rows[wide]] = _inverse_cdf(probs * keep, _take(u, wide))
    return tok


def _draw_sorted(p: torch.Tensor, idx: torch.Tensor, u: torch.Tensor, top_p: float):
    """A token per row from sorted candidates (`idx`, masses `p`, most likely first) and which of them the nucleus
    keeps: a token stays while the mass before it is within top_p."""
    keep = (p.cumsum(-1) - p) <= top_p
    return idx.gather(1, _inverse_cdf(p * keep, u)[:, None])[:, 0], keep


def _take(t: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    return t if len(rows) == len(t) else t.index_select(0, rows)  # rows: ascending, so all of them is all of t


def _stable_top(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest of each row, most likely first and equals by index (topk leaves their order open)."""
    vals, idx = torch.topk(scores, k, dim=-1)
    idx, by_index = idx.sort(-1)
    vals, order = vals.gather(1, by_index).sort(dim=-1, descending=True, stable=True)
    return vals, idx.gather(1, order)


def _nucleus_mask(logp: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The probabilities (fp64) and the nucleus of each row: the tokens, most likely first (ties by index), kept
    while the probability of those before them is within top_p."""
    return (_sorted_nucleus_mask if logp.is_cuda else _binned_nucleus_mask)(logp, top_p)


def _binned_nucleus_mask(logp: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """`_nucleus_mask` on a CPU, where sorting a whole vocabulary is slow: bins of log-probability hold every token
    more likely than a bin's range before it, so a bin whose whole mass fits lies inside, one whose mass before it
    exceeds top_p outside, and only the one bin in between (per row) is sorted."""
    x = (logp * -BINS_PER_NAT).clamp_(0, BINS - 1)  # bin = floor(x); 0: the most likely tokens
    probs = logp.double().exp()  # sums of tens of thousands of small terms: fp32 would misplace a boundary token
    mass = probs.new_zeros((len(x), BINS)).scatter_add_(1, x.long(), probs)
    ends = mass.cumsum(-1)
    edge = (ends <= top_p).sum(-1)  # the first bin not wholly inside (BINS: every bin fits)
    keep = x < edge[:, None]
    for i, e in enumerate(edge.tolist()):
        if e == BINS:
            continue
        members = ((x[i] >= e) & (x[i] < e + 1)).nonzero()[:, 0]
        p, order = torch.sort(probs[i, members], descending=True, stable=True)
        before = (ends[i, e - 1] if e else 0.0) + p.cumsum(-1) - p
        keep[i, members[order[before <= top_p]]] = True
    return probs, keep


def _sorted_nucleus_mask(logp: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """`_nucleus_mask` by one sort of every row's whole vocabulary: on a GPU that is one launch for all rows, where
    the bins' per-row loop costs a few launches and a wait for the host per row (0.4 ms a flat row on an H100)."""
    probs = logp.double().exp()
    p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    return probs, torch.zeros_like(p, dtype=torch.bool).scatter_(1, order, (p.cumsum(-1) - p) <= top_p)
