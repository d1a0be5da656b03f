"""One self-contained HTML page per evaluation (and per training run): summary tables, plots embedded as PNG
data URIs, and a dialogue viewer. Jinja2 escapes every table cell; dialogue text travels as JSON inside a
<script type="application/json"> block with `<` escaped, and the viewer inserts it with textContent, so a
dialogue that contains markup or `<script>` is shown as text and never run."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape

from sead.dialogue import Episode
from sead.eval.plots import cr_by_value_plot, cr_heatmap, data_uri, funnel_plot, heatmap_pairs, outcome_plot
from sead.metrics import GLOSSARY, most_first
from sead.run.validation_table import interval
from sead.scenario import ProfileSpace
from sead.usersim.base import comparable_environment

SUMMARY_METRICS = ("CR", "ACK", "CAR", "FPR", "SCR", "ATT", "ADT", "UPA", "EI", "TI", "CI")
_env = Environment(loader=PackageLoader("sead.eval", "templates"), autoescape=select_autoescape(["j2", "html"]))


CI_NOTE = (
    "95% CI",
    "where the true value lies with 95% confidence, given these dialogues: Wilson's score interval for the rates of "
    "0/1 outcomes (CR, FPR, SCR), a bootstrap over dialogues for the others",
)


def render_page(
    path: Path,
    *,
    title: str,
    subtitle: Sequence[str] = (),
    headline: Sequence[str] = (),
    glossary: Sequence[tuple[str, str]] = (),
    tables: Sequence[dict] = (),
    images: Sequence[dict] = (),
    dialogues: dict | None = None,
) -> Path:
    """headline: the page's findings in sentences, first; glossary: (term, meaning) of its measures;
    tables: {caption, headers, rows}; images: {title, uri}; dialogues: {dimensions, dialogues} for the viewer."""
    payload = None
    if dialogues is not None:
        # `<` escaped keeps "</script>" in a dialogue from closing the data block; JSON.parse restores it.
        payload = json.dumps(dialogues, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e")
    html = _env.get_template("report.html.j2").render(
        title=title,
        subtitle=list(subtitle),
        headline=list(headline),
        glossary=list(glossary),
        tables=list(tables),
        images=list(images),
        dialogues_json=payload,
    )
    path.write_text(html, encoding="utf-8")
    return path


def viewer_record(ep: Episode) -> dict:
    return {
        "id": ep.meta.get("episode_id", ""),
        "success": ep.success,
        "end_reason": ep.end_reason,
        "state": ep.profile.values,
        "behaviours": list(ep.profile.behaviours),
        "turns": [
            {
                "agent": t.agent.response,
                "agent_text": t.agent.text,
                "stage": t.agent.stage,
                "status": t.agent.status,
                "portrait": t.agent.portrait,
                "feedback": t.feedback,
                "user": t.user.reply if t.user else None,
                "user_state": t.user.state if t.user else None,
                "user_status": t.user.status if t.user else None,
            }
            for t in ep.turns
        ],
    }


def glossary(names: Sequence[str] = tuple(GLOSSARY)) -> list[tuple[str, str]]:
    """What each of `names` means (`sead.metrics.GLOSSARY`), and what the CIs beside them are."""
    return [(n, GLOSSARY[n]) for n in names if n in GLOSSARY] + [CI_NOTE]


def shown_metrics(results: dict) -> list[str]:
    """The summary metrics these results hold, and pass^k where trials were repeated."""
    return [n for n in SUMMARY_METRICS if n in results["metrics"]] + (["pass^k"] if results.get("pass_hat_k") else [])


def headline(name: str, results: dict, stages: Sequence[str] = ()) -> list[str]:
    """An evaluation's findings in a few sentences: how often users completed, how far they got, what stands out."""
    c, m = results["counts"], results["metrics"]
    if not c["evaluated"]:
        return [f"{name}: no dialogue could be scored ({c['sim_error']} ended by a simulator error)."]
    lo, hi = interval(results, "CR")
    simulator = results["settings"]["user_simulator"].get("name", "simulated")
    lines = [
        f"{name} completed {c['completed']} of {c['evaluated']} dialogues with the {simulator} user: "
        f"CR {m['CR']['mean']:.1%} (95% CI {lo:.1%}–{hi:.1%})."
    ]
    ack, car = m.get("ACK", {}), m.get("CAR", {})
    if ack.get("n"):
        of = f" of {len(stages)}" if stages else ""
        lines.append(
            f"Users acknowledged {ack['mean']:.1f}{of} SOP stages on average"
            + (f" and took {car['mean']:.0%} of the concerns they voiced as answered." if car.get("n") else ".")
        )
    lost = (results.get("funnel") or {}).get("lost_to") or {}
    if lost and c["failed"]:
        why, n = next(iter(lost.items()))
        lines.append(f"Failed calls were most often lost to: {why} ({n} of {c['failed']}).")
    flagged = (results.get("hack_monitors") or {}).get("flagged")
    if flagged:
        lines.append(f"Reward-hacking monitors flag: {', '.join(flagged)} (table below).")
    if c["sim_error"]:
        lines.append(f"{c['sim_error']} dialogues ended by a simulator error and are left out of every measure.")
    return lines


