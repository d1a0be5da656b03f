"""Activation recomputation for training forwards: a decoder layer keeps only its input for the backward pass and
runs again when the backward pass reaches it (torch's non-reentrant checkpoint). The trade is one more forward for
a layer's activations: for a 2,000-token dialogue through SmolLM2-135M, about 2.5 GB of activations become about
0.3 GB of layer inputs and key/value entries.

Hugging Face's own gradient checkpointing drops the key/value cache, which SEAD's scoring needs: the shared prompt
runs once and every row reads its cache. Here a layer that appends to a cache runs again on the cache as it found
that layer's entry, so the rerun appends the same keys and values and builds the graph the first run built."""

from __future__ import annotations

import copy
from contextlib import contextmanager

import torch
from torch.utils.checkpoint import checkpoint
from transformers.modeling_layers import GradientCheckpointingLayer


def decoder_layers(model) -> list[torch.nn.Module]:
    """The model's decoder layers (every Hugging Face decoder layer is a `GradientCheckpointingLayer`)."""
    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def _entry(cache, index: int):
    """The cache's entry for layer `index` as it stands now (a copy: an update rebinds its tensors), or None."""
    layers = getattr(cache, "layers", None)
    return copy.copy(layers[index]) if layers is not None and index < len(layers) else None


def _restore(cache, index: int, found) -> None:
    """Put layer `index`'s cache entry back as the first run found it (a fresh one where there was none)."""
    if cache is None:
        return
    cache.layers[index] = copy.copy(found) if found is not None else cache.layer_class_to_replicate()


def _recomputed(layer: torch.nn.Module, index: int):
    plain = layer.forward

    def forward(hidden_states, *args, **kwargs):
        if not torch.is_grad_enabled():
            return plain(hidden_states, *args, **kwargs)
        cache = kwargs.get("past_key_values")
        found = _entry(cache, index)
        first = [True]

        def run(h):
            if not first[0]:
                _restore(cache, index, found)
            first[0] = False
            return plain(h, *args, **kwargs)

        return checkpoint(run, hidden_states, use_reentrant=False)

    return forward


@contextmanager
def recomputing(model, enabled: bool = True):
    """Within, the model's training forwards keep only each decoder layer's input and recompute the rest in the
    backward pass. The backward pass may run after the block ends: a layer's rerun is bound when its forward runs."""
    layers = decoder_layers(model) if enabled else []
    for i, layer in enumerate(layers):
        layer.forward = _recomputed(layer, _layer_index(layer, i))
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward  # the class's forward again


def _layer_index(layer: torch.nn.Module, position: int) -> int:
    """The cache index the layer's attention writes to (its `layer_idx`), else its position among the layers."""
    return getattr(getattr(layer, "self_attn", None), "layer_idx", position)


@contextmanager
def training_forward(model, autocast, recompute: bool):
    """The context of the trainer's forwards of `model`: its compute precision (`autocast`, a context factory) and,
    where `recompute` (`trainer.recompute_activations`), activation recomputation."""
    with autocast(), recomputing(model, recompute):
        yield
