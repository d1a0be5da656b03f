"""Grouped-query attention that reads each key/value head once, registered with transformers as `sead_gqa`.

SmolLM2 has 3 key/value heads per 9 query heads. transformers' `sdpa` path only lets the kernel handle the
grouping (`enable_gqa`) when there is no attention mask; SEAD's batches always carry one (rows of different
lengths, padding between the shared prefix and each row's turns), so it copies every layer's whole KV cache 3x
per decoding step (`repeat_kv`): 68 % of a 32-row fp32 step on a 2-vCPU Zen 4. Here the kernel gets the
grouping and the mask together. In fp32 the result is bit-equal to the `sdpa` path (same kernel, no copy).

One more case: the CPU's fused kernel is several times slower in bf16/fp16 than in fp32 for a single query per
row (decoding). There, scores and outputs are batched matmuls over the query heads of each group, read straight
from the cache, with the softmax in fp32; within bf16 rounding of the `sdpa` path (tested). On a CPU with
AVX512-BF16, the rows' own positions of such a step go through a compiled kernel instead (`decode_kernel.py`: keys
and values read once, unused positions skipped, 1.3-2.1x the matmuls' speed), as close to exact as the matmuls.

A prefix every row shares (the SOP prompt) is kept once, apart from the rows' own keys/values, and attended in two
parts whose softmaxes are merged (cascade attention): decoding steps with matmuls over every row's queries at
once; prompt positions on a CPU with torch's tiled (flash) CPU kernel, which holds no score matrix.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from sead.models import training_attention
from sead.models.decode_kernel import single_query_attention

NAME = "sead_gqa"


def gqa_attention(
    module,
    query,
    key,
    value,
    attention_mask,
    dropout=0.0,
    scaling=None,
    is_causal=None,
    shared_kv=None,
    segments=None,
    **_,
):
    """(batch, heads, q, dim) query against (batch, kv heads, k, dim) keys/values; the mask is sdpa's boolean
    (batch, 1, q, k), True where a query may attend, or None. Returns (batch, q, heads, dim) as transformers
    expects. `shared_kv` (a model-call keyword): per layer, the keys/values (1, kv heads, p, dim) of a prefix
    every row starts with and every query sees, kept apart from `key`/`value` (the rows' own positions).
    `segments` (a model-call keyword, where `training_attention.serves` the model): one row of sequences packed
    one after another, each causal over its own positions after the k - q shared ones; the mask is not read."""
    if segments is not None:
        return training_attention.causal_attention(query, key, value, segments, scaling), None
    if shared_kv is not None:
        return _with_shared_prefix(query, key, value, attention_mask, shared_kv[module.layer_idx], scaling), None
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


def _kernel(query, key):
    """The compiled single-query kernel (`sead.models.decode_kernel`) where it serves this call: one query per row,
    bf16 on the CPU, no gradient, a head size it takes; else None (the matmul path)."""
    if query.shape[2] != 1 or query.dtype != torch.bfloat16 or query.device.type != "cpu" or torch.is_grad_enabled():
        return None
    if not USE_KERNEL or key.shape[-1] not in (64, 128) or key.stride(-1) != 1:
        return None
    return single_query_attention()


def _own_part(op, query, key, value, mask, scale):
    """(unnormalised output, score maximum, exp-sum) over each row's own positions, per (row, kv head, query head
    of the group), from the kernel; the mask (rows, 1, 1, own), True where a query may attend, or None."""
    b, heads, _, dim = query.shape
    q = query.reshape(b, key.shape[1], heads // key.shape[1], dim)
    valid = _ALL_VALID if mask is None else mask.expand(b, 1, 1, key.shape[2]).reshape(b, -1).contiguous()
    return op(q, key, value, valid, scale)


def _single_query(query, key, value, mask, scaling):
    b, heads, _, dim = query.shape
    scale = scaling if scaling is not None else dim**-0.5
    if (op := _kernel(query, key)) is not None:
        out, _, total = _own_part(op, query, key, value, mask, scale)
        return (out / total.unsqueeze(-1)).to(query.dtype).view(b, 1, heads, dim)
    kv_heads, keys = key.shape[1], key.shape[2]
    q = query.view(b, kv_heads, heads // kv_heads, dim)  # the query heads that share a key/value head
    scores = torch.matmul(q, key.transpose(-1, -2)).float() * scale
    if mask is not None:
        scores = scores.masked_fill(~mask.view(b, 1, 1, keys), float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1).to(value.dtype), value)
    return out.view(b, 1, heads, dim)


# fp32 scores one call of `_cascade` may hold (128 MB): many rows are taken a slice of rows at a time. All at once,
# one call of 64 rows x 900 new tokens raised the process's peak memory by 6 GB (measured 2026-11-24).
SCORE_BUDGET = 32 * 2**20
# Prompt positions (more than one query per row) on a CPU, without gradient, go through the tiled kernel (`_tiled`);
# False: `_cascade`.
TILED_PREFILL = True
_flash_cpu = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu  # -> (output, log-sum-exp per query)
# Decoding steps in bf16 on a CPU with AVX512-BF16 take the compiled kernel for each row's own positions; False: the
# batched matmuls (also the path wherever the kernel cannot be built or loaded)
USE_KERNEL = True
_ALL_VALID = torch.empty(0, dtype=torch.bool)  # the kernel's "no mask"


def _with_shared_prefix(query, key, value, mask, prefix, scaling):
    """Attention over [shared prefix | row's own keys] in one softmax, with one copy of the prefix for all rows."""
    # the tiled kernel's log-sum-exp carries no gradient, so a forward with one enabled takes the cascade; that is
    # forward only (it works in place, no backward): training shares its prefix through `SharedContext` instead
    if TILED_PREFILL and query.shape[2] > 1 and query.device.type == "cpu" and not torch.is_grad_enabled():
        return _tiled(query, key, value, mask, prefix, scaling)
    return _cascade(query, key, value, mask, prefix, scaling)


def _tiled(query, key, value, mask, prefix, scaling):
    """The prefix part (every row's queries stacked as one sequence: no mask, every query sees the whole prefix)
    and the rows' own part each through the tiled CPU kernel, merged by their log-sum-exps. No score matrix is
    held, so memory does not grow with rows x prompt length. 32 rows of 550 tokens after the SOP prompt: the
    whole prefill 1.32x faster than with `_cascade` (benchmarks/prefill_rows.py, docs/performance.md)."""
    b, heads, q_len, dim = query.shape
    group = heads // key.shape[1]
    pk, pv = (t.repeat_interleave(group, dim=1) for t in prefix)  # the kernel takes as many kv heads as queries
    stacked = query.transpose(0, 1).reshape(1, heads, b * q_len, dim)
    out_pre, lse_pre = _flash_cpu(stacked, pk, pv, scale=scaling)
    out_pre = out_pre.reshape(heads, b, q_len, dim).transpose(0, 1)
    lse_pre = lse_pre.reshape(heads, b, q_len).transpose(0, 1)
    hidden = None
    if mask is not None:  # the kernel takes an additive mask in the query's dtype
        hidden = torch.zeros(mask.shape, dtype=query.dtype).masked_fill_(~mask, float("-inf"))
    k, v = (t.repeat_interleave(group, dim=1) for t in (key, value))
    out_own, lse_own = _flash_cpu(query, k, v, attn_mask=hidden, scale=scaling)
    if mask is not None:  # the kernel gives a query whose own keys are all hidden lse 0: its own part weighs 0
        lse_own = lse_own.masked_fill(~mask.any(-1), float("-inf"))
    # softmax over both parts: each part's output weighted by its share of the total exp-sum
    top = torch.maximum(lse_pre, lse_own)
    w_pre, w_own = ((lse - top).exp_().unsqueeze(-1) for lse in (lse_pre, lse_own))
    out = out_pre.float() * w_pre + out_own.float() * w_own
    out /= w_pre + w_own
    return out.to(query.dtype).transpose(1, 2).contiguous()


def _cascade(query, key, value, mask, prefix, scaling):
    """The prefix's scores and weighted values are one matmul per key/value head with every row's queries stacked,
    instead of a copy of the prefix per row (cascade attention). Scores and normalisation in fp32."""
    b, heads, q_len, dim = query.shape
    rows = max(1, SCORE_BUDGET // (heads * q_len * (prefix[0].shape[2] + key.shape[2])))
    if b > rows:  # rows are independent: a slice at a time gives the same result in a bounded space
        return torch.cat(
            [
                _cascade(
                    query[i : i + rows],
                    key[i : i + rows],
                    value[i : i + rows],
                    None if mask is None else mask[i : i + rows],
                    prefix,
                    scaling,
                )
                for i in range(0, b, rows)
            ]
        )
    kv_heads, own = key.shape[1], key.shape[2]
    pk, pv = prefix[0][0], prefix[1][0]  # (kv heads, p, dim)
    rows_q = heads // kv_heads * q_len  # queries per row and key/value head: (head in group, position)
    scale = scaling if scaling is not None else dim**-0.5
    q = query.reshape(b, kv_heads, rows_q, dim)
    # the prefix side stays (kv, rows x queries, p) throughout: the large tensors are never transposed
    s_pre = torch.matmul(q.transpose(0, 1).reshape(kv_heads, b * rows_q, dim), pk.transpose(-1, -2)).float()
    if (op := _kernel(query, key)) is not None:  # a decoding step: the own part from the kernel, merged by maxima
        o_own, m_own, l_own = (t.transpose(0, 1).reshape(kv_heads, b * rows_q, -1) for t in
                               _own_part(op, query, key, value, mask, scale))  # fmt: skip
        top = torch.maximum(s_pre.amax(-1, keepdim=True), m_own)
        e_pre = s_pre.sub_(top).mul_(scale).exp_()
        w_own = (m_own - top).mul_(scale).exp_()  # 0 where a row has no own position to attend
        out = torch.matmul(e_pre.to(pv.dtype), pv).float().addcmul_(o_own, w_own)
        out /= e_pre.sum(-1, keepdim=True).addcmul_(l_own, w_own)
        return out.view(kv_heads, b, heads // kv_heads, dim).transpose(0, 1).reshape(b, 1, heads, dim).to(query.dtype)
    s_own = torch.matmul(q, key.transpose(-1, -2)).float()  # (b, kv, rows_q, own)
    if mask is not None:
        hidden = ~mask.view(b, 1, 1, q_len, own)
        s_own = s_own.view(b, kv_heads, -1, q_len, own).masked_fill_(hidden, float("-inf")).view_as(s_own)
    top_own = s_own.amax(-1, keepdim=True)
    top = torch.maximum(s_pre.amax(-1, keepdim=True), top_own.transpose(0, 1).reshape(kv_heads, b * rows_q, 1))
    e_pre = s_pre.sub_(top).mul_(scale).exp_()  # scaled after the max: the same maximum
    e_own = s_own.sub_(top.view(kv_heads, b, rows_q, 1).transpose(0, 1)).mul_(scale).exp_()
    total = e_pre.sum(-1, keepdim=True).view(kv_heads, b, rows_q, 1).transpose(0, 1) + e_own.sum(-1, keepdim=True)
    out = torch.matmul(e_pre.to(pv.dtype), pv).view(kv_heads, b, rows_q, dim).transpose(0, 1).float()
    out += torch.matmul(e_own.to(value.dtype), value).float()
    out /= total
    return out.to(query.dtype).reshape(b, heads, q_len, dim).transpose(1, 2).contiguous()


AttentionInterface.register(NAME, gqa_attention)
AttentionMaskInterface.register(NAME, sdpa_mask)


def use_gqa_attention(model) -> None:
    """Switch a loaded transformers model to this attention (Llama-family models; others keep theirs)."""
    try:
        model.set_attn_implementation(NAME)
    except ValueError:  # an architecture that does not take custom attention functions
        pass
