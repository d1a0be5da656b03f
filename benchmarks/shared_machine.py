"""SEAD on a machine shared with other work: decoding and a training step alone and beside a CPU load, in one run.

A laptop with a browser open, a CI runner, two jobs side by side: the cores SEAD computes on are often busy with
something else. This measures what SEAD keeps of its speed then. Each measurement runs in a fresh process (OpenMP
reads its thread settings when torch loads it), for each way the tensor threads can wait between parallel regions:
- `sead`: SEAD's own setting (sead/threads.py: a short spin, then sleep),
- `gomp_default`: GNU OpenMP's default spin (`GOMP_SPINCOUNT=300000`, what torch does on its own),
- `passive`: `OMP_WAIT_POLICY=PASSIVE` (no spin),
first alone, then beside one busy process per core (`while True: pass`, the scheduler's default priority). The
workloads: greedy decoding of the roofline benchmark's rows (the SOP prompt plus a short conversation each) at each
`--rows`, after a first call has cached their shared prompt, and a training forward + backward of `--train-rows`
such rows as the trainer runs it (`masked_logprobs`). The figure of merit is each workload's throughput beside the
load as a fraction of the same policy's alone: a fair share of two busy cores is about half.

    .venv/bin/python benchmarks/shared_machine.py [--rows 1 8] [--new-tokens 24] [--train-rows 2]
        [--policies sead gomp_default passive] [--model smollm2|/hf/folder] [--quick]
        [--out benchmarks/shared_machine.json]  (a PNG is written beside it)
"""

from __future__ import annotations

# isort: off
import sead  # noqa: F401 - first: SEAD's thread settings reach OpenMP only if set before torch loads

# isort: on

import argparse
import datetime
import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console
from rich.table import Table