def summary_rows(results: dict) -> list[list[str]]:
    rows = []
    for name in SUMMARY_METRICS:
        s = results["metrics"].get(name)
        if s is None:
            continue
        lo, hi = interval(results, name)
        ci = "n/a" if lo is None else f"{lo:.3f} – {hi:.3f}"
        rows.append(
            [
                name,
                "n/a" if s["mean"] is None else f"{s['mean']:.3f}",
                "n/a" if s["std"] is None else f"{s['std']:.3f}",
                ci,
                str(s["n"]),
            ]
        )
    for name, v in results.get("pass_hat_k", {}).items():
        rows.append([name, "n/a" if v is None else f"{v:.3f}", "", "", ""])
    return rows


def _settings_text(d: dict, skip: Sequence[str] = ("name",), longest: int | None = None) -> str:
    """`key value; ...` for a flat view of a settings dict (nested dicts inline, None left out); strings longer
    than `longest` (messages meant for the agent) are left to results.json."""
    parts = []
    for k, v in d.items():
        if k in skip or v is None or v == [] or v == {} or (longest and isinstance(v, str) and len(v) > longest):
            continue
        if isinstance(v, dict):
            v = _settings_text(v, ())
        elif isinstance(v, (list, tuple)):
            v = ", ".join(map(str, v))
        parts.append(f"{k} {v}")
    return "; ".join(parts)


def monitor_rows(monitors: dict) -> list[list[str]]:
    flagged = set(monitors.get("flagged", []))
    rows = [
        [name + (" (flagged)" if name in flagged else ""), "n/a" if v is None else f"{v:.3f}"]
        for name, v in monitors.items()
        if name != "flagged"
    ]
    return rows + [["flagged", ", ".join(sorted(flagged)) or "none"]]


def lost_to_rows(lost_to: dict[str, int], failed: int) -> list[list[str]]:
    """One row per objection (`sead.metrics.lost_to`); a call can be lost to several at once, so the shares may add
    up to more than 1."""
    return [[why, str(n), f"{n / failed:.2f}" if failed else "n/a"] for why, n in lost_to.items()]


def answered_cell(counts: dict[str, int] | None) -> str:
    """One kind of concern's `answered / voiced (share)` (`sead.metrics.concerns_by_kind`); "–" where never voiced."""
    if not counts or not counts["voiced"]:
        return "–"
    return f"{counts['answered']} / {counts['voiced']} ({counts['answered'] / counts['voiced']:.0%})"


def concern_table(columns: dict[str, dict[str, dict[str, int]]], caption: str) -> dict | None:
    """One row per kind of concern voiced anywhere (most voiced over all columns first), one column per model or
    arm: where an agent answers the user and where it loses them. None where no column holds a concern."""
    voiced = Counter()
    for kinds in columns.values():
        voiced.update({k: c["voiced"] for k, c in kinds.items()})
    if not voiced:
        return None
    return {
        "caption": caption,
        "headers": ["concern", *columns],
        "rows": [[k, *(answered_cell(kinds.get(k)) for kinds in columns.values())] for k in most_first(voiced)],
    }


