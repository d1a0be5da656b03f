"""One decoding step of a Llama-family model (SmolLM2), written out with fewer and larger operations, and the same
arithmetic as the transformers forward it stands in for.

At the few rows of a sampling call's tail, a decoding step of the transformers forward spends more time on module
calls and small operators than on reading the weights (43 ms a step at one row on a 2-vCPU Zen 4, against about
9 ms to stream SmolLM2's bf16 weights, measured 2026-11-26). Here the query, key and value projections are one
matmul and the gate and up projections another (their weights concatenated once and, where `PackedLinears`
would pack them, packed for oneDNN), the rotary embedding turns queries and keys in one pass, and no hooks, module
calls or output objects run. Each elementwise operation is transformers' own, in the same dtype and order, so a
step gives the logits of the transformers forward (tests compare them bit for bit); prompt positions keep the
transformers path. On CPUs with AVX512-BF16 a bf16 step's linear layers at <= `SMALL_ROWS` rows take the compiled
small-rows kernel instead of oneDNN (`decode_kernel.py`): fp32 sums as oneDNN's, added in another order, so its
logits are not oneDNN's bits (tested to be as close to fp64); `USE_SMALL_ROWS = False` gives oneDNN's. There, up
to `FUSED_ROWS` rows, all layers of a step are one compiled call (`decode_layers`: the same arithmetic, rounded to
bf16 where this one rounds, sums in other orders; as close to fp64 as this one, tested); `USE_FUSED = False` keeps
the operators.

Only plain Llama decoder layers (SmolLM2's architecture) with SEAD's attention are taken; for anything else
`DecodeStep.for_model` answers None and the caller keeps the model's own forward.
"""

from __future__ import annotations

import weakref
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from sead.models.attention import NAME as ATTENTION
from sead.models.attention import gqa_attention
from sead.models.decode_kernel import (
    decode_layers,
    decode_layers_fp32,
    pack_small_rows,
    pack_small_rows_fp32,
    small_rows_linear,
    small_rows_linear_fp32,
)
from sead.models.packed_linear import PACKED_DTYPES, pack_weight, packed_forward, packing_available
from sead.models.weights import weights_version


def _rms_norm(x: torch.Tensor, norm) -> torch.Tensor:
    """transformers' LlamaRMSNorm, operation for operation (fp32 statistics, the weight applied in x's dtype)."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * h.to(x.dtype)


SMALL_ROWS = 256  # the kernel's linears measured faster than oneDNN's up to here (1.5x at 1-8 rows, 1.04x at 256)
USE_SMALL_ROWS = True
FUSED_ROWS = 128  # up to here a step is one `decode_layers` call (2.3x at 8 rows, 1.4x at 128: docs/performance.md)
USE_FUSED = True
PREFIX_MATMUL_ROWS = 48  # from here the fused step attends the shared prompt by matmuls (1x at 16-32 rows, 1.17x at 64)


def _linear(weight: torch.Tensor, packed: bool):
    """`x -> x @ weight.T` as `PackedLinears` would compute it for a layer with this weight: from a oneDNN pack
    where that is bit-equal to `F.linear`, else `F.linear`; at a decoding step's rows the small-rows kernel of the
    weight's dtype where it runs (fp32: `F.linear` above its rows)."""
    if weight.dtype == torch.float32 and weight.device.type == "cpu" and (op := small_rows_linear_fp32()) is not None:
        return _SmallRowsOr(weight, op, pack_small_rows_fp32(weight), partial(F.linear, weight=weight))
    if not packed:
        return partial(F.linear, weight=weight)
    op = small_rows_linear() if weight.dtype == torch.bfloat16 else None
    if op is None:
        return partial(packed_forward, pack_weight(weight), None)
    return _SmallRowsOr(weight, op, pack_small_rows(weight), _PackedOnFirstUse(weight))


class _PackedOnFirstUse:
    """oneDNN's packed linear, its pack made on the first call: above the small-rows kernel's rows, which
    decoding may never reach before the next weight update makes the packs again."""

    def __init__(self, weight: torch.Tensor):
        self.weight, self._packed = weight, None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._packed is None:
            self._packed = pack_weight(self.weight)
        return packed_forward(self._packed, None, x)


class _SmallRowsOr:
    """The compiled small-rows kernel up to `SMALL_ROWS` rows of x, `large` above."""

    def __init__(self, weight: torch.Tensor, op, packed: torch.Tensor, large):
        self.op, self.packed, self.out, self.large = op, packed, weight.shape[0], large
        self.fp32 = weight.dtype == torch.float32

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if USE_SMALL_ROWS and x.numel() <= SMALL_ROWS * x.shape[-1]:
            return self.op(x, self.packed, self.out)
        return self.large(x)


