"""Figures of an evaluation: CR heat maps over pairs of state dimensions, CR per state value, outcomes."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path

from sead.dialogue import Episode
from sead.metrics import completion
from sead.plots.heatmaps import draw_state_heatmaps, plt
from sead.scenario import ProfileSpace

# The pairs of the paper's analysis; scenarios without these dimensions get their first pairs instead.
HEATMAP_PAIRS = (("cooperation", "trust"), ("cooperation", "emotion"))


def heatmap_pairs(space: ProfileSpace) -> list[tuple[str, str]]:
    names = space.sampled_names
    pairs = [p for p in HEATMAP_PAIRS if set(p) <= set(names)]
    return pairs or [(names[0], n) for n in names[1:3]]


def cr_heatmap(episodes: Sequence[Episode], space: ProfileSpace, pair: tuple[str, str], path: Path) -> Path:
    """CR over two dimensions, pooled over the others; cells without dialogues stay blank."""
    idx = [space.sampled_names.index(d) for d in pair]
    cells: dict[tuple[int, int], list[float]] = {}
    for e in episodes:
        if not e.sim_error:
            key = e.profile.key()
            cells.setdefault((key[idx[0]], key[idx[1]]), []).append(completion(e))

    def mean(state):
        vals = cells.get(tuple(state))
        return sum(vals) / len(vals) if vals else None

    def count(state):
        return len(cells.get(tuple(state), [])) or None

    most = max((len(v) for v in cells.values()), default=1)
    return draw_state_heatmaps(
        path,
        pair,
        [space[d].allowed for d in pair],
        [("completion rate", mean, (0.0, 1.0)), ("dialogues", count, (0.0, float(most)))],
        title=f"CR over {pair[0]} x {pair[1]}",
    )


def cr_by_value_figure(cr_by_state: dict):
    """Bars with 95% CIs, and each value's CR and count written above it: a CR of 0 is a bar of no height,
    so without the label and the marker a plot of zeros would look empty."""
    dims = cr_by_state["dimensions"]
    fig, axes = plt.subplots(1, len(dims), figsize=(3.4 * len(dims), 3.0), squeeze=False)
    for ax, dim in zip(axes[0], dims):
        stats = cr_by_state["per_value"][dim]
        values = list(stats)
        means = [stats[v]["mean"] or 0.0 for v in values]
        lo = [m - (stats[v]["ci95"][0] if stats[v]["ci95"][0] is not None else m) for v, m in zip(values, means)]
        hi = [(stats[v]["ci95"][1] if stats[v]["ci95"][1] is not None else m) - m for v, m in zip(values, means)]
        ax.bar(values, means, yerr=[lo, hi], capsize=3, color="#4c72b0")
        ax.plot(values, means, "o", color="#1f3a66", markersize=4)
        for v, m, h in zip(values, means, hi):
            ax.annotate(
                f"{m:.2f}\nn={stats[v]['n']}",
                (v, m + h),
                textcoords="offset points",
                xytext=(0, 3),
                ha="center",
                fontsize=7,
            )
        ax.set_ylim(-0.03, 1.25)
        ax.axhline(0, color="#888", linewidth=0.6)
        ax.set_xlabel(dim)
        ax.set_ylabel("CR (95% CI)")
    fig.tight_layout()
    return fig


def cr_by_value_plot(cr_by_state: dict, path: Path) -> Path:
    return _save(cr_by_value_figure(cr_by_state), path)


def outcome_plot(end_reasons: dict[str, int], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 2.6))
    ax.barh(list(end_reasons), list(end_reasons.values()), color="#55a868")
    ax.set_xlabel("dialogues")
    ax.set_title("how dialogues ended")
    fig.tight_layout()
    return _save(fig, path)


def funnel_plot(funnel: dict, path: Path, stages: Sequence[str] = ()) -> Path:
    """The user-side SOP funnel (`sead.metrics.funnel`): dialogues past each stage, and where the failed ones were
    lost, split by whether a concern of the user's was left open. `stages`: the SOP's stage names, for labels."""
    fig, (reached, lost) = plt.subplots(1, 2, figsize=(8, 2.8))
    acked = funnel["acknowledged"]
    reached.bar([str(k + 1) for k in range(len(acked))], acked, color="#4c72b0")
    reached.set_xlabel("stages acknowledged, at least")
    reached.set_ylabel("dialogues")
    reached.set_title(f"how far calls got (of {funnel['dialogues']})")
    due = list(funnel["lost"])
    open_, other = ([funnel["lost"][k][part] for k in due] for part in ("concern_open", "no_concern_open"))
    due = [f"{k}: {stages[int(k)]}" if int(k) < len(stages) else k for k in due]
    lost.barh(due, open_, color="#dd8452", label="a concern left open")
    lost.barh(due, other, left=open_, color="#8c8c8c", label="no concern open")
    lost.set_ylabel("stage due when lost")
    lost.set_xlabel("failed dialogues")
    lost.set_title("where calls were lost")
    if due:
        lost.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def _error_bars(ax, names: list[str], stats: list[dict], scale: float = 1.0) -> None:
    """One bar per model with its 95% CI; a model without the measure gets no bar, and its mean is written above."""
    means = [None if s.get("mean") is None else scale * s["mean"] for s in stats]
    low = [0.0 if m is None or s["ci95"][0] is None else m - scale * s["ci95"][0] for m, s in zip(means, stats)]
    high = [0.0 if m is None or s["ci95"][1] is None else scale * s["ci95"][1] - m for m, s in zip(means, stats)]
    ax.bar(names, [m or 0.0 for m in means], yerr=[low, high], capsize=3, color="#4c72b0")
    for i, (m, h) in enumerate(zip(means, high)):
        label = "n/a" if m is None else f"{m:.1f}" if scale != 1 else f"{m:.2f}"
        ax.annotate(label, (i, (m or 0.0) + h), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7)
    ax.tick_params(axis="x", labelrotation=20, labelsize=7)


def comparison_plot(named_results: Sequence[tuple[str, dict]], path: Path) -> Path:
    """Models side by side: CR (%) and, where the simulator reports them, ACK and CAR (%), each with its 95% CI."""
    names = [name for name, _ in named_results]
    panels = [("CR", "CR % (95% CI)", 100.0)]
    panels += [
        (m, label, scale)
        for m, label, scale in (("ACK", "ACK: stages acknowledged", 1.0), ("CAR", "CAR % (concerns answered)", 100.0))
        if any(r["metrics"].get(m, {}).get("n") for _, r in named_results)
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels) + 0.6 * len(names), 3.0), squeeze=False)
    for ax, (metric, label, scale) in zip(axes[0], panels):
        _error_bars(ax, names, [r["metrics"].get(metric, {}) for _, r in named_results], scale)
        ax.set_title(label, fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def validation_plot(labels: list[str], series: dict[str, list[tuple | None]], path: Path) -> Path:
    """One panel per measure (CR, ACK, CAR), its mean and 95% CI at each validation point (base model, after the
    warm-up, each iteration); a point without the measure is left out."""
    fig, axes = plt.subplots(1, len(series), figsize=(3.6 * len(series), 3.0), squeeze=False)
    for ax, (name, points) in zip(axes[0], series.items()):
        at = [i for i, p in enumerate(points) if p is not None]
        means = [points[i][0] for i in at]
        low = [points[i][0] - points[i][1] for i in at]
        high = [points[i][2] - points[i][0] for i in at]
        ax.errorbar(at, means, yerr=[low, high], marker="o", markersize=4, capsize=3, color="#4c72b0")
        ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=7)
        ax.set_title(f"validation {name} (95% CI)", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def line_plot(
    series: dict[str, tuple[list, list]],
    path: Path,
    *,
    title: str,
    xlabel: str,
    bands: dict[str, tuple[list, list]] | None = None,
) -> Path:
    """One line per named (x, y) series; optional (low, high) bands, e.g. 95% CIs."""
    fig, ax = plt.subplots(figsize=(5.2, 3.0))
    for name, (x, y) in series.items():
        ax.plot(x, y, marker="o", markersize=3, label=name)
        if bands and name in bands:
            ax.fill_between(x, *bands[name], alpha=0.2)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    if len(series) > 1:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def data_uri(path: Path) -> str:
    """A PNG as a data: URI, so the report is one self-contained file."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")
