"""The comparison table of several evaluated models, in the layout of the original paper's main table
(Method, Params, CR %, ATT, UPA, EI, TI, CI, Cost), plus the CR's 95% CI, the user-side ACK and CAR (stages the
user acknowledged, concerns it took as answered; scripted user) and the FPR/SCR/ADT columns."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sead.eval.report import concern_table, render_page

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


def write_comparison(out_dir: Path, named_results: Sequence[tuple[str, dict]]) -> tuple[Path, Path]:
    tables = [{"caption": "Main table", "headers": HEADERS, "rows": comparison_rows(named_results)}]
    concerns = concern_table(
        {name: (r.get("funnel") or {}).get("concerns") or {} for name, r in named_results},
        "Concerns by kind: answered / voiced (scripted user)",
    )
    if concerns:  # results of simulators that report concerns, written since sead.metrics.concerns_by_kind
        tables.append(concerns)
    hashes = sorted({r["settings"]["testset"]["hash"] for _, r in named_results})
    note = f"test set {', '.join(hashes)}; mean±std; CR CI: 95% Wilson; cost per the configured prices"
    md = markdown_table(HEADERS, tables[0]["rows"]) + [f"\n{note}"]
    for t in tables[1:]:
        md += [f"\n{t['caption']}\n", *markdown_table(t["headers"], t["rows"])]
    md_path = out_dir / "comparison.md"
    md_path.write_text("\n".join(md) + "\n", encoding="utf-8")
    html = render_page(out_dir / "comparison.html", title="SEAD evaluation: comparison", subtitle=[note], tables=tables)
    return md_path, html
