"""Choosing the next token of every row of a batch at once: greedy, or temperature with top-k / top-p.

Each row draws its randomness from its own generator (one uniform number per token), so a row's tokens do not
depend on which other rows share its batch. Top-p is exact: the nucleus is looked for among a row's most likely
`_CANDIDATES` tokens (a partial sort of the vocabulary, which is what makes this fast); a row whose nucleus is
wider than that falls back to a full sort.
"""

from __future__ import annotations

import torch

from sead.policy.settings import SamplingConfig

_CANDIDATES = 256


def pick_tokens(
    logits: torch.Tensor, gens: list[torch.Generator], cfg: SamplingConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next token per row of `logits` (rows x vocabulary, float) and its log-prob under the temperature-scaled
    distribution before any filtering (what the training forward computes)."""
    if cfg.temperature <= 0:
        tok = logits.argmax(-1)
        return tok, torch.log_softmax(logits, -1).gather(1, tok[:, None])[:, 0]
    scaled = logits / cfg.temperature
    logp = torch.log_softmax(scaled, -1)
    u = torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in gens]).to(scaled.dtype)
    vocab = scaled.shape[-1]
    top_k = min(cfg.top_k, vocab) if cfg.top_k and cfg.top_k > 0 else vocab
    if top_k == vocab and cfg.top_p >= 1.0:  # plain temperature sampling: inverse CDF, no sort needed
        tok = _inverse_cdf(logp.exp(), u)
    else:
        tok = _nucleus_tokens(scaled, u, top_k, cfg.top_p)
    return tok, logp.gather(1, tok[:, None])[:, 0]


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Row-wise: the first index whose cumulative probability exceeds u times the row's total."""
    cum = probs.cumsum(-1)
    idx = torch.searchsorted(cum, (u * cum[:, -1])[:, None].contiguous(), right=True)[:, 0]
    return idx.clamp_(max=probs.shape[-1] - 1)


def _nucleus_tokens(scaled: torch.Tensor, u: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Sample each row from the smallest set of its top tokens (within the top k) whose probability reaches
    top_p, the probabilities normalised over the top-k set."""
    vocab = scaled.shape[-1]
    width = min(top_k, _CANDIDATES)
    vals, idx = torch.topk(scaled, width, dim=-1)
    norm = torch.logsumexp(
        scaled if top_k == vocab else vals if width == top_k else torch.topk(scaled, top_k, dim=-1).values,
        -1,
        keepdim=True,
    )
    p = (vals - norm).exp()
    keep = (p.cumsum(-1) - p) <= top_p  # a token stays while the mass before it is within top_p
    out = idx.gather(1, _inverse_cdf(p * keep, u)[:, None])[:, 0]
    if width < top_k:  # rows whose nucleus may reach past the candidates: sort their whole top-k set
        for i in keep[:, -1].nonzero()[:, 0].tolist():
            v, ix = torch.topk(scaled[i], top_k)
            pi = (v - norm[i]).exp()
            out[i] = ix[_inverse_cdf((pi * ((pi.cumsum(-1) - pi) <= top_p))[None], u[i : i + 1])[0]]
    return out
