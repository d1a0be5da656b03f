"""Keys and values of each dialogue kept between its turns, so a turn only runs the tokens added since the last.

A dialogue's context grows turn by turn and the runner never re-tokenises it: the prompt of turn t+1 starts
with the prompt of turn t and the tokens sampled for it. Without this cache every turn runs the whole history
through the model again (most of generation's cost on CPU); with it, only the user's new message does.

Entries are keyed by the token ids they cover and hold the keys/values of the positions after the shared SOP
prefix (the prefix has one copy, in the policy). A lookup takes the longest entry that is a prefix of the new
prompt. Entries are dropped least-recently-used beyond a memory budget, and all of them when the weights change,
so a miss only costs the recomputation.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import partial

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys and values, (1, heads, positions, head dim)


@dataclass
class CachedTurn:
    ids: tuple[int, ...]  # every token the entry covers, prefix included
    prefix: tuple[int, ...]  # the shared prefix its keys/values follow
    kv: KV  # positions len(prefix) .. len(ids)

    @property
    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.kv)


class TurnCache:
    def __init__(self, budget_mb: float):
        self.budget = int(budget_mb * 2**20)
        self._entries: OrderedDict[tuple[int, ...], CachedTurn] = OrderedDict()
        self._bytes = 0
        self._version = None
        self.hits = self.misses = self.reused_tokens = 0

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    def for_weights(self, version) -> None:
        """Forget everything computed with other weights."""
        if version != self._version:
            self.clear()
            self._version = version

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def lookup(self, prompt: tuple[int, ...], prefix: tuple[int, ...]) -> CachedTurn | None:
        """The longest entry after `prefix` whose ids start `prompt`, leaving the prompt at least one new token."""
        best = None
        for key, entry in self._entries.items():
            if (
                len(prefix) < len(key) < len(prompt)
                and (best is None or len(key) > len(best.ids))
                and entry.prefix == prefix
                and prompt[: len(key)] == key
            ):
                best = entry
        if best is None:
            self.misses += 1
        else:
            self._entries.move_to_end(best.ids)
            self.hits += 1
            self.reused_tokens += len(best.ids) - len(prefix)
        return best

    def store(self, entry: CachedTurn, replaces: tuple[int, ...] | None = None) -> None:
        """Keep `entry`; `replaces`: the entry it extends (its dialogue has moved on, so it is dropped)."""
        if not self.enabled:
            return
        for key in (replaces, entry.ids):
            old = self._entries.pop(key, None) if key is not None else None
            if old is not None:
                self._bytes -= old.nbytes
        self._entries[entry.ids] = entry
        self._bytes += entry.nbytes
        while self._bytes > self.budget and self._entries:
            _, old = self._entries.popitem(last=False)
            self._bytes -= old.nbytes

    def __len__(self) -> int:
        return len(self._entries)


class _BatchLayer(DynamicLayer):
    """A cache layer of fixed capacity, allocated (zeroed) at the first write: new positions are written in
    place, so decoding a token copies nothing (transformers' DynamicLayer concatenates, copying the whole cache
    every step), and attention always gets the whole buffer, contiguous. A view of the written part would not
    be: the CPU's bf16 batched matmul copies such a view whole on every call. Positions not written yet are
    zeros and must be masked out by the caller, who passes a 4-D mask of `capacity` keys."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity

    def update(self, key_states, value_states, *args, **kwargs):
        first = not self.is_initialized
        if first:
            self.lazy_initialization(key_states, value_states)
            shape = (*key_states.shape[:2], self.capacity)
            self.keys = key_states.new_empty((*shape, key_states.shape[-1]))
            self.values = value_states.new_empty((*shape, value_states.shape[-1]))
            self._len = 0
        end = self._len + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache capacity {self.capacity} exceeded ({end} positions)")
        self.keys[..., self._len : end, :] = key_states
        self.values[..., self._len : end, :] = value_states
        if first:  # masked, but must be finite: a masked key's weight is 0, and 0 x NaN would still be NaN
            self.keys[..., end:, :] = 0
            self.values[..., end:, :] = 0
        self._len = end
        return self.keys, self.values

    def write_at(self, column: torch.Tensor, key_states, value_states):
        """One new position per row written at `column` (a one-element index tensor on the cache's device) rather
        than after the positions written so far: a CUDA graph replays its write wherever `column` points then. The
        caller keeps count of the positions it writes this way (`get_seq_length` does not see them)."""
        self.keys.index_copy_(2, column, key_states)
        self.values.index_copy_(2, column, value_states)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._len if self.is_initialized else 0

    def get_mask_sizes(self, query_length: int, *args) -> tuple[int, int]:
        return self.capacity, 0


class BatchCache(DynamicCache):
    """A DynamicCache of `_BatchLayer`s holding `capacity` positions: the batch's cached context plus every
    token it will run. The model must be given a 4-D mask over all `capacity` keys."""

    def __init__(self, capacity: int):
        super().__init__()
        self.layer_class_to_replicate = partial(_BatchLayer, capacity=capacity)
