"""A decoding step's linear layers at few rows: the compiled small-rows kernel (`sead/models/decode_kernel.py`)
against oneDNN's packed bf16 linear it replaces there (`sead/models/packed_linear.py`), side by side in one run, at
SmolLM2-135M's shapes, as a share of the machine's memory bandwidth measured in the same run.

Each timing runs one step's worth of layers: `--layers` distinct weights of each projection (so no weight is in a
cache when it is read, as in a real step) and the output head. Interleaved repeats; the best of each arm counts.
Also each arm's largest error against the fp64 product. What `decode_step.SMALL_ROWS` is set from.

Then whole decoding steps (`--step-rows`): greedy sampling of the real first prompt (the SOP prompt and one
exchange per row, as `roofline.py` decodes it), interleaved, ms per decoding step, in three arms: `fused` (all layers
one compiled call up to `decode_step.FUSED_ROWS` rows, the operators above), `kernel` (the operators, the kernel's
linears up to `SMALL_ROWS` rows) and `onednn` (the operators, oneDNN's linears).

    PYTHONPATH=. .venv/bin/python benchmarks/small_rows_linear.py [--rows 1 2 4 8 16 32] [--step-rows 1 2 4 8]
        [--model smollm2|tiny] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import torch
from rich.console import Console
from rich.table import Table

from sead.config import build_scenario, load_config
from sead.dialogue import AgentRequest
from sead.models import decode_kernel, decode_step
from sead.models.loading import ModelConfig, load_model
from sead.models.packed_linear import pack_weight, packed_forward
from sead.models.precision import cpu_info, cpu_line
from sead.plots.record import write_record
from sead.policy.hf import HFPolicy
from sead.policy.settings import SamplingConfig
from sead.progress import progress_bar

sys.path.insert(0, str(Path(__file__).resolve().parent))
from roofline import bandwidth_gb_s, row_prompts, split_timing  # noqa: E402  (a sibling script, not a package)

HERE = Path(__file__).resolve().parent
console = Console()


def step_weights(hidden: int, qkv: int, inner: int, vocab: int, layers: int, seed: int = 0) -> list[torch.Tensor]:
    """One decoding step's weights: per layer the packed q/k/v, o, packed gate/up and down projections; the head."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(qkv, hidden), (hidden, hidden), (2 * inner, hidden), (hidden, inner)] * layers + [(vocab, hidden)]
    return [(torch.randn(s, generator=g) * 0.05).bfloat16() for s in shapes]


def arms(weights: list[torch.Tensor]) -> dict:
    """name -> one layer function per weight of the step (x -> x @ w.T), each from its own pack."""
    op = decode_kernel.small_rows_linear()
    kernel = [partial(op, packed=decode_kernel.pack_small_rows(w), out=w.shape[0]) for w in weights]
    onednn = [partial(packed_forward, pack_weight(w), None) for w in weights]
    return {"kernel": kernel, "onednn": onednn}


def run_step(layers: list, inputs: list[torch.Tensor]) -> float:
    start = time.perf_counter()
    for fn, x in zip(layers, inputs):
        fn(x)
    return time.perf_counter() - start


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = result.get("steps") or []
    fig, axes = plt.subplots(1, 2 if steps else 1, figsize=(11 if steps else 6, 3.5), squeeze=False)
    ax = axes[0][0]
    rows = [c["rows"] for c in result["cases"]]
    for name, label in (("kernel", "small-rows kernel"), ("onednn", "oneDNN, packed")):
        ax.plot(rows, [c["gb_s"][name] for c in result["cases"]], marker="o", label=label)
    ax.axhline(result["bandwidth_gb_s"], color="grey", linestyle="--", label="memory bandwidth (probe)")
    ax.set_ylabel("weight GB/s (one step's linears)")
    ax.set_title(f"decoding step's linear layers, {result['cpu']['model']}", fontsize=9)
    if steps:
        right = axes[0][1]
        fused = f"fused step (up to {result['fused_rows']} rows, operators above)"
        for name, label in (("fused", fused), ("kernel", "operators, kernel's linears"),
                            ("onednn", "operators, oneDNN's linears")):  # fmt: skip
            right.plot([c["rows"] for c in steps], [c["ms_per_step"][name] for c in steps], marker="o", label=label)
        right.set_ylabel("ms per decoding step (SmolLM2, bf16)")
        right.set_title("whole decoding steps, real SOP prompt", fontsize=9)
    for a in axes[0]:
        ticks = sorted({c["rows"] for c in result["cases"]} | {c["rows"] for c in steps})
        a.set_xscale("log", base=2)
        a.set_xticks(ticks, [str(r) for r in ticks])
        a.set_xlabel("rows")
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


STEP_ARMS = {"fused": (True, True), "kernel": (True, False), "onednn": (False, False)}  # USE_SMALL_ROWS, USE_FUSED


