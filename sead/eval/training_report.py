"""`sead report RUN_DIR`: a training run in the same kind of page as an evaluation. It opens with what the run did
(its steps, or plainly that it made none) and what moved (warm-up and RL apart); then every validation point (the
base model, after the warm-up, each iteration) with CR, ACK and CAR and their 95% CIs; the per-step curves (reward,
CR, ACK, CAR, KL, entropy, UPA); the controller's sampling shares; the last validation's dialogues."""

from __future__ import annotations

from pathlib import Path

import yaml

from sead.dialogue import Episode, read_rollouts
from sead.errors import SEADInputError
from sead.eval.plots import data_uri, line_plot, validation_plot
from sead.eval.report import glossary, render_page, viewer_record
from sead.run.json_lines import read_json_lines
from sead.run.layout import BASE_MODEL, RunLayout
from sead.run.validation_table import changes, interval, shown_user_side, validations, with_ci

STEP_CURVES = (
    ("reward", "reward"),
    ("CR", "training CR"),
    ("ACK", "training ACK (stages acknowledged)"),
    ("CAR", "training CAR (concerns answered)"),
    ("kl", "KL to the reference"),
    ("entropy", "entropy"),
    ("UPA", "user-portrait accuracy"),
    ("imitation_nll", "imitation anchor NLL"),  # trainer.update.imitation_coef
)


def _read_metrics(layout: RunLayout) -> list[dict]:
    if not layout.metrics.exists():
        raise SEADInputError(f"not a run directory (no {layout.metrics.name})", path=layout.path)
    return read_json_lines(layout.metrics)  # a line torn by a kill (the run may still be going): skipped, warned


def _series(rows: list[dict], key: str) -> tuple[list, list]:
    pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return [p[0] for p in pts], [p[1] for p in pts]


def _warmed_up(layout: RunLayout) -> bool:
    """Whether the run imitated before RL: then iteration 0's validation is the warmed model's."""
    if layout.warmup.summary.exists() or not layout.config.exists():
        return layout.warmup.summary.exists()
    warmup = ((yaml.safe_load(layout.config.read_text(encoding="utf-8")) or {}).get("trainer") or {}).get("warmup")
    return bool(warmup and (warmup.get("dialogues") or warmup.get("reuse")))


def point_label(point: int | str, warmed: bool) -> str:
    if point == BASE_MODEL:
        return "base model"
    if point == 0:
        return "after warm-up" if warmed else "before RL"
    return f"iteration {point}"


def headline(steps: list[dict], results: dict, layout: RunLayout, warmed: bool) -> list[str]:
    """What the run did and what moved, in sentences."""
    skipped = sum(bool(r.get("skipped")) for r in steps)
    if not steps:
        lines = [
            "This run made no training step: every validation point measures the model it started from"
            + (" and its warm-up." if warmed else ".")
            + " (trainer.iterations=0 measures a model; otherwise the run stopped before its first step.)"
        ]
    elif skipped == len(steps):
        lines = [
            f"No training step changed the weights: all {len(steps)} steps skipped their update, as no group of "
            "rollouts had rewards that differed (nothing for GRPO to learn from)."
        ]
    else:
        lines = [
            f"{len(steps)} training steps"
            + (f", {skipped} of them skipped (no group with differing rewards)." if skipped else ".")
        ]
    lines += [line[0].upper() + line[1:] + "." for line in changes(layout)]
    if results:
        last = list(results)[-1]
        m = results[last]
        measures = ", ".join(f"{n} {with_ci(m, n)}" for n in ("CR", *shown_user_side(results)))
        lines.append(
            f"Last validation ({point_label(last, warmed)}, {m['counts']['evaluated']} dialogues): {measures}."
        )
    return lines


def _validation_parts(results: dict, warmed: bool, plots: Path) -> tuple[dict, list[dict]]:
    """The table of every validation point and the figure of CR, ACK and CAR over them."""
    shown = ["CR", *shown_user_side(results)]
    rows = []
    for point, m in results.items():
        rows.append(
            [
                point_label(point, warmed),
                "" if point == BASE_MODEL else str(m["at"]["step"]),
                *(with_ci(m, n) for n in shown),
                _f(m["metrics"]["UPA"]["mean"]),
                _f(m["metrics"]["ADT"]["mean"]),
                str(m["counts"]["evaluated"]),
            ]
        )
    table = {
        "caption": "Validation at every point: greedy decoding, the same profiles each time; mean (95% CI)",
        "headers": ["point", "RL steps", *shown, "UPA", "turns", "n"],
        "rows": rows,
    }
    if not results:
        return table, []
    series = {
        n: [
            (m["metrics"][n]["mean"], *interval(m, n)) if m["metrics"].get(n, {}).get("n") else None
            for m in results.values()
        ]
        for n in shown
    }
    labels = [point_label(p, warmed) for p in results]
    figure = validation_plot(labels, series, plots / "validation.png")
    return table, [{"title": "validation CR, ACK and CAR (95% CI)", "uri": data_uri(figure)}]


def write_training_report(run_dir: Path) -> Path:
    run_dir = run_dir.resolve()
    layout = RunLayout(run_dir)
    steps = [r for r in _read_metrics(layout) if "validation" not in r]
    results, warmed = validations(layout), _warmed_up(layout)
    plots = run_dir / "report_plots"
    table, images = _validation_parts(results, warmed, plots)
    for key, title in STEP_CURVES:
        x, y = _series(steps, key)
        if x:
            uri = data_uri(line_plot({key: (x, y)}, plots / f"{key}.png", title=title, xlabel="step"))
            images.append({"title": title, "uri": uri})
    images += _controller_plots(steps, plots)
    dialogues = None
    if results:
        last = layout.validation_dialogues(list(results)[-1])
        if last.exists():
            eps = [Episode.from_dict(r) for r in read_rollouts(last)]
            dims = list(eps[0].profile.values) if eps else []
            dialogues = {"dimensions": dims, "dialogues": [viewer_record(e) for e in eps]}
    return render_page(
        run_dir / "report.html",
        title=f"SEAD training run: {run_dir.name}",
        subtitle=[f"run {run_dir}", f"{len(steps)} training steps logged"],
        headline=headline(steps, results, layout, warmed),
        glossary=glossary(("CR", "ACK", "CAR", "UPA")),
        tables=[table],
        images=images,
        dialogues=dialogues,
    )


def _controller_plots(rows: list[dict], plots: Path) -> list[dict]:
    """Sampling share of each value of each dimension over the steps: where the curriculum moved."""
    marg = [(r["step"], r["controller_marginals"]) for r in rows if r.get("controller_marginals")]
    if not marg:
        return []
    out = []
    for dim in marg[0][1]:
        values = sorted(marg[0][1][dim], key=int)
        series = {f"{dim}={v}": ([s for s, _ in marg], [m[dim].get(v, 0.0) for _, m in marg]) for v in values}
        out.append(
            {
                "title": f"controller: {dim} sampling shares",
                "uri": data_uri(
                    line_plot(
                        series, plots / f"controller_{dim}.png", title=f"controller weights: {dim}", xlabel="step"
                    )
                ),
            }
        )
    return out


def _f(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"