def setup_rows(results: dict) -> list[list[str]]:
    """What a reader needs to know first: who played whom, on which profiles, with which decoding.
    The full settings stay machine-readable in results.json."""
    s, c, agent = results["settings"], results["counts"], results["settings"]["agent"]
    ts, user = s["testset"], comparable_environment(s["user_simulator"])  # the rules file by name, not its path
    params = results.get("agent_params")
    model = agent.get("model") or agent.get("rules") or agent.get("path") or ""
    return [
        [
            "agent",
            f"{s['agent_spec']}"
            + (f" ({params / 1e6:.0f}M parameters)" if params else "")
            + (f"; {model}" if model and str(model) not in s["agent_spec"] else ""),
        ],
        ["decoding", _settings_text(agent.get("sampling") or {}) or "scripted (no sampling)"],
        [
            "user simulator",
            f"{user.get('name')}: " + (_settings_text(user, ("name", "dynamics")) or "default settings"),
        ],
        [
            "test set",
            f"{ts['evaluated']} of {ts['size']} profiles x {s['trials']} trial(s), hash {ts['hash']}, seed {s['seed']}",
        ],
        ["dialogue limits", _settings_text(s.get("dialogue") or {}, longest=40)],
        [
            "dialogues",
            f"{c['dialogues']}: {c['completed']} completed, {c['failed']} failed, "
            f"{c['sim_error']} simulator errors (excluded)",
        ],
        ["tokens, cost", f"{_settings_text(results['tokens'], ())}; cost {results['cost']['total']:.4f}"],
    ]


def write_eval_report(
    out: Path,
    name: str,
    results: dict,
    episodes: Sequence[Episode],
    space: ProfileSpace,
    stages: Sequence[str] = (),
) -> Path:
    """`stages`: the SOP's stage names, to label the funnel."""
    plots = out / "plots"
    images = [
        {"title": f"CR over {a} x {b}", "uri": data_uri(cr_heatmap(episodes, space, (a, b), plots / f"cr_{a}_{b}.png"))}
        for a, b in heatmap_pairs(space)
    ]
    images.append(
        {
            "title": "CR per state value",
            "uri": data_uri(cr_by_value_plot(results["cr_by_state"], plots / "cr_by_value.png")),
        }
    )
    images.append(
        {"title": "end reasons", "uri": data_uri(outcome_plot(results["end_reasons"], plots / "end_reasons.png"))}
    )
    if results.get("funnel"):  # simulators that report the stages the user acknowledged
        images.append(
            {"title": "SOP funnel", "uri": data_uri(funnel_plot(results["funnel"], plots / "funnel.png", stages))}
        )
    tables = [{"caption": "Setup", "headers": [], "rows": setup_rows(results)}]
    tables.append(
        {"caption": "Metrics", "headers": ["metric", "mean", "std", "95% CI", "n"], "rows": summary_rows(results)}
    )
    if (results.get("funnel") or {}).get("lost_to"):
        tables.append(
            {
                "caption": "What failed calls were lost to: what the user objected to in its last turn",
                "headers": ["objection", "calls", "share of failed"],
                "rows": lost_to_rows(results["funnel"]["lost_to"], results["counts"]["failed"]),
            }
        )
    concerns = concern_table(
        {"answered / voiced": (results.get("funnel") or {}).get("concerns") or {}},
        "Concerns by kind: how often the user voiced each and then took it as answered",
    )
    if concerns:
        tables.append(concerns)
    if results.get("hack_monitors"):
        tables.append(
            {
                "caption": "Reward-hacking monitors (sead.hack_monitor.HackMonitor)",
                "headers": ["monitor", "value"],
                "rows": monitor_rows(results["hack_monitors"]),
            }
        )
    return render_page(
        out / "report.html",
        title=f"SEAD evaluation: {name}",
        headline=headline(name, results, stages),
        glossary=glossary(shown_metrics(results)),
        tables=tables,
        images=images,
        dialogues={"dimensions": list(space.sampled_names), "dialogues": [viewer_record(e) for e in episodes]},
    )
