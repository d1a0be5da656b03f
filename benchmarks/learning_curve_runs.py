"""How reliable RL's gain is: several training runs of the learning-curve recipe, side by side.

One run of `learning_curve.py` measures one training run (one `seed=`). Training runs of the same recipe differ
about as much as the gain itself (seven held-out runs of one recipe, 2026-11-28/29), so a claim about the recipe needs
several. Run the script once per run seed from one saved warm-up, on its held-out set, then read the results:

    .venv/bin/python benchmarks/learning_curve.py --warmup-from outputs/lc/warmup --phases warmup_only grpo_fixed \
        --out outputs/lc_seed1 --results outputs/lc_seed1/learning_curve seed=1
    .venv/bin/python benchmarks/learning_curve_runs.py outputs/lc_seed*/learning_curve.json --out outputs/lc_runs

Refuses results that do not pose one task (held-out set, user simulator, warm-up) or repeat a run seed. Reports,
per run, the claim's comparison (GRPO against warm-up only, exact McNemar) and whether it met the target; over the
runs, the mean gain with a Student-t 95 % interval (runs, not dialogues, are the samples) and how many runs met the
target; and what the curriculum adds where a run measured it. Writes OUT.json and OUT.png.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

console = Console()

# Two-sided 95 % Student-t quantiles by degrees of freedom; past 30 a normal quantile with a first-order correction
# fmt: off
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
# fmt: on


def t975(df: int) -> float:
    if df < 1:
        raise ValueError("a t interval needs at least two runs")
    z = 1.959964
    return _T975[df - 1] if df <= len(_T975) else z + (z**3 + z) / (4 * df)


def read_results(path: Path) -> dict:
    """A results JSON of learning_curve.py that measured the claim (grpo_fixed against warmup_only)."""
    try:
        result = json.loads(path.read_text())
        keys = ("held_out", "arms", "config", "target", "warmup")
        missing = [k for k in keys if k not in result]
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: not readable as a results file of learning_curve.py ({e})") from None
    if missing or not isinstance(result.get("arms"), dict):
        raise SystemExit(f"{path}: not a results file of learning_curve.py (no {', '.join(missing) or 'arms'})")
    if result["target"] is None:
        raise SystemExit(f"{path}: measured no grpo_fixed against warmup_only, the comparison the runs are read by")
    return result


def check_one_task(results: dict[Path, dict]) -> None:
    """The runs must differ only in their run seed: the same held-out dialogues, the same user, the same warm-up."""
    from sead.run.frozen_config import changed_settings, describe_changes, environment_changes

    (first, a), *others = results.items()
    seeds = {first: a["config"]["seed"]}
    for path, b in others:
        for what, key in (("held-out set", "held_out"), ("warm-up", "warmup")):
            if a[key] != b[key]:
                why = describe_changes(changed_settings(a[key] or {}, b[key] or {}))
                raise SystemExit(f"{first} and {path} were measured with different {what}s ({why})")
        users = [r["arms"]["warmup_only"].get("user_simulator") for r in (a, b)]
        if None in users or users[0] != users[1]:
            why = describe_changes(environment_changes(*users)) if None not in users else "one recorded none"
            raise SystemExit(f"{first} and {path} were measured against different user simulators ({why})")
        if (seed := b["config"]["seed"]) in seeds.values():
            twin = next(p for p, s in seeds.items() if s == seed)
            raise SystemExit(f"{twin} and {path} are the same training run (run seed {seed}): one of them twice")
        seeds[path] = seed


def run_row(path: Path, result: dict) -> dict:
    t, arms = result["target"], result["arms"]
    row = {
        "results": str(path),
        "run_seed": result["config"]["seed"],
        "gain_points": t["gain_points"],
        "p_mcnemar": t["p_mcnemar"],
        "rl_minutes": t["rl_minutes"],
        "met": t["met"],
        "CR": {n: arms[n]["CR"] for n in ("warmup_only", "grpo_fixed")},
        "CAR": {n: arms[n]["CAR"]["mean"] for n in ("warmup_only", "grpo_fixed")},
    }
    if c := result.get("curriculum"):
        row["curriculum"] = {"gain_points": c["gain_points"], "p_mcnemar": c["p_mcnemar"]}
    return row


def summarise(rows: list[dict], target: dict) -> dict:
    gains = [r["gain_points"] for r in rows]
    out = {"runs": len(rows), "runs_meeting_target": sum(r["met"] for r in rows), "target": target}
    out["mean_gain_points"], out["min_gain_points"] = statistics.fmean(gains), min(gains)
    if len(gains) > 1:
        sd = statistics.stdev(gains)
        half = t975(len(gains) - 1) * sd / math.sqrt(len(gains))
        out["sd_points"], out["mean_t95"] = sd, [out["mean_gain_points"] - half, out["mean_gain_points"] + half]
    curricula = [r["curriculum"]["gain_points"] for r in rows if "curriculum" in r]
    if curricula:
        out["curriculum_mean_points"] = statistics.fmean(curricula)
    return out


def collect(paths: list[Path]) -> dict:
    results = {p: read_results(p) for p in paths}
    check_one_task(results)
    rows = sorted((run_row(p, r) for p, r in results.items()), key=lambda r: r["run_seed"])
    anchor = next(iter(results.values()))
    target = {k: v for k, v in anchor["target"].items() if k.startswith(("min_", "max_"))}
    cpus = sorted({p.get("cpu") for r in results.values() for p in r.get("phases", {}).values() if p.get("cpu")})
    return {"held_out": anchor["held_out"], "cpus": cpus, "summary": summarise(rows, target), "runs": rows}


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, s = report["runs"], report["summary"]
    fig, ax = plt.subplots(figsize=(1.2 * len(rows) + 3, 4))
    xs = range(len(rows))
    colours = ["tab:green" if r["met"] else "tab:gray" for r in rows]
    ax.bar(xs, [r["gain_points"] for r in rows], width=0.5, color=colours)
    for x, r in zip(xs, rows):
        ax.annotate(f"p={r['p_mcnemar']:.1g}", (x, r["gain_points"]), ha="center", va="bottom", fontsize=7)
    ax.axhline(s["target"]["min_gain_points"], color="tab:red", ls=":", lw=1, label="target")
    ax.axhline(s["mean_gain_points"], color="tab:blue", lw=1, label="mean over runs")
    if "mean_t95" in s:
        ax.axhspan(*s["mean_t95"], color="tab:blue", alpha=0.12, label="its 95 % t interval")
    ax.axhline(0, color="black", lw=0.5)
    ax.set_xticks(list(xs), [f"run seed {r['run_seed']}" for r in rows], fontsize=8)
    ax.set_ylabel("CR points over warm-up only")
    h = report["held_out"]
    ax.set_title(
        f"GRPO's gain per training run; held-out {h['profiles']} x {h['trials']}, seed {h['seed']}; "
        f"green: met the target",
        fontsize=8,
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def show(report: dict) -> None:
    table = Table(title="GRPO against warm-up only, per training run (exact McNemar)")
    for h in ("run seed", "CR before -> after", "gain", "p", "RL min", "target", "curriculum adds"):
        table.add_column(h)
    for r in report["runs"]:
        c = r.get("curriculum")
        table.add_row(
            str(r["run_seed"]),
            f"{r['CR']['warmup_only']:.3f} -> {r['CR']['grpo_fixed']:.3f}",
            f"{r['gain_points']:+.1f}",
            f"{r['p_mcnemar']:.2g}",
            f"{r['rl_minutes']:.1f}",
            "met" if r["met"] else "missed",
            f"{c['gain_points']:+.1f} (p {c['p_mcnemar']:.2g})" if c else "",
        )
    console.print(table)
    s = report["summary"]
    ci = " (95 % t interval {:+.1f} to {:+.1f})".format(*s["mean_t95"]) if "mean_t95" in s else ""
    console.print(
        f"mean gain {s['mean_gain_points']:+.1f} points{ci}; {s['runs_meeting_target']} of {s['runs']} "
        f"runs met the target; CPU: {', '.join(report['cpus']) or 'unrecorded'}"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path, help="learning_curve.py results JSONs, one per run seed")
    ap.add_argument("--out", type=Path, required=True, help="writes OUT.json and OUT.png")
    args = ap.parse_args(argv)
    report = collect(args.results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2))
    plot(report, args.out.with_suffix(".png"))
    show(report)
    console.print(f"wrote {args.out.with_suffix('.json')} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
