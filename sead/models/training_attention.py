"""Attention of training forwards (`masked_logprobs`) through the compiled causal kernel, forward and backward.

A training forward runs each row's own positions after a prompt every row shares, right-padded to one width. The
model call says so by passing `row_lengths` (each row's own positions; `sead.trainer.update.masked_logprobs` does):
query i of a row then sees the shared positions and its own first i + 1, which is exactly the mask transformers
builds from such a batch, so the kernel (`csrc/causal_attention.cpp`) needs no mask. It skips the keys above the
diagonal and the padded queries, and runs at about 2.5x torch's CPU flash kernel given the mask
(benchmarks/RESULTS.md). Padded queries give zeros (nothing reads them) and get no gradient.

Used for bf16 on a CPU with AVX512-BF16 and head size 64; anywhere else the caller keeps torch's kernel.
"""

from __future__ import annotations

import torch

from sead.models.decode_kernel import causal_attention as _ops

ENABLED = True  # False: torch's kernel with the mask (benchmarks compare both)
HEAD_SIZE = 64


class _CausalAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, lengths, scale):
        out, lse = _ops().causal_attention_forward(query, key, value, lengths, scale)
        ctx.save_for_backward(query, key, value, out, lse, lengths)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad):
        query, key, value, out, lse, lengths = ctx.saved_tensors
        grad = grad if grad.stride(-1) == 1 else grad.contiguous()
        dq, dk, dv = _ops().causal_attention_backward(grad, query, key, value, out, lse, lengths, ctx.scale)
        rows, kv_heads = key.shape[:2]
        # the kernel returns the key/value gradients per query head (fp32); each group of heads shares one
        dk, dv = (g.view(rows, kv_heads, -1, *g.shape[2:]).sum(2).to(key.dtype) for g in (dk, dv))
        return dq, dk, dv, None, None


def _bf16(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    """The attention runs in bf16: its inputs are, or bf16 autocast is on (which casts them for torch's kernel; the
    rotary turn leaves queries and keys in fp32 under autocast)."""
    if torch.is_autocast_enabled("cpu"):
        return torch.get_autocast_dtype("cpu") == torch.bfloat16
    return query.dtype == key.dtype == value.dtype == torch.bfloat16


def applies(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout: float) -> bool:
    return (
        ENABLED
        and query.device.type == "cpu"
        and _bf16(query, key, value)
        and query.shape[-1] == HEAD_SIZE
        and key.shape[2] >= query.shape[2]
        and not dropout
        and _ops() is not None
    )


def causal_attention(query, key, value, row_lengths: torch.Tensor, scaling: float | None) -> torch.Tensor:
    """(rows, heads, q, 64) queries against (rows, kv heads, shared + q, 64) keys/values -> (rows, q, heads, 64);
    row r's queries past `row_lengths[r]` are padding. Call where `applies`."""
    lengths = row_lengths.to(device="cpu", dtype=torch.long).contiguous()
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    query, key, value = (t.to(torch.bfloat16) for t in (query, key, value))
    return _CausalAttention.apply(query, key, value, lengths, float(scale))
