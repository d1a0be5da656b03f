"""`sead report RUN_DIR`: a training run's curves (reward, CR, KL, entropy, UPA, validation CR with its CI,
controller marginals) in the same kind of page as an evaluation, with the last validation's dialogues."""

from __future__ import annotations

from pathlib import Path

from sead.dialogue import Episode, read_rollouts
from sead.errors import SEADInputError, parse_json
from sead.eval.plots import data_uri, line_plot
from sead.eval.report import render_page, viewer_record
from sead.run.json_lines import read_json_lines
from sead.run.layout import RunLayout

STEP_CURVES = (
    ("reward", "reward"),
    ("CR", "training CR"),
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


def write_training_report(run_dir: Path) -> Path:
    run_dir = run_dir.resolve()
    layout = RunLayout(run_dir)
    rows = [r for r in _read_metrics(layout) if "validation" not in r]
    plots, images = run_dir / "report_plots", []
    for key, title in STEP_CURVES:
        x, y = _series(rows, key)
        if x:
            images.append(
                {
                    "title": title,
                    "uri": data_uri(line_plot({key: (x, y)}, plots / f"{key}.png", title=title, xlabel="step")),
                }
            )
    validations = layout.validated_iterations()
    table_rows, it, cr, lo, hi = [], [], [], [], []
    for i in validations:
        m = parse_json(layout.validation_metrics(i).read_text(encoding="utf-8"))["metrics"]
        c = m["CR"]
        table_rows.append(
            [
                str(i),
                _f(c["mean"]),
                f"{_f(c['ci95'][0])} – {_f(c['ci95'][1])}",
                _f(m["UPA"]["mean"]),
                _f(m["ADT"]["mean"]),
                str(c["n"]),
            ]
        )
        if c["mean"] is not None:
            it.append(i), cr.append(c["mean"]), lo.append(c["ci95"][0]), hi.append(c["ci95"][1])
    if it:
        images.append(
            {
                "title": "validation CR (95% CI)",
                "uri": data_uri(
                    line_plot(
                        {"validation CR": (it, cr)},
                        plots / "validation_cr.png",
                        title="validation CR",
                        xlabel="iteration",
                        bands={"validation CR": (lo, hi)},
                    )
                ),
            }
        )
    images += _controller_plots(rows, plots)
    dialogues = None
    if validations:
        last = layout.validation_dialogues(validations[-1])
        if last.exists():
            eps = [Episode.from_dict(r) for r in read_rollouts(last)]
            dims = list(eps[0].profile.values) if eps else []
            dialogues = {"dimensions": dims, "dialogues": [viewer_record(e) for e in eps]}
    tables = [
        {
            "caption": "Validation per iteration",
            "headers": ["iteration", "CR", "95% CI", "UPA", "turns", "n"],
            "rows": table_rows,
        }
    ]
    subtitle = [f"run {run_dir}", f"{len(rows)} training steps logged"]
    return render_page(
        run_dir / "report.html",
        title=f"SEAD training run: {run_dir.name}",
        subtitle=subtitle,
        tables=tables,
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
