"""Where training numbers go: JSONL (for machines), TensorBoard, optionally wandb (offline by default)."""

from __future__ import annotations

import json
import os
from pathlib import Path


class MetricsLogger:
    def __init__(self, run_dir: Path, *, tensorboard: bool = True, wandb: bool = False, wandb_mode: str = "offline",
                 project: str = "sead", config: dict | None = None, resume_step: int | None = None):
        self.path = run_dir / "metrics.jsonl"
        if resume_step is not None and self.path.exists():
            # Steps after the checkpoint are replayed: drop their old lines instead of duplicating them.
            kept = [l for l in self.path.read_text(encoding="utf-8").splitlines()
                    if l.strip() and json.loads(l).get("step", 0) <= resume_step]
            self.path.write_text("".join(l + "\n" for l in kept), encoding="utf-8")
        self._fh = open(self.path, "a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tensorboard"))
        self._wandb = None
        if wandb:
            try:
                import wandb as wb
            except ImportError:
                raise RuntimeError("logging.wandb=true needs `pip install wandb` in .venv") from None
            os.environ.setdefault("WANDB_MODE", wandb_mode)
            self._wandb = wb.init(project=project, dir=str(run_dir), config=config or {})

    def log(self, step: int, values: dict) -> None:
        flat = {k: v for k, v in _flatten(values).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self._fh.write(json.dumps({"step": step, **values}) + "\n")
        self._fh.flush()
        if self._tb:
            for k, v in flat.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb:
            self._wandb.log(flat, step=step)

    def close(self) -> None:
        self._fh.close()
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
