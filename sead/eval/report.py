"""One self-contained HTML page per evaluation (and per training run): summary tables, plots embedded as PNG
data URIs, and a dialogue viewer. Jinja2 escapes every table cell; dialogue text travels as JSON inside a
<script type="application/json"> block with `<` escaped, and the viewer inserts it with textContent, so a
dialogue that contains markup or `<script>` is shown as text and never run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from jinja2 import Environment, PackageLoader, select_autoescape

from sead.dialogue import Episode
from sead.eval.plots import cr_by_value_plot, cr_heatmap, data_uri, heatmap_pairs, outcome_plot
from sead.scenario import ProfileSpace

SUMMARY_METRICS = ("CR", "FPR", "SCR", "ATT", "ADT", "UPA", "EI", "TI", "CI")
_env = Environment(loader=PackageLoader("sead.eval", "templates"), autoescape=select_autoescape(["j2", "html"]))


def render_page(path: Path, *, title: str, subtitle: Sequence[str] = (), tables: Sequence[dict] = (),
                images: Sequence[dict] = (), dialogues: dict | None = None) -> Path:
    """tables: {caption, headers, rows}; images: {title, uri}; dialogues: {dimensions, dialogues} for the viewer."""
    payload = None
    if dialogues is not None:
        # `<` escaped keeps "</script>" in a dialogue from closing the data block; JSON.parse restores it.
        payload = json.dumps(dialogues, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e")
    html = _env.get_template("report.html.j2").render(title=title, subtitle=list(subtitle), tables=list(tables),
                                                      images=list(images), dialogues_json=payload)
    path.write_text(html, encoding="utf-8")
    return path


def viewer_record(ep: Episode) -> dict:
    return {"id": ep.meta.get("episode_id", ""), "success": ep.success, "end_reason": ep.end_reason,
            "state": ep.profile.values, "behaviours": list(ep.profile.behaviours),
            "turns": [{"agent": t.agent.response, "agent_text": t.agent.text, "stage": t.agent.stage,
                       "status": t.agent.status, "portrait": t.agent.portrait, "feedback": t.feedback,
                       "user": t.user.reply if t.user else None, "user_state": t.user.state if t.user else None,
                       "user_status": t.user.status if t.user else None} for t in ep.turns]}


def summary_rows(results: dict) -> list[list[str]]:
    rows = []
    for name in SUMMARY_METRICS:
        s = results["metrics"].get(name)
        if s is None:
            continue
        lo, hi = s["ci95"]
        ci = "n/a" if lo is None else f"{lo:.3f} – {hi:.3f}"
        rows.append([name, "n/a" if s["mean"] is None else f"{s['mean']:.3f}",
                     "n/a" if s["std"] is None else f"{s['std']:.3f}", ci, str(s["n"])])
    for name, v in results.get("pass_hat_k", {}).items():
        rows.append([name, "n/a" if v is None else f"{v:.3f}", "", "", ""])
    return rows


def write_eval_report(out: Path, name: str, results: dict, episodes: Sequence[Episode], space: ProfileSpace) -> Path:
    plots = out / "plots"
    images = [{"title": f"CR over {a} x {b}", "uri": data_uri(cr_heatmap(episodes, space, (a, b),
                                                                         plots / f"cr_{a}_{b}.png"))}
              for a, b in heatmap_pairs(space)]
    images.append({"title": "CR per state value",
                   "uri": data_uri(cr_by_value_plot(results["cr_by_state"], plots / "cr_by_value.png"))})
    images.append({"title": "end reasons", "uri": data_uri(outcome_plot(results["end_reasons"],
                                                                        plots / "end_reasons.png"))})
    s, c = results["settings"], results["counts"]
    subtitle = [f"agent: {s['agent_spec']}", f"user simulator: {json.dumps(s['user_simulator'])}",
                f"test set {s['testset']['hash']} ({s['testset']['evaluated']} of {s['testset']['size']} profiles "
                f"x {s['trials']} trials), seed {s['seed']}",
                f"{c['dialogues']} dialogues: {c['completed']} completed, {c['failed']} failed, "
                f"{c['sim_error']} simulator errors (excluded)",
                f"tokens {json.dumps(results['tokens'])}; cost {results['cost']['total']:.4f}"]
    tables = [{"caption": "Metrics", "headers": ["metric", "mean", "std", "95% CI", "n"], "rows": summary_rows(results)}]
    return render_page(out / "report.html", title=f"SEAD evaluation: {name}", subtitle=subtitle, tables=tables,
                       images=images, dialogues={"dimensions": list(space.sampled_names),
                                                 "dialogues": [viewer_record(e) for e in episodes]})