def decoding_steps(model, tok, sop: str, rows: int, new: int, repeats: int) -> dict:
    """ms per decoding step of one greedy sampling call in each of `STEP_ARMS`, interleaved."""
    no_eos = SimpleNamespace(eos_token_id=-1, pad_token_id=tok.pad_token_id)  # every row decodes `new` tokens
    requests = [AgentRequest(p, [], new, seed=i) for i, p in enumerate(row_prompts(tok, sop, rows))]

    def sample() -> int:
        policy = HFPolicy(model, no_eos, SamplingConfig(temperature=0.0), turn_cache_mb=0)
        return sum(len(o.token_ids) for o in policy.sample(requests))

    times = {name: [] for name in STEP_ARMS}
    keep = decode_step.USE_SMALL_ROWS, decode_step.USE_FUSED
    try:
        for _ in range(repeats):
            for name, (small, fused) in STEP_ARMS.items():
                decode_step.USE_SMALL_ROWS, decode_step.USE_FUSED = small, fused
                times[name].append(split_timing(model, sample, new - 1, 1)["decode_s"] / (new - 1) * 1e3)
    finally:
        decode_step.USE_SMALL_ROWS, decode_step.USE_FUSED = keep
    best = {name: min(t) for name, t in times.items()}
    return {
        "rows": rows,
        "ms_per_step": best,
        "speedup": best["onednn"] / best["kernel"],  # the kernel's linears in the operators' step
        "fused_speedup": best["kernel"] / best["fused"],  # the fused step against the operators' best
        "ms_all": times,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--qkv", type=int, default=960, help="q, k and v projections' outputs together")
    ap.add_argument("--inner", type=int, default=1536, help="the MLP's inner width")
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--bandwidth-mib", type=int, default=1024, help="size of the bandwidth probe's tensor")
    ap.add_argument("--step-rows", type=int, nargs="*", default=[1, 2, 4, 8], help="whole decoding steps at these")
    ap.add_argument("--step-tokens", type=int, default=64, help="tokens decoded per row in a step timing")
    ap.add_argument("--model", default="smollm2", choices=["smollm2", "tiny"], help="for the whole steps")
    ap.add_argument("--out", type=Path, default=HERE / "small_rows_linear.json")
    args = ap.parse_args(argv)
    if decode_kernel.small_rows_linear() is None:
        raise SystemExit("the small-rows linear kernel is not available here (it needs AVX512-BF16 and a compiler)")
    cpu = cpu_info()
    console.print(f"[bold]CPU:[/] {cpu_line(cpu)}; torch threads {torch.get_num_threads()}")
    weights = step_weights(args.hidden, args.qkv, args.inner, args.vocab, args.layers)
    nbytes = sum(w.numel() * w.element_size() for w in weights)
    fns = arms(weights)
    bandwidth = [bandwidth_gb_s(args.bandwidth_mib, torch.device("cpu"))]
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    result = {"cpu": cpu, "threads": torch.get_num_threads(), "args": settings, "weight_bytes": nbytes, "cases": []}
    result["fused_rows"] = decode_step.FUSED_ROWS
    with progress_bar(console) as progress:
        task = progress.add_task("rows", total=len(args.rows))
        for rows in args.rows:
            g = torch.Generator().manual_seed(rows)
            inputs = [torch.randn((rows, 1, w.shape[1]), generator=g).bfloat16() for w in weights]
            exact = inputs[-1].double() @ weights[-1].double().T  # the head's: the widest layer of the step
            err = {name: (layers[-1](inputs[-1]).double() - exact).abs().max().item() for name, layers in fns.items()}
            times = {name: [] for name in fns}
            for layers in fns.values():
                run_step(layers, inputs)  # warm-up
            for _ in range(args.repeats):  # interleaved: the machine's drift falls on both arms
                for name, layers in fns.items():
                    times[name].append(run_step(layers, inputs))
            best = {name: min(t) * 1e3 for name, t in times.items()}
            result["cases"].append(
                {
                    "rows": rows,
                    "ms_per_step": best,
                    "gb_s": {name: nbytes / ms / 1e6 for name, ms in best.items()},
                    "speedup": best["onednn"] / best["kernel"],
                    "max_abs_error_vs_fp64": err,
                    "times_s": times,
                }  # fmt: skip
            )
            progress.advance(task)
    bandwidth.append(bandwidth_gb_s(args.bandwidth_mib, torch.device("cpu")))
    result["steps"] = []
    if args.step_rows:
        model, tok, _ = load_model(ModelConfig(preset=args.model, dtype="bfloat16"))
        sop = build_scenario(load_config([])).agent_system_prompt()
        with progress_bar(console) as progress:
            task = progress.add_task("decoding steps", total=len(args.step_rows))
            for rows in args.step_rows:
                result["steps"].append(decoding_steps(model, tok, sop, rows, args.step_tokens, args.repeats))
                progress.advance(task)
    result["bandwidth_gb_s"] = max(bandwidth)  # the limit: the best the probe saw, before and after
    table = Table(title=f"one decoding step's linear layers ({nbytes / 1e6:.0f} MB of bf16 weights), best of repeats",
                  title_justify="left")  # fmt: skip
    for col in ("rows", "kernel ms", "oneDNN ms", "oneDNN / kernel", "kernel x bandwidth", "oneDNN x bandwidth",
                "error kernel", "error oneDNN"):  # fmt: skip
        table.add_column(col)
    for c in result["cases"]:
        share = {name: gb / result["bandwidth_gb_s"] for name, gb in c["gb_s"].items()}
        e = c["max_abs_error_vs_fp64"]
        table.add_row(str(c["rows"]), f"{c['ms_per_step']['kernel']:.2f}", f"{c['ms_per_step']['onednn']:.2f}",
                      f"{c['speedup']:.2f}x", f"{share['kernel']:.2f}", f"{share['onednn']:.2f}",
                      f"{e['kernel']:.2e}", f"{e['onednn']:.2e}")  # fmt: skip
    console.print(table)
    console.print(f"memory bandwidth (probe, best of before and after): {result['bandwidth_gb_s']:.1f} GB/s")
    for c in result["steps"]:
        ms = c["ms_per_step"]
        console.print(f"decoding step, {c['rows']} rows ({args.model}, bf16): fused {ms['fused']:.1f} ms, operators "
                      f"with the kernel {ms['kernel']:.1f} ms ({c['fused_speedup']:.2f}x), with oneDNN "
                      f"{ms['onednn']:.1f} ms (kernel {c['speedup']:.2f}x)")  # fmt: skip
    console.print(f"written {args.out} and {write_record(result, args.out, plot)}")
    return result


if __name__ == "__main__":
    main()
