"""The decoding step's attention alone: the compiled single-query kernel for each row's own positions against the
batched matmuls it replaces (`sead/models/attention.py`, `_cascade`), side by side in one run, at the shapes of a
learning-curve evaluation (SmolLM2: 9 query heads over 3 key/value heads of 64, the shared SOP prompt kept apart).

Rows' own turns are ragged, as in a real batch: each row's own positions end at a length drawn between half and all
of the buffer, with `--reserve` positions past the longest row kept for tokens not decoded yet (what `BatchCache`
holds during a sampling call). Interleaved repeats; the best of each arm counts. Also the error of each arm against
fp64 attention on the same inputs.

    PYTHONPATH=. .venv/bin/python benchmarks/decode_attention.py [--rows 8 32 64] [--own 300 700] [--out FILE]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from sead.models import attention, decode_kernel
from sead.models.precision import cpu_info, cpu_line
from sead.plots.record import write_record
from sead.progress import progress_bar

HERE = Path(__file__).resolve().parent
console = Console()
HEADS, KV_HEADS, DIM = 9, 3, 64  # SmolLM2-135M
ARMS = (("kernel", True), ("matmuls", False))  # name, attention.USE_KERNEL


def shapes(rows: int, own: int, prefix: int, reserve: int, seed: int = 0):
    """One layer's decoding inputs: queries, the rows' own keys/values (views of a buffer with room left), their
    mask (ragged lengths, left-aligned after the prefix), and the shared prefix."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn((rows, HEADS, 1, DIM), generator=g).bfloat16()
    k, v = (torch.randn((rows, KV_HEADS, own + reserve, DIM), generator=g).bfloat16() for _ in "kv")
    lengths = torch.randint(own // 2, own + 1, (rows,), generator=g)
    mask = (torch.arange(own + reserve)[None, :] < lengths[:, None]).view(rows, 1, 1, -1)
    prefix = tuple(torch.randn((1, KV_HEADS, prefix, DIM), generator=g).bfloat16() for _ in "kv")
    return q, k, v, mask, prefix


def exact(q, k, v, mask, prefix) -> torch.Tensor:
    rows, group = q.shape[0], HEADS // KV_HEADS
    kk, vv = (torch.cat([p.expand(rows, -1, -1, -1), t], 2).double().repeat_interleave(group, 1) for p, t in
              zip(prefix, (k, v)))  # fmt: skip
    full = torch.cat([torch.ones((rows, 1, 1, prefix[0].shape[2]), dtype=torch.bool), mask], -1)
    s = (q.double() @ kk.transpose(-1, -2) * DIM**-0.5).masked_fill(~full, float("-inf"))
    return (s.softmax(-1) @ vv).transpose(1, 2)


def run_arm(kernel: bool, inputs, layers: int) -> float:
    """Seconds for `layers` calls (one decoding step's attention)."""
    attention.USE_KERNEL = kernel
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(layers):
            attention._cascade(*inputs, None)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[8, 32, 64])
    ap.add_argument("--own", type=int, nargs="+", default=[300, 700], help="own positions of the longest row")
    ap.add_argument("--prefix", type=int, default=1300, help="shared prompt positions")
    ap.add_argument("--reserve", type=int, default=144, help="room kept for tokens not decoded yet")
    ap.add_argument("--layers", type=int, default=30, help="calls per timing (SmolLM2 has 30 layers)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=HERE / "decode_attention.json")
    args = ap.parse_args(argv)
    op = decode_kernel.single_query_attention()
    if op is None:
        raise SystemExit("the decoding attention kernel is not available here (it needs AVX512-BF16 and a compiler)")
    cpu = cpu_info()
    console.print(f"[bold]CPU:[/] {cpu_line(cpu)}; torch threads {torch.get_num_threads()}")
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    result = {"cpu": cpu, "threads": torch.get_num_threads(), "args": settings, "cases": []}
    cases = [(rows, own) for rows in args.rows for own in args.own]
    keep = attention.USE_KERNEL
    try:
        with progress_bar(console) as progress:
            task = progress.add_task("cases", total=len(cases))
            for rows, own in cases:
                inputs = shapes(rows, own, args.prefix, args.reserve)
                ref = exact(*inputs)
                err = {}
                for name, kernel in ARMS:
                    attention.USE_KERNEL = kernel
                    with torch.no_grad():
                        err[name] = (attention._cascade(*inputs, None).double() - ref).abs().max().item()
                times = {"kernel": [], "matmuls": []}
                run_arm(True, inputs, 2), run_arm(False, inputs, 2)  # warm-up
                for _ in range(args.repeats):  # interleaved: the machine's drift falls on both arms
                    for name, kernel in ARMS:
                        times[name].append(run_arm(kernel, inputs, args.layers))
                best = {name: min(t) * 1e3 / args.layers for name, t in times.items()}
                result["cases"].append(
                    {
                        "rows": rows,
                        "own": own,
                        "ms_per_layer": best,
                        "speedup": best["matmuls"] / best["kernel"],
                        "max_abs_error_vs_fp64": err,
                        "times_s": times,
                    }  # fmt: skip
                )
                progress.advance(task)
    finally:
        attention.USE_KERNEL = keep
    table = Table(title="decoding attention, one layer (best of repeats)", title_justify="left")
    for col in (
        "rows",
        "own positions",
        "kernel ms",
        "matmuls ms",
        "matmuls / kernel",
        "error kernel",
        "error matmuls",
    ):
        table.add_column(col)
    for c in result["cases"]:
        e = c["max_abs_error_vs_fp64"]
        table.add_row(str(c["rows"]), str(c["own"]), f"{c['ms_per_layer']['kernel']:.3f}",
                      f"{c['ms_per_layer']['matmuls']:.3f}", f"{c['speedup']:.2f}x", f"{e['kernel']:.2e}",
                      f"{e['matmuls']:.2e}")  # fmt: skip
    console.print(table)
    console.print(f"written {args.out} and {write_record(result, args.out, plot)}")
    return result


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = result["cases"]
    x = range(len(cases))
    fig, ax = plt.subplots(figsize=(1.2 * len(cases) + 3, 3.5))
    for name, shift in (("matmuls", -0.2), ("kernel", 0.2)):
        ax.bar([j + shift for j in x], [c["ms_per_layer"][name] for c in cases], width=0.4, label=name)
    ax.set_xticks(list(x), [f"{c['rows']} rows\n{c['own']} own" for c in cases])
    ax.set_ylabel("ms per layer (decoding step)")
    ax.set_title(f"decoding attention, {result['cpu']['model']}", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
