"""The comparison table of several evaluated models, in the layout of the original paper's main table
(Method, Params, CR %, ATT, UPA, EI, TI, CI, Cost), plus the CR's 95% CI, the user-side ACK and CAR (stages the
user acknowledged, concerns it took as answered; scripted user) and the FPR/SCR/ADT columns; a chart of CR, ACK and
CAR with their CIs, and each pair of models' paired test on the same dialogues."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

from sead.eval.plots import comparison_plot, data_uri
from sead.eval.report import concern_table, glossary, render_page
from sead.eval.run import EVAL_ID
from sead.run.paired import held_out_outcomes, paired_comparison

HEADERS = [
    "Method",
    "Params",
    "CR %",
    "CR 95% CI",
    "ACK",
    "CAR %",
    "ATT ↓",
    "UPA",
    "EI",
    "TI",
    "CI",
    "FPR %",
    "SCR %",
    "ADT",
    "Cost",
    "n",
]


def _mean_std(stat: dict, digits: int = 2) -> str:
    if stat.get("mean") is None:
        return "n/a"
    return f"{stat['mean']:.{digits}f}±{stat['std']:.{digits}f}"


def _percent(stat: dict) -> str:
    return "n/a" if stat.get("mean") is None else f"{100 * stat['mean']:.1f}"


def _params(n: int | None) -> str:
    if n is None:
        return "–"
    if n == 0:
        return "0 (scripted)"
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def comparison_rows(named_results: Sequence[tuple[str, dict]]) -> list[list[str]]:
    rows = []
    for name, r in named_results:
        m = r["metrics"]
        lo, hi = m["CR"]["ci95"]
        rows.append(
            [
                name,
                _params(r.get("agent_params")),
                _percent(m["CR"]),
                "n/a" if lo is None else f"{100 * lo:.1f}–{100 * hi:.1f}",
                _mean_std(m.get("ACK", {})),  # results written before these measures existed lack them
                _percent(m.get("CAR", {})),
                _mean_std(m["ATT"], 1),
                _mean_std(m["UPA"], 3),
                _mean_std(m.get("EI", {})),
                _mean_std(m.get("TI", {})),
                _mean_std(m.get("CI", {})),
                _percent(m["FPR"]),
                _percent(m["SCR"]),
                _mean_std(m["ADT"], 1),
                f"{r['cost']['total']:.2f}",
                str(r["counts"]["evaluated"]),
            ]
        )
    return rows


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * len(headers),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


PAIRED_HEADERS = ["A", "B", "paired dialogues", "both", "only A", "only B", "neither", "CR A − B (points)", "p"]


def paired_rows(out_dir: Path, names: Sequence[str]) -> list[list[str]]:
    """Each pair of models on the same test dialogues (same profile, trial and simulator seed): who completed which,
    and the exact McNemar p-value of the difference in CR (`sead.run.paired`)."""
    outcomes = {name: held_out_outcomes(out_dir / name / "dialogues.jsonl", EVAL_ID) for name in names}
    rows = []
    for a, b in itertools.combinations(names, 2):
        try:
            c = paired_comparison(outcomes[a], outcomes[b])
        except ValueError as e:  # evaluated on other dialogues (another test set, seed or limit): no pairs
            rows.append([a, b, f"not paired: {e}", *[""] * (len(PAIRED_HEADERS) - 3)])
            continue
        gain = "n/a" if c["gain_points"] is None else f"{c['gain_points']:+.1f}"
        counts = [str(c[k]) for k in ("pairs", "both", "only_a", "only_b", "neither")]
        rows.append([a, b, *counts, gain, f"{c['p_mcnemar']:.3g}"])
    return rows


def write_comparison(out_dir: Path, named_results: Sequence[tuple[str, dict]]) -> tuple[Path, Path]:
    names = [name for name, _ in named_results]
    tables = [{"caption": "Main table", "headers": HEADERS, "rows": comparison_rows(named_results)}]
    tables.append(
        {
            "caption": "Paired tests: the same test dialogues, model A against model B (exact McNemar test on CR)",
            "headers": PAIRED_HEADERS,
            "rows": paired_rows(out_dir, names),
        }
    )
    concerns = concern_table(
        {name: (r.get("funnel") or {}).get("concerns") or {} for name, r in named_results},
        "Concerns by kind: answered / voiced (scripted user)",
    )
    if concerns:  # results of simulators that report concerns, written since sead.metrics.concerns_by_kind
        tables.append(concerns)
    hashes = sorted({r["settings"]["testset"]["hash"] for _, r in named_results})
    note = (
        f"test set {', '.join(hashes)}; mean±std; CR CI: 95% Wilson; p: two-sided exact McNemar test on the "
        "dialogues one model completed and the other did not; cost per the configured prices"
    )
    md = markdown_table(HEADERS, tables[0]["rows"]) + [f"\n{note}"]
    for t in tables[1:]:
        md += [f"\n{t['caption']}\n", *markdown_table(t["headers"], t["rows"])]
    md_path = out_dir / "comparison.md"
    md_path.write_text("\n".join(md) + "\n", encoding="utf-8")
    chart = comparison_plot(named_results, out_dir / "comparison.png")
    html = render_page(
        out_dir / "comparison.html",
        title="SEAD evaluation: comparison",
        subtitle=[note],
        tables=tables,
        images=[{"title": "CR, ACK and CAR per model, 95% CIs", "uri": data_uri(chart)}],
        glossary=glossary(),
    )
    return md_path, html
