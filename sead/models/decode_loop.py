"""The decoding steps of one sampling call, over tensors that stay put; on a GPU, replayed as one CUDA graph.

A decoding step of a small model on a GPU is some hundreds of kernel launches issued from Python (30 layers of
norms, projections, rotary turns, attention and the MLP), and the GPU waits for them: 31 ms a step was measured
at one row on an H200 whose weights read in 0.1 ms (2026-11-24). Captured once as a CUDA graph,
a step is one launch. A graph replays fixed addresses, so everything a step reads lives in tensors this loop owns
and updates in place: the rows' next tokens, their positions, the attention mask over the call's KV buffer, and the
column the step writes its keys and values at (`_BatchLayer.write_at`). The graph is captured at a call's first
step (the call's shapes: rows, KV capacity, shared prefix) and dropped with the loop; the weights cannot change
during a call. On a CPU, and with `use_graph=False`, the same steps run eagerly: the same operations on the same
tensors, so the tokens do not depend on the choice (tested on a GPU: tests/test_decode_loop.py).
"""

from __future__ import annotations

import torch


class DecodeLoop:
    """`loop(next_tokens)` -> logits (rows, 1, vocab) of the step after them. `step` is `DecodeStep.ready()`;
    `attn` (rows, capacity) the call's mask over the rows' own KV positions (updated here in place), `positions`
    the position ids of the rows' last tokens, `column` the KV column the first decoded token goes to."""

    def __init__(
        self, step, cache, attn: torch.Tensor, positions: torch.Tensor, column: int, shared_kv, use_graph: bool
    ):
        self.step, self.cache, self.shared_kv = step, cache, shared_kv
        device = attn.device
        self.attn, self.mask = attn, attn[:, None, None, :]
        self.positions = positions.clone()
        self.tokens = torch.zeros_like(self.positions)
        self.column = torch.tensor([column], device=device)
        self.use_graph = use_graph and device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None

    def __call__(self, next_tokens: torch.Tensor) -> torch.Tensor:
        self.tokens.copy_(next_tokens)
        self.attn.index_fill_(1, self.column, True)
        self.positions.add_(1)
        if self.use_graph:
            if self.graph is None:
                self.graph = self._capture()
            self.graph.replay()
        else:
            self.logits = self._run()
        self.column.add_(1)
        return self.logits

    def _run(self) -> torch.Tensor:
        return self.step(self.tokens, self.positions, self.mask, self.cache, self.column, self.shared_kv)

    def _capture(self) -> torch.cuda.CUDAGraph:
        """One eager step on a side stream first (cuBLAS and the allocator set themselves up outside the capture;
        it writes the same keys and values at the same column as the replay after it), then the capture."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: the sampling thread's own capture is not broken by another thread's CUDA calls
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self.logits = self._run()
        return graph
