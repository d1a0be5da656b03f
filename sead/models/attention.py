"""Grouped-query attention that reads each key/value head once, registered with transformers as `sead_gqa`.

SmolLM2 has 3 key/value heads per 9 query heads. transformers' `sdpa` path only lets the kernel handle the
grouping (`enable_gqa`) when there is no attention mask; SEAD's batches always carry one (rows of different
lengths, padding between the shared prefix and each row's turns), so it copies every layer's whole KV cache 3x
per decoding step (`repeat_kv`): 68 % of a 32-row fp32 step on a 2-vCPU Zen 4. Here the kernel gets the
grouping and the mask together. In fp32 the result is bit-equal to the `sdpa` path (same kernel, no copy).

One more case: the CPU's fused kernel is several times slower in bf16/fp16 than in fp32 for a single query per
row (decoding). There, scores and outputs are batched matmuls over the query heads of each group, read straight
from the cache, with the softmax in fp32; within bf16 rounding of the `sdpa` path (tested).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "sead_gqa"


def gqa_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **_):
    """(batch, heads, q, dim) query against (batch, kv heads, k, dim) keys/values; the mask is sdpa's boolean
    (batch, 1, q, k), True where a query may attend, or None. Returns (batch, q, heads, dim) as transformers
    expects."""
    heads, kv_heads = query.shape[1], key.shape[1]
    if query.shape[2] == 1 and query.dtype != torch.float32 and query.device.type == "cpu" and not dropout:
        return _single_query(query, key, value, attention_mask, scaling), None
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    out = F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=bool(query.shape[2] > 1 and attention_mask is None and causal),
        enable_gqa=heads != kv_heads,
    )
    return out.transpose(1, 2).contiguous(), None


def _single_query(query, key, value, mask, scaling):
    b, heads, _, dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    q = query.view(b, kv_heads, heads // kv_heads, dim)  # the query heads that share a key/value head
    scores = torch.matmul(q, key.transpose(-1, -2)).float() * (scaling if scaling is not None else dim**-0.5)
    if mask is not None:
        scores = scores.masked_fill(~mask.view(b, 1, 1, keys), float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1).to(value.dtype), value)
    return out.view(b, 1, heads, dim)


AttentionInterface.register(NAME, gqa_attention)
AttentionMaskInterface.register(NAME, sdpa_mask)


def use_gqa_attention(model) -> None:
    """Switch a loaded transformers model to this attention (Llama-family models; others keep theirs)."""
    try:
        model.set_attn_implementation(NAME)
    except ValueError:  # an architecture that does not take custom attention functions
        pass
