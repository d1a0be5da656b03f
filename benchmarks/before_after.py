"""Before and after, end to end: one evaluation pass and one GRPO step of a warmed model, with the code of an earlier
revision and with this checkout, side by side in one run: what the speed work bought a user.

Each arm is `python -m sead` as a user runs it, in its own process: the earlier revision from a `git archive` of it
(by default the code of 2026-11-24, before the speed work began), this checkout as it is, both in this interpreter's
environment, with overrides that mean the same task at both revisions (the learning-curve task: compact SOP prompt,
8 turns of up to 144 tokens, greedy evaluation; the step: 2 profiles x 5 rollouts at temperature 1.0 from the same
warm-up, every group trained). Passes alternate (before, after, before, after) so the machine's drift falls on both.
Each arm runs in its shipped precision (the earlier code in fp32; this one picks bf16 where the CPU has it).

What is compared: the evaluation's dialogue play (`results.json` `wall_time_s`, model loading excluded) and the
step's rollout + update seconds (`metrics.jsonl`). The scripted user grew stricter between the revisions and bf16
plays other greedy tokens than fp32, so the two arms may play dialogues of other lengths: agent tokens per second is
the fair ratio, and the tokens, turns and prompt tokens of each pass are printed beside it.

    .venv/bin/python benchmarks/before_after.py WARMUP [--before REV] [--profiles 32]
        [--repeats 2] [--no-eval | --no-step] [key=value ...]

WARMUP is a warm-up folder (`model/` and `summary.json`, e.g. a learning-curve run's `warmup/warmup`); extra
key=value overrides go to both arms.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sead.models.precision import cpu_info, cpu_line
from sead.progress import progress_bar

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASELINE = "66a9453"  # the default earlier arm: the code of 2026-11-24, before the speed work began
console = Console()

# Keys both revisions know (no preset: the CPU preset differs between them).
TASK = [
    "scenario.agent_prompt=configs/format_prompt/call_chatbot_compact.txt",
    "dialogue.max_turns=8",
    "dialogue.max_new_tokens=144",
    "dialogue.max_context_tokens=2048",
    "dialogue.on_malformed=end",
]
EVAL = ["eval.max_new_tokens=144", "eval.trials=1", "eval.seed=0", "eval.sampling.temperature=0"]
EVAL += ["eval.sampling.top_p=1.0", "eval.device=cpu", "eval.fresh=true"]
# The learning-curve recipe's step at the time of the earlier revision, with every group trained (a warmed model
# samples nearly one dialogue per profile, and dynamic sampling could skip the update in one arm only).
STEP = ["trainer.max_batch=64", "trainer.logging.tensorboard=false", "trainer.max_minutes=null", "controller=fixed"]
STEP += ["seed=0", "reward.stage_progress=0.5", "reward.format=0.1", "trainer.iterations=1"]
STEP += ["trainer.steps_per_iteration=1", "trainer.save_every=1000", "trainer.sampling.temperature=1.0"]
STEP += ["trainer.update.kl_coef=0", "trainer.update.lr=1e-5", "trainer.update.warmup_steps=1"]
STEP += ["trainer.update.dynamic_sampling=false", "trainer.update.micro_batch=4", "trainer.validation.at_start=false"]
STEP += ["trainer.validation.profiles=1", "resume=false"]


def export(rev: str, into: Path) -> Path:
    """The tree of `rev` (committed files only) in a folder of its own."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=False)
    if archive.returncode:
        raise SystemExit(f"git archive {rev} failed: {archive.stderr.decode().strip()}")
    with tempfile.TemporaryFile() as f:
        f.write(archive.stdout)
        f.seek(0)
        tarfile.open(fileobj=f).extractall(into, filter="data")
    return into