def supported(model) -> bool:
    """Plain Llama decoder layers without biases, silu, the default rotary embedding and SEAD's attention: what
    this step reproduces exactly."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaMLP, LlamaRMSNorm

    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or type(getattr(model, "lm_head", None)) is not nn.Linear:
        return False
    cfg = model.config
    rope = getattr(cfg, "rope_parameters", None) or {}
    if cfg._attn_implementation != ATTENTION or rope.get("rope_type", "default") != "default":
        return False
    if getattr(cfg, "hidden_act", None) != "silu" or getattr(inner.rotary_emb, "attention_scaling", None) is None:
        return False
    for layer in layers:
        attn = getattr(layer, "self_attn", None)
        if type(layer) is not LlamaDecoderLayer or type(layer.mlp) is not LlamaMLP:
            return False
        linears = [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, layer.mlp.gate_proj, layer.mlp.up_proj]
        if any(type(m) is not nn.Linear or m.bias is not None for m in [*linears, layer.mlp.down_proj]):
            return False
        if type(layer.input_layernorm) is not LlamaRMSNorm or type(layer.post_attention_layernorm) is not LlamaRMSNorm:
            return False
    return type(inner.norm) is LlamaRMSNorm


class _Layer:
    def __init__(self, layer, packed: bool):
        attn, mlp = layer.self_attn, layer.mlp
        qkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]).detach()
        gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach()
        self.qkv, self.gate_up = _linear(qkv, packed), _linear(gate_up, packed)
        self.o, self.down = _linear(attn.o_proj.weight.detach(), packed), _linear(mlp.down_proj.weight.detach(), packed)
        self.attn, self.norm_in, self.norm_post = attn, layer.input_layernorm, layer.post_attention_layernorm
        self.inner = mlp.gate_proj.out_features


def _fused_step(layers: list[_Layer]) -> tuple | None:
    """(whether the weights are fp32, which picks the fused step's kernel at each call (`_fused_kernel`); what it
    takes of every layer: the norms' weights and the small-rows packs of its linears); None
    where the step has no such packs (no small-rows kernel for its dtype here) or no fused step can run here."""
    linears = [f for layer in layers for f in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    if not all(isinstance(f, _SmallRowsOr) for f in linears):
        return None
    fp32 = linears[0].fp32
    if _fused_kernel(fp32) is None:
        return None
    return fp32, {
        "norm_in": [layer.norm_in.weight.detach() for layer in layers],
        "qkv": [layer.qkv.packed for layer in layers],
        "o": [layer.o.packed for layer in layers],
        "norm_post": [layer.norm_post.weight.detach() for layer in layers],
        "gate_up": [layer.gate_up.packed for layer in layers],
        "down": [layer.down.packed for layer in layers],
    }


def _fused_kernel(fp32: bool):
    """`decode_layers_fp32` or `decode_layers` (bf16), or None where it cannot run here."""
    return decode_layers_fp32() if fp32 else decode_layers()


class DecodeStep:
    """`step(tokens, positions, mask, cache, column, shared_kv)`: the next-token logits (rows, 1, vocab) of one token
    per row, its keys and values written into `cache` (a `BatchCache`) at `column` (a one-element index tensor), as
    `model(input_ids=tokens[:, None], ...)` would with the cache holding `column` positions. Nothing in a step asks
    the host for a value, so a GPU can capture it as a graph (`sead.models.decode_loop`)."""

    _shared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its step, for `for_model`

    def __init__(self, model, pack_dtypes=PACKED_DTYPES):
        self._model = weakref.ref(model)  # a strong one would keep the model alive through `_shared`
        self.pack_dtypes = pack_dtypes
        cfg = model.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self._built: tuple | None = None  # ((weights version, dtype, device), layers, lm head, fused weights)

    @classmethod
    def for_model(cls, model) -> DecodeStep | None:
        """The step of `model` (one set of weights however many policies sample from it), or None where the
        model is not one this step reproduces."""
        if model not in cls._shared:
            if not supported(model):
                return None
            cls._shared[model] = cls(model)
        return cls._shared[model]

    @property
    def model(self):
        return self._model()

    def _parts(self):
        """The concatenated (and packed) weights, made again whenever the model's weights change."""
        model = self.model
        key = (weights_version(model), next(model.parameters()).dtype, next(model.parameters()).device)
        if self._built is None or self._built[0] != key:
            packed = packing_available(model, self.pack_dtypes)
            layers = [_Layer(layer, packed) for layer in model.model.layers]
            fused = _fused_step(layers) if self.head_dim in (64, 128) else None
            self._built = (key, layers, _linear(model.lm_head.weight.detach(), packed), fused)
        return self._built[1:]

    def usable(self) -> bool:
        """Autocast would change the dtypes the step computes in, and a model switched to another attention since
        computes otherwise; the caller then keeps the model's forward."""
        device = next(self.model.parameters()).device.type
        if torch.is_grad_enabled() or torch.is_autocast_enabled(device):
            return False
        return self.model.config._attn_implementation == ATTENTION

    def ready(self):
        """The step for one sampling call: the weights' concatenations checked against the model here, once, not at
        every step (nothing changes the weights during a call)."""
        layers, lm_head, fused = self._parts()
        return partial(self._step, layers, lm_head, fused)

    def __call__(self, tokens, positions, mask, cache, column, shared_kv=None) -> torch.Tensor:
        return self.ready()(tokens, positions, mask, cache, column, shared_kv)

    def _step(self, layers, lm_head, fused, tokens, positions, mask, cache, column, shared_kv=None) -> torch.Tensor:
        inner = self.model.model
        rows, nh, nkv, d = tokens.shape[0], self.heads, self.kv_heads, self.head_dim
        x = F.embedding(tokens[:, None], inner.embed_tokens.weight)
        cos, sin = self._rotary(positions, x.dtype)
        fits = fused is not None and USE_FUSED and rows <= FUSED_ROWS and mask is not None and mask.dtype == torch.bool
        if fits and (kernel := _fused_kernel(fused[0])) is not None:  # None: the kernels were turned off since
            fp32, weights = fused
            keys, values = [c.keys for c in cache.layers], [c.values for c in cache.layers]
            prefix = shared_kv or []
            args = [
                x.view(rows, -1), cos.view(rows, d), sin.view(rows, d), *weights.values(), keys, values,
                [p[0] for p in prefix], [p[1] for p in prefix], mask.reshape(rows, -1).contiguous(),
                int(column), nh, nkv, layers[0].inner, layers[0].norm_in.variance_epsilon, layers[0].attn.scaling,
            ]  # fmt: skip
            if not fp32:  # the fp32 step attends the prefix in pieces over the threads, at any rows
                args.append(PREFIX_MATMUL_ROWS)
            x = kernel(*args)[:, None]
            return lm_head(_rms_norm(x, inner.norm))
        for i, layer in enumerate(layers):
            qkv = layer.qkv(_rms_norm(x, layer.norm_in))
            qk = qkv[..., : (nh + nkv) * d].view(rows, 1, nh + nkv, d).transpose(1, 2)
            # queries and keys turned together; transformers' rotate_half(x) * sin is cat(-x2, x1) * sin, which is
            # roll(x) * cat(-sin1, sin2) to the bit (a sign flip is exact): one roll for a slice, a negation and a cat
            qk = (qk * cos) + (torch.roll(qk, d // 2, -1) * sin)
            v = qkv[..., (nh + nkv) * d :].view(rows, 1, nkv, d).transpose(1, 2)
            keys, values = cache.layers[i].write_at(column, qk[:, nh:], v)
            out = gqa_attention(
                layer.attn, qk[:, :nh].contiguous(), keys, values, mask, scaling=layer.attn.scaling, shared_kv=shared_kv
            )[0]
            x = x + layer.o(out.reshape(rows, 1, -1))
            gate_up = layer.gate_up(_rms_norm(x, layer.norm_post))
            x = x + layer.down(F.silu(gate_up[..., : layer.inner]) * gate_up[..., layer.inner :])
        return lm_head(_rms_norm(x, inner.norm))

    def _rotary(self, positions: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """transformers' LlamaRotaryEmbedding for one position per row, (rows, 1, 1, head_dim) to broadcast over
        heads: cos, and sin with its first half negated."""
        rotary = self.model.model.rotary_emb
        inv = rotary.inv_freq[None, :, None].float().expand(positions.shape[0], -1, 1)
        freqs = (inv @ positions[:, None, None].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = (emb.cos() * rotary.attention_scaling).to(dtype), (emb.sin() * rotary.attention_scaling).to(dtype)
        half = sin.shape[-1] // 2
        signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)  # for the rolled form above
        return cos[:, None], signed[:, None]
