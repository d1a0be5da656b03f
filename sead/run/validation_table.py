"""Where a run's validations stand, as the run ends: one row per point (the base model before a warm-up, then each
iteration), CR and the user-side measures with their 95% CIs, so a run says itself whether it moved the user."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from sead.errors import SEADInputError, parse_json
from sead.run.layout import BASE_MODEL, RunLayout
from sead.stats import wilson_interval

USER_SIDE = ("ACK", "CAR")  # sead.metrics: stages the user acknowledged, concerns it took as answered


def interval(m: dict, name: str) -> tuple[float | None, float | None]:
    """95% CI of metric `name` in compute_metrics output `m`: Wilson's for CR (a rate: a bootstrap collapses to a
    point at 0 or n of n; recomputed from the counts, as files written before compute_metrics gave it hold the
    bootstrap's), the file's own for the others."""
    c = m["counts"]
    if name == "CR" and c["evaluated"]:
        return tuple(wilson_interval(c["completed"], c["evaluated"]))
    return tuple(m["metrics"][name]["ci95"])


def with_ci(m: dict, name: str, sep: str = " ") -> str:
    """Metric `name` of compute_metrics output `m` as `0.812 (0.65-0.92)`, or `n/a` where it applies to no
    dialogue."""
    mean = _mean(m, name)
    return "n/a" if mean is None else mean_with_ci(mean, interval(m, name), sep=sep)


def mean_with_ci(mean: float | None, ci95, *, sep: str = " ", digits: int = 2) -> str:
    """`0.812 (0.65-0.92)`: a mean and its 95% CI, `n/a` for no mean."""
    if mean is None:
        return "n/a"
    lo, hi = ci95
    return f"{mean:.3f}{sep}({lo:.{digits}f}-{hi:.{digits}f})"


def _mean(m: dict, name: str) -> float | None:
    """None where the metric applies to no dialogue, or the file predates it."""
    return m["metrics"].get(name, {}).get("mean")


def user_side(m: dict) -> list[str]:
    """The user-side measures the simulator reported in `m` (files written before they existed have none)."""
    return [name for name in USER_SIDE if m["metrics"].get(name, {}).get("n")]


def validations(layout: RunLayout) -> dict[int | str, dict]:
    """Every validation on disk, in order: the base model's first, where there is one."""
    points = [BASE_MODEL] if layout.validation_metrics(BASE_MODEL).exists() else []
    points += layout.validated_iterations()
    return {p: read_validation(layout.validation_metrics(p)) for p in points}


def read_validation(path: Path) -> dict:
    """A validation's metrics file; one that does not read as one (cut short, edited) raises naming it."""
    try:
        m = parse_json(path.read_text(encoding="utf-8"))
        int(m["at"]["step"])
        if not (isinstance(m["counts"], dict) and isinstance(m["metrics"], dict)):
            raise TypeError("its counts and metrics are not objects")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise SEADInputError(
            f"not a readable validation result ({type(e).__name__}: {e}); restore it, or delete it (that point then "
            "drops out of the run's validation table)",
            path=path,
        ) from None
    return m


def shown_user_side(results: dict) -> list[str]:
    return [n for n in USER_SIDE if any(n in user_side(m) for m in results.values())]


def changes(layout: RunLayout) -> list[str]:
    """What moved each measure, said apart: the warm-up (imitation: base model -> iteration 0) and RL (iteration
    0 -> the last point), each with whether the two 95% CIs are apart."""
    results = validations(layout)
    iterations = [p for p in results if p != BASE_MODEL]
    phases = []
    if BASE_MODEL in results and iterations:
        phases.append(("warm-up (imitation)", BASE_MODEL, iterations[0]))
    if len(iterations) > 1:
        steps = results[iterations[-1]]["at"]["step"] - results[iterations[0]]["at"]["step"]
        phases.append((f"RL ({steps} step{'' if steps == 1 else 's'})", iterations[0], iterations[-1]))
    lines = []
    for phase, a, b in phases:
        parts = []
        for name in ("CR", *shown_user_side(results)):
            ma, mb = results[a], results[b]
            if _mean(ma, name) is None or _mean(mb, name) is None:
                continue
            (lo_a, hi_a), (lo_b, hi_b) = interval(ma, name), interval(mb, name)
            apart = lo_b > hi_a or lo_a > hi_b
            parts.append(
                f"{name} {_mean(ma, name):.3f} -> {_mean(mb, name):.3f} (CIs {'apart' if apart else 'overlap'})"
            )
        lines.append(f"{phase}: " + ", ".join(parts))
    return lines


def validation_table(layout: RunLayout) -> Table:
    results = validations(layout)
    shown = shown_user_side(results)
    table = Table(
        title="validation: greedy, the same profiles at every point; mean (95% CI)",
        caption="base: the model before its warm-up; iteration 0: before the first RL step"
        if BASE_MODEL in results
        else "iteration 0: before the first RL step",
    )
    for header in ("point", "RL steps", "CR", *shown, "dialogues"):
        table.add_column(header, justify="left" if header == "point" else "right")
    for p, m in results.items():
        label = "base" if p == BASE_MODEL else f"iteration {p}"
        step = "" if p == BASE_MODEL else str(m["at"]["step"])
        cells = (with_ci(m, n, sep="\n") for n in ("CR", *shown))
        table.add_row(label, step, *cells, str(m["counts"]["evaluated"]))
    return table


def validated_at(layout: RunLayout, iteration: int, step: int) -> bool:
    """Whether validation after `iteration` was measured at `step` (a replayed step is measured again)."""
    path = layout.validation_metrics(iteration)
    return path.exists() and read_validation(path)["at"]["step"] == step
