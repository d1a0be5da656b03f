"""Attention of training forwards (`masked_logprobs`) through the compiled causal kernel, forward and backward.

A training forward runs each sequence's own positions after a prompt every sequence shares. Where the kernel
serves the model (`serves`), `masked_logprobs` packs the sequences' own positions into one row, without padding,
and passes `segments` (each sequence's own length, in order) to the model call: query i of a segment then sees the
shared positions (the cache) and its own segment's first i + 1. The kernel (`csrc/causal_attention.cpp`) needs no
mask: it skips the keys above the diagonal and the other segments, and runs at about 2.5x torch's CPU flash kernel
given the equivalent mask (measured 2026-11-27); the matmuls see no padding.

It serves bf16 work (bf16 weights, or bf16 autocast over fp32 ones) on a CPU with AVX512-BF16, with 64-wide heads;
elsewhere `masked_logprobs` pads the rows and keeps torch's kernel with the mask.
"""

from __future__ import annotations

import torch

from sead.models.decode_kernel import causal_attention as _ops

ENABLED = True  # False: padded rows and torch's kernel (benchmarks compare both)
HEAD_SIZE = 64


def _bf16(model) -> bool:
    """The model's forward runs in bf16: its weights are, or bf16 autocast is on."""
    if torch.is_autocast_enabled("cpu"):
        return torch.get_autocast_dtype("cpu") == torch.bfloat16
    return next(model.parameters()).dtype == torch.bfloat16


def serves(model) -> bool:
    """The kernel runs this model's training attention here (now: under the autocast state of the call)."""
    c = model.config
    head = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return (
        ENABLED
        and next(model.parameters()).device.type == "cpu"
        and head == HEAD_SIZE
        and _bf16(model)
        and _ops() is not None
    )


class _CausalAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, starts, lengths, scale):
        out, lse = _ops().causal_attention_forward(query[0], key[0], value[0], starts, lengths, scale)
        ctx.save_for_backward(query, key, value, out, lse, starts, lengths)
        ctx.scale = scale
        return out.unsqueeze(0)

    @staticmethod
    def backward(ctx, grad):
        query, key, value, out, lse, starts, lengths = ctx.saved_tensors
        grad = grad[0] if grad.stride(-1) == 1 else grad[0].contiguous()
        dq, dk, dv, dk_prefix, dv_prefix = _ops().causal_attention_backward(
            grad, query[0], key[0], value[0], out, lse, starts, lengths, ctx.scale
        )
        kv_heads, positions = key.shape[1], key.shape[2]

        def keys_grad(own, prefix):
            """Per query head, prefix per segment (fp32) -> per key/value head, the prefix summed over segments."""
            full = torch.cat([prefix.sum(0), own], 1)
            return full.view(kv_heads, -1, positions, full.shape[-1]).sum(1).to(key.dtype)[None]

        return dq[None], keys_grad(dk, dk_prefix), keys_grad(dv, dv_prefix), None, None, None


def causal_attention(query, key, value, segments: torch.Tensor, scaling: float | None) -> torch.Tensor:
    """(1, heads, q, 64) queries of a packed row against (1, kv heads, shared + q, 64) keys/values -> (1, q, heads,
    64); `segments`: the lengths of the row's segments, in order, adding up to q. Where `serves`."""
    if query.shape[0] != 1:
        raise ValueError(f"a packed forward has one row, not {query.shape[0]}")
    lengths = segments.to(device="cpu", dtype=torch.long).contiguous()
    starts = (torch.cumsum(lengths, 0) - lengths).contiguous()
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    query, key, value = (t.to(torch.bfloat16) for t in (query, key, value))
    return _CausalAttention.apply(query, key, value, starts, lengths, float(scale))
