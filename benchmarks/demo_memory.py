"""The CPU demo's peak memory and time, with the training activations recomputed and kept, side by side in one run.

Each arm is the demo as `bash scripts/main.sh` runs it (`python -m sead train preset=cpu`, a fresh run directory),
then one evaluation pass of its checkpoint as `bash scripts/eval.sh RUN` runs it, each in its own process. Peak
memory is the process's own peak resident set (`wait4`'s `ru_maxrss`); the minutes are wall time, model loading and
kernel builds included (a warm cache: run `bash scripts/main.sh` once first so neither arm pays the conversion).
Arms run one after the other on an otherwise idle machine; the plan's probe sizes both alike only if the machine
is as fast for both, so each arm's plan line is recorded beside its figures.

    .venv/bin/python benchmarks/demo_memory.py [--arms recompute keep] [--work /tmp/sead_demo_memory]
        [--out benchmarks/demo_memory.json] [key=value ...]

Extra key=value overrides go to every arm's training run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Column, Table

from sead.models.precision import cpu_info, cpu_line
from sead.run.layout import RunLayout
from sead.run.metrics_log import training_made

console = Console()
ARMS = {"recompute": ["trainer.recompute_activations=true"], "keep": ["trainer.recompute_activations=false"]}
LIMIT_GIB = 4.0  # a laptop runs the demo beside a browser
HEARTBEAT_S = 30


def run(cmd: list[str], log: Path) -> dict:
    """Run `cmd` to its end, its output into `log`; its exit code, wall seconds and peak resident GiB. Every
    HEARTBEAT_S a line says how long it has run and the last line it wrote."""
    started = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
        )
        due = started + HEARTBEAT_S
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(1)
            if time.perf_counter() >= due:
                due += HEARTBEAT_S
                last = next((line for line in reversed(log.read_text().splitlines()) if line.strip()), "")
                console.print(f"  {time.perf_counter() - started:.0f} s: {last[:100]}", highlight=False)
    return {
        "exit": os.waitstatus_to_exitcode(status),
        "seconds": round(time.perf_counter() - started, 1),
        "peak_gib": round(usage.ru_maxrss / 2**20, 2),  # Linux reports KiB
    }


def arm(name: str, overrides: list[str], work: Path, extra: list[str]) -> dict:
    run_dir = work / name
    shutil.rmtree(run_dir, ignore_errors=True)
    sead = [sys.executable, "-m", "sead"]
    train = run([*sead, "train", "preset=cpu", f"run_dir={run_dir}", *overrides, *extra], work / f"{name}_train.log")
    plan = [line for line in (work / f"{name}_train.log").read_text().splitlines() if line.startswith("plan:")]
    steps, optimiser_steps = training_made(RunLayout(run_dir))
    evaluate = run([*sead, "eval", str(run_dir), "preset=cpu"], work / f"{name}_eval.log")
    return {
        "overrides": overrides,
        "train": train,
        "rl_steps": steps,
        "optimiser_steps": optimiser_steps,
        "plan": plan,
        "eval": evaluate,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    ap.add_argument("--work", type=Path, default=Path("/tmp/sead_demo_memory"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/demo_memory.json"))
    args, extra = ap.parse_known_args()
    args.work.mkdir(parents=True, exist_ok=True)
    cpu = cpu_info()
    console.print(f"[bold]CPU:[/] {cpu_line(cpu)}")
    arms = {}
    for name in args.arms:
        console.print(f"arm {name}: training, then one evaluation pass (logs in {args.work})")
        arms[name] = arm(name, ARMS[name], args.work, extra)
    heads = ("train exit", "RL steps", "train min", "train peak GiB", "eval min", "eval peak GiB")
    table = Table(Column("arm", no_wrap=True), *heads)
    for name, a in arms.items():
        t, e = a["train"], a["eval"]
        table.add_row(
            name, str(t["exit"]), str(a["rl_steps"]), f"{t['seconds'] / 60:.1f}", f"{t['peak_gib']:.2f}",
            f"{e['seconds'] / 60:.1f}", f"{e['peak_gib']:.2f}",
        )  # fmt: skip
    console.print(table)
    console.print(f"limit: {LIMIT_GIB} GiB of peak resident memory for training and for evaluation")
    result = {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu,
        "command": " ".join(["benchmarks/demo_memory.py", *sys.argv[1:]]),
        "limit_gib": LIMIT_GIB,
        "arms": arms,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
