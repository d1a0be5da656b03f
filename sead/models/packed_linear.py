"""Linear layers on CPU with their weights pre-packed for oneDNN, for sampling (no gradients).

`F.linear` hands oneDNN a plain row-major weight, which it re-lays out in its blocked format on every call; for
the few rows of a decoding step that re-layout is a large part of the call. Packing each weight once
(`mkldnn._reorder_linear_weight`, what inductor's CPU freezing does) made SmolLM2's projections 1.1-2x faster at
1-64 rows in bf16 on a 2-vCPU Zen 4, its tied 49k-row output head about 2x, and decoding 1.0-1.3x
(`docs/performance.md`). In bf16 the result is bit-equal to `F.linear`; in fp32 oneDNN accumulates in another
order than MKL's sgemm (outputs differ by a few parts per million), which is why fp32 is opt-in.

`PackedLinears.active()` swaps the forward of every linear layer for the packed one for the length of a `with`
block and restores it after, so training forwards of the same model never see it. Packs are rebuilt when the
weights change (their version counters), e.g. after every update of the rollout copy.
"""

from __future__ import annotations

import contextlib
import weakref
from functools import partial

import torch
from torch import nn

PACKED_DTYPES = (torch.bfloat16,)  # bit-equal to F.linear; torch.float32 is allowed when asked for


def packing_available(model, dtypes=PACKED_DTYPES) -> bool:
    param = next(model.parameters())
    if param.device.type != "cpu" or param.dtype not in dtypes or not torch.backends.mkldnn.is_available():
        return False
    # oneDNN's bf16 kernels need AVX-512 (BW/VL/DQ) at least; elsewhere F.linear is the only path
    return param.dtype != torch.bfloat16 or torch.ops.mkldnn._is_mkldnn_bf16_supported()


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` (out, in) re-laid out once in oneDNN's blocked format, for `packed_forward`."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


def packed_forward(packed: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    """`F.linear(x, weight, bias)` from `pack_weight(weight)`."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class PackedLinears:
    _shared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its packs, for `for_model`

    @classmethod
    def for_model(cls, model) -> PackedLinears:
        """The packs of `model`, one set however many policies sample from it (training and validation do)."""
        if model not in cls._shared:
            cls._shared[model] = cls(model)
        return cls._shared[model]

    def __init__(self, model, dtypes=PACKED_DTYPES):
        self._model = weakref.ref(model)  # a strong one would keep the model alive through `_shared`
        self.dtypes = dtypes
        self._packs: dict[str, tuple[tuple, torch.Tensor]] = {}  # name -> (weight identity, packed weight)

    @property
    def model(self):
        return self._model()

    @property
    def enabled(self) -> bool:
        return packing_available(self.model, self.dtypes)

    def _pack(self, name: str, layer: nn.Linear) -> torch.Tensor:
        w = layer.weight
        key = (w.data_ptr(), w._version, tuple(w.shape), w.dtype)
        held = self._packs.get(name)
        if held is None or held[0] != key:
            held = (key, pack_weight(w))
            self._packs[name] = held
        return held[1]

    @contextlib.contextmanager
    def active(self):
        """Linear layers compute from packed weights inside the block (when the model's dtype and device allow
        it; otherwise nothing changes)."""
        if not self.enabled:
            yield
            return
        swapped = []
        try:
            for name, layer in self.model.named_modules():
                if type(layer) is nn.Linear:  # subclasses (quantised, LoRA) keep their own forward
                    bias = layer.bias.detach() if layer.bias is not None else None
                    layer.forward = partial(packed_forward, self._pack(name, layer), bias)
                    swapped.append(layer)
            yield
        finally:
            for layer in swapped:
                del layer.forward  # the class's forward again