console = Console()
POLICIES = {  # name -> what the worker process's environment gets
    "sead": {},
    "gomp_default": {"GOMP_SPINCOUNT": "300000"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
}
LOADS = ("alone", "beside_load")
FAIR_SHARE = 0.4  # of the speed alone, at least, beside a load that keeps every core busy


def measure(args) -> dict:
    """The worker: each workload's throughput in this process (tokens a second)."""
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    import roofline

    from sead.config import build_scenario, load_config
    from sead.dialogue import AgentRequest
    from sead.models.loading import ModelConfig, load_model
    from sead.models.precision import Precision
    from sead.policy.hf import HFPolicy
    from sead.policy.settings import SamplingConfig

    preset = {"preset": "smollm2"} if args.model == "smollm2" else {"preset": "path", "path": args.model}
    precision = Precision.for_training("auto", "cpu")
    model, tok, _ = load_model(ModelConfig(**preset, dtype=precision.compute, device="cpu"))
    sop = build_scenario(load_config([])).agent_system_prompt()
    prompts = roofline.row_prompts(tok, sop, max(*args.rows, args.train_rows))
    no_eos = SimpleNamespace(eos_token_id=-1, pad_token_id=tok.pad_token_id)  # every row decodes --new-tokens
    policy = HFPolicy(model, no_eos, SamplingConfig(temperature=0.0), turn_cache_mb=0)
    out = {}
    for rows in args.rows:
        requests = [AgentRequest(p, [], args.new_tokens, seed=i) for i, p in enumerate(prompts[:rows])]
        policy.sample(requests)  # the shared prompt's keys and values are kept from here, as in a rollout
        steps = args.new_tokens - 1
        call = lambda batch=requests: sum(len(o.token_ids) for o in policy.sample(batch))  # noqa: E731
        out[f"decode_{rows}_rows"] = rows * steps / roofline.split_timing(model, call, steps, 3)["decode_s"]
    if precision.mixed:  # as the trainer runs it: fp32 master weights, the matmuls in the compute precision
        model, _, _ = load_model(ModelConfig(**preset, dtype=precision.master, device="cpu"))
    train = roofline.measure_training(model, tok, roofline.Shape(model), prompts[: args.train_rows], 2)
    out[f"train_{args.train_rows}_rows"] = train["tok_s"]
    return {"tok_s": out, "threads": torch.get_num_threads(), "compute": precision.compute}


@contextmanager
def cpu_load(processes: int):
    """`processes` busy loops for the length of the block."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for p in busy:
            p.kill()
            p.wait()


def run_worker(argv: list[str], policy: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")} | policy
    done = subprocess.run(
        [sys.executable, __file__, "--worker", *argv], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"the worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["policies"])
    workloads = list(result["policies"][names[0]]["alone"]["tok_s"])
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        kept = [result["policies"][name]["kept"][w] for w in workloads]
        ax.bar([j + i * width for j in range(len(workloads))], kept, width, label=name)
    ax.axhline(FAIR_SHARE, color="k", ls="--", lw=1, label=f"{FAIR_SHARE:.0%} of alone")
    ax.axhline(0.5, color="grey", ls=":", lw=1, label="half (a fair share of busy cores)")
    ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(workloads))], workloads)
    ax.set_ylabel("speed beside the load / alone")
    ax.set_title(f"{result['machine']['cpu']['model']}, {result['machine']['cpu']['cpus']} CPUs", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="'smollm2' (the packaged model) or a local HF folder")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8], help="batch sizes to decode")
    ap.add_argument("--new-tokens", type=int, default=24, help="tokens decoded per row")
    ap.add_argument("--train-rows", type=int, default=2, help="rows of the training forward + backward")
    ap.add_argument("--policies", nargs="+", choices=list(POLICIES), default=list(POLICIES))
    ap.add_argument("--quick", action="store_true", help="smoke test: one row, 4 tokens, SEAD's policy only")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("shared_machine.json"))
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.new_tokens, args.policies = [1], 4, ["sead"]
    if args.new_tokens < 2:
        ap.error("--new-tokens must be at least 2 (one from the prefill, at least one decoding step)")
    if args.worker:
        print(json.dumps(measure(args)))
        return {}
    from sead.models.precision import cpu_info, cpu_line

    worker_argv = ["--model", args.model, "--rows", *map(str, args.rows), "--new-tokens", str(args.new_tokens)]
    worker_argv += ["--train-rows", str(args.train_rows)]
    cores = os.cpu_count() or 1
    machine = {"cpu": cpu_info(), "load_processes": cores}
    console.print(f"[bold]CPU:[/] {cpu_line(machine['cpu'])}; the load: {cores} busy processes")
    policies = {}
    for name in args.policies:
        runs = {}
        for load in LOADS:
            with console.status(f"{name}, {load.replace('_', ' ')}"), cpu_load(cores if load != "alone" else 0):
                runs[load] = run_worker(worker_argv, POLICIES[name])
        alone, loaded = runs["alone"]["tok_s"], runs["beside_load"]["tok_s"]
        runs["kept"] = {w: loaded[w] / alone[w] for w in alone}
        runs["env"] = POLICIES[name]
        policies[name] = runs
        console.print(f"{name}: kept " + ", ".join(f"{w} {k:.2f}" for w, k in runs["kept"].items()))
    first = policies[args.policies[0]]["alone"]
    result = {
        "machine": machine | {"threads": first["threads"]},
        "compute": first["compute"],
        "settings": {k: getattr(args, k) for k in ("model", "rows", "new_tokens", "train_rows")},
        "fair_share": FAIR_SHARE,
        "policies": policies,
        "command": "benchmarks/shared_machine.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.date.today().isoformat(),
    }
    table = Table(title="tokens a second: alone -> beside the load (kept)")
    table.add_column("policy")
    for w in first["tok_s"]:
        table.add_column(w, justify="right")
    for name, runs in policies.items():
        cells = [f"{runs['alone']['tok_s'][w]:.1f} -> {runs['beside_load']['tok_s'][w]:.1f} ({k:.2f})"
                 for w, k in runs["kept"].items()]  # fmt: skip
        table.add_row(name, *cells)
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    plot(result, args.out.with_suffix(".png"))
    console.print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return result


if __name__ == "__main__":
    main()
