"""Where a run's validations stand, as the run ends: one row per point (the base model before a warm-up, then each
iteration), CR and the user-side measures with their 95% CIs, so a run says itself whether it moved the user."""

from __future__ import annotations

import json

from rich.table import Table

from sead.metrics import wilson_interval
from sead.run.layout import BASE_MODEL, RunLayout

USER_SIDE = ("ACK", "CAR")  # sead.metrics: stages the user acknowledged, concerns it took as answered


def interval(m: dict, name: str) -> tuple[float | None, float | None]:
    """95% CI of metric `name` in compute_metrics output `m`: Wilson's for CR (a rate: a bootstrap collapses to a
    point at 0 or n of n), the bootstrap's for the others."""
    c = m["counts"]
    if name == "CR" and c["evaluated"]:
        lo, hi = wilson_interval(c["completed"], c["evaluated"])
        return lo, hi
    lo, hi = m["metrics"][name]["ci95"]
    return lo, hi


def with_ci(m: dict, name: str) -> str:
    """`0.812 (0.650-0.921)`, or `n/a` where the metric applies to no dialogue."""
    mean = m["metrics"][name]["mean"]
    if mean is None:
        return "n/a"
    lo, hi = interval(m, name)
    return f"{mean:.3f} ({lo:.3f}-{hi:.3f})"


def user_side(m: dict) -> list[str]:
    """The user-side measures the simulator reported in `m`."""
    return [name for name in USER_SIDE if m["metrics"][name]["n"]]


def validation_table(layout: RunLayout) -> Table:
    points = [BASE_MODEL] if layout.validation_metrics(BASE_MODEL).exists() else []
    points += layout.validated_iterations()
    results = {p: json.loads(layout.validation_metrics(p).read_text()) for p in points}
    shown = [n for n in USER_SIDE if any(n in user_side(m) for m in results.values())]
    table = Table(title="validation (greedy, the same profiles at every point; 95% CIs)")
    for header in ("point", "step", "CR", *shown, "dialogues"):
        table.add_column(header, justify="left" if header == "point" else "right")
    for p, m in results.items():
        label = "base model (before warm-up)" if p == BASE_MODEL else f"iteration {p}"
        step = "" if p == BASE_MODEL else str(m["at"]["step"])
        table.add_row(label, step, *(with_ci(m, n) for n in ("CR", *shown)), str(m["counts"]["evaluated"]))
    return table