def sead(root: Path, args: list[str], log: Path) -> None:
    """`python -m sead ARGS` with the `sead` package and `configs/` of `root`."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    with log.open("w") as out:
        done = subprocess.run([sys.executable, "-m", "sead", *args], cwd=root, env=env, stdout=out, stderr=out)
    if done.returncode:
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise SystemExit(f"`sead {args[0]}` in {root} failed (exit {done.returncode}); the end of {log}:\n{tail}")


def eval_pass(root: Path, model: Path, work: Path, args, extra: list[str]) -> dict:
    out = work / "eval"
    overrides = [f"eval.limit={args.profiles}", f"eval.max_batch={args.batch}", f"eval.out_dir={out}"]
    overrides += [f"eval.testset_dir={args.work / 'testsets'}"]
    sead(root, ["eval", str(model), *TASK, *EVAL, *overrides, *extra], work / "eval.log")
    (results,) = out.glob("*/results.json")
    r = json.loads(results.read_text())
    if r["dialogues_played"] != args.profiles:
        raise SystemExit(f"{results}: {r['dialogues_played']} dialogues played, expected {args.profiles}")
    tokens = r["tokens"]["agent_completion"]
    return {
        "s": r["wall_time_s"],
        "agent_tokens": tokens,
        "agent_tok_s": tokens / r["wall_time_s"],
        "agent_prompt_tokens": r["tokens"]["agent_prompt"],
        "turns": r["metrics"]["ADT"]["mean"],
        "CR": r["metrics"]["CR"]["mean"],
    }


def grpo_step(root: Path, warmup: Path, work: Path, args, extra: list[str]) -> dict:
    run = work / "run"
    overrides = [f"trainer.warmup.reuse={warmup}", f"run_dir={run}"]
    overrides += [f"trainer.profiles_per_step={args.step_profiles}", f"trainer.rollouts_per_profile={args.rollouts}"]
    sead(root, ["train", *TASK, *STEP, *overrides, *extra], work / "train.log")
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    step = next(line for line in lines if "time" in line)
    t = step["time"]
    return {
        "s": t["rollout_s"] + t["update_s"],
        "rollout_s": t["rollout_s"],
        "update_s": t["update_s"],
        "generated_tokens": round(step["gen_tokens_per_s"] * t["rollout_s"]),
        "trained_tokens": step["trained_tokens"],
    }


def best(runs: list[dict]) -> dict:
    return min(runs, key=lambda r: r["s"])


def report(result: dict) -> None:
    table = Table(title=f"before ({result['before']}) and after ({result['after']})", title_justify="left")
    for col in ("what", "before s", "after s", "after / before speed", "before", "after"):
        table.add_column(col)
    if result["eval"]["before"]:
        b, a = best(result["eval"]["before"]), best(result["eval"]["after"])
        table.add_row(
            f"evaluation pass, {result['profiles']} dialogues (play only)",
            f"{b['s']:.1f}",
            f"{a['s']:.1f}",
            f"{a['agent_tok_s'] / b['agent_tok_s']:.2f}x per agent token, {b['s'] / a['s']:.2f}x per pass",
            f"{b['agent_tokens']} agent tok, {b['turns']:.2f} turns, CR {b['CR']:.2f}",
            f"{a['agent_tokens']} agent tok, {a['turns']:.2f} turns, CR {a['CR']:.2f}",
        )
    if result["step"]["before"]:
        b, a = best(result["step"]["before"]), best(result["step"]["after"])
        table.add_row(
            "GRPO step (rollouts + update)",
            f"{b['s']:.1f}",
            f"{a['s']:.1f}",
            f"{b['s'] / a['s']:.2f}x per step (rollouts {b['rollout_s'] / a['rollout_s']:.2f}x, "
            f"update {b['update_s'] / a['update_s']:.2f}x)",
            f"{b['generated_tokens']} generated, {b['trained_tokens']} trained tok",
            f"{a['generated_tokens']} generated, {a['trained_tokens']} trained tok",
        )
    console.print(table)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("warmup", type=Path, help="a warm-up folder: model/ and summary.json")
    ap.add_argument("--before", default=BASELINE, help="the earlier revision (default: before the speed work)")
    ap.add_argument("--profiles", type=int, default=32, help="evaluation dialogues (the first of the test set)")
    ap.add_argument("--batch", type=int, default=32, help="rows per sampling call in the evaluation")
    ap.add_argument("--step-profiles", type=int, default=2)
    ap.add_argument("--rollouts", type=int, default=5, help="rollouts per profile in the GRPO step")
    ap.add_argument("--repeats", type=int, default=2, help="passes per arm, alternating; the best counts")
    ap.add_argument("--no-step", action="store_true", help="the evaluation pass only")
    ap.add_argument("--no-eval", action="store_true", help="the GRPO step only")
    ap.add_argument("--work", type=Path, help="where the arms write (default: a new temporary folder)")
    ap.add_argument("--out", type=Path, default=HERE / "before_after.json")
    args, extra = ap.parse_known_args(argv)
    kinds = ([] if args.no_eval else ["eval"]) + ([] if args.no_step else ["step"])
    if not kinds:
        ap.error("--no-eval and --no-step leave nothing to measure")
    if bad := [e for e in extra if "=" not in e]:
        ap.error(f"unrecognised arguments: {' '.join(bad)} (overrides are key=value)")
    warmup = args.warmup.resolve()
    if not (warmup / "model" / "config.json").exists() or not (warmup / "summary.json").exists():
        ap.error(f"{warmup} is not a warm-up folder (model/ and summary.json)")
    args.work = (args.work or Path(tempfile.mkdtemp(prefix="before_after-"))).resolve()
    after = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    roots = {"before": export(args.before, args.work / "code_before"), "after": ROOT}
    console.print(f"[bold]CPU:[/] {cpu_line(cpu_info())}; arms write under {args.work}")

    result = {
        "cpu": cpu_info(),
        "before": args.before,
        "after": after.stdout.strip() + " (this checkout, as it is)",
        "profiles": args.profiles,
        "overrides": extra,
        "eval": {"before": [], "after": []},
        "step": {"before": [], "after": []},
    }
    with progress_bar(console) as progress:
        task = progress.add_task("passes", total=args.repeats * 2 * len(kinds))
        for i in range(args.repeats):
            for arm in ("before", "after"):
                for kind in kinds:
                    progress.update(task, description=f"{kind}, {arm}, pass {i + 1}")
                    work = args.work / f"{arm}_{kind}_{i}"
                    work.mkdir(parents=True)
                    measure = eval_pass if kind == "eval" else grpo_step
                    args_for = (roots[arm], warmup / "model" if kind == "eval" else warmup, work, args, extra)
                    result[kind][arm].append(measure(*args_for))
                    progress.advance(task)
    report(result)
    args.out.write_text(json.dumps(result, indent=2))
    console.print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
