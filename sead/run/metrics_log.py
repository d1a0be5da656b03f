"""Where both backends' training numbers go: metrics.jsonl (for machines), TensorBoard, optionally wandb (offline by
default)."""

from __future__ import annotations

import os

from sead.run.atomic import write_text_atomic
from sead.run.json_lines import JsonLinesAppender, json_line, read_json_lines
from sead.run.layout import RunLayout


class MetricsLogger:
    def __init__(
        self,
        layout: RunLayout,
        *,
        tensorboard: bool = True,
        wandb: bool = False,
        wandb_mode: str = "offline",
        project: str = "sead",
        config: dict | None = None,
        resume_step: int | None = None,
    ):
        self.path = layout.metrics
        if resume_step is not None and self.path.exists():
            # Steps after the checkpoint are replayed: drop their old lines instead of duplicating them (and a
            # line torn by a kill with them).
            kept = [r for r in read_json_lines(self.path) if r.get("step", 0) <= resume_step]
            write_text_atomic(self.path, "".join(map(json_line, kept)))
        self._lines = JsonLinesAppender(self.path)
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(layout.tensorboard))
        self._wandb = None
        if wandb:
            try:
                import wandb as wb
            except ImportError:
                raise RuntimeError("logging.wandb=true needs `pip install wandb` in .venv") from None
            os.environ.setdefault("WANDB_MODE", wandb_mode)
            self._wandb = wb.init(project=project, dir=str(layout.path), config=config or {})

    def log(self, step: int, values: dict) -> None:
        flat = {k: v for k, v in _flatten(values).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self._lines.write({"step": step, **values})
        if self._tb:
            for k, v in flat.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb:
            self._wandb.log(flat, step=step)

    def close(self) -> None:
        self._lines.close()
        if self._tb:
            self._tb.close()
        if self._wandb:
            self._wandb.finish()


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "/"))
        else:
            out[key] = v
    return out


def training_made(layout: RunLayout) -> tuple[int, int]:
    """(RL steps logged, optimiser steps they made) in a run's metrics.jsonl: a step whose groups all scored alike
    is logged but changes no weight."""
    steps = [r for r in read_json_lines(layout.metrics) if "time" in r] if layout.metrics.exists() else []
    return len(steps), sum(int(r.get("optimiser_steps", 0)) for r in steps)
