"""Top-p for flat rows on a GPU: the CPU's binned nucleus (one small sort per row) against one sort of every row.

A flat row (a base model at temperature >= 1: a nucleus of thousands of tokens) takes `_nucleus_mask`. On a CPU
that bins the row's log-probabilities and sorts one bin per row, because sorting SmolLM2's whole 49k vocabulary
costs 3.5 ms a row there. On a GPU the per-row loop is a few launches and a wait for the host per row, and sorting
every row at once is one call, so `pick_tokens` sorts there. This script times `pick_tokens` on flat rows of
SmolLM2's vocabulary with each way in turn (interleaved, median of `--repeats`), checks that they draw the same
tokens from the same seeds, and prints the device it ran on.

    .venv/bin/python benchmarks/nucleus_sort.py [--device cuda] [--rows 8 64 256] [--out benchmarks/nucleus_sort.json]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from sead.models.precision import cpu_info, cpu_line
from sead.plots.record import write_record
from sead.policy import sampling
from sead.policy.settings import SamplingConfig

console = Console()
WAYS = ("binned", "sorted")
VOCAB = 49_152  # SmolLM2's
SETTING = SamplingConfig(temperature=1.0, top_p=0.95)


def device_name(device: torch.device) -> str:
    host = cpu_line(cpu_info())
    return f"{torch.cuda.get_device_name(device)}; host {host}" if device.type == "cuda" else host


def timed_pick(logits: torch.Tensor, seed: int, way: str) -> tuple[float, torch.Tensor]:
    """Seconds of one `pick_tokens` call (tokens back on the host, as the policy needs them) with the nucleus of
    flat rows found the given way; and its tokens."""
    chosen = getattr(sampling, f"_{way}_nucleus_mask")
    routed, sampling._nucleus_mask = sampling._nucleus_mask, lambda logp, top_p: chosen(logp, top_p)
    try:
        gens = [torch.Generator().manual_seed(seed * 10_000 + r) for r in range(len(logits))]
        if logits.is_cuda:
            torch.cuda.synchronize(logits.device)
        start = time.perf_counter()
        tokens = sampling.pick_tokens(logits, gens, SETTING)[0].cpu()
        return time.perf_counter() - start, tokens
    finally:
        sampling._nucleus_mask = routed


def measure(rows: int, device: torch.device, repeats: int, scale: float, vocab: int) -> dict:
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(rows)).mul_(scale).to(device)
    seconds = {w: [] for w in WAYS}
    same = True
    for seed in range(repeats + 1):  # the first round warms both up and is not counted
        picked = {}
        for way in WAYS:
            s, picked[way] = timed_pick(logits, seed, way)
            if seed:
                seconds[way].append(s)
        same &= torch.equal(picked["binned"], picked["sorted"])
    ms = {w: 1e3 * statistics.median(seconds[w]) for w in WAYS}
    return {"rows": rows, "ms": ms, "binned_over_sorted": ms["binned"] / ms["sorted"], "same_tokens": same}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r["rows"] for r in result["runs"]]
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for way, style in zip(WAYS, ("o-", "s-")):
        ax.plot(rows, [r["ms"][way] for r in result["runs"]], style, label=f"{way} nucleus")
    ax.set_xscale("log", base=2)
    ax.set_xticks(rows, [str(n) for n in rows])
    ax.set_yscale("log")
    ax.set_xlabel("flat rows sampled together")
    ax.set_ylabel("ms per pick_tokens call")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title(result["device_name"], fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rows", type=int, nargs="+", default=[8, 64, 256])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--vocab", type=int, default=VOCAB)
    ap.add_argument("--scale", type=float, default=0.5, help="logits ~ N(0, scale^2): small is flat")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("nucleus_sort.json"))
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no GPU on this machine")
    name = device_name(device)
    console.print(f"[bold]Device:[/] {name}; torch {torch.__version__}")
    runs = [measure(n, device, args.repeats, args.scale, args.vocab) for n in args.rows]
    table = Table(title=f"pick_tokens on flat rows (temperature 1.0, top-p 0.95, vocabulary {args.vocab:,})")
    for col in ("rows", "binned ms", "sorted ms", "binned / sorted", "same tokens"):
        table.add_column(col, justify="right")
    for r in runs:
        table.add_row(
            str(r["rows"]),
            f"{r['ms']['binned']:.2f}",
            f"{r['ms']['sorted']:.2f}",
            f"{r['binned_over_sorted']:.1f}x",
            "yes" if r["same_tokens"] else "NO",
        )
    console.print(table)
    result = {
        "date": datetime.date.today().isoformat(),
        "device": args.device,
        "device_name": name,
        "torch": torch.__version__,
        "settings": {"vocab": args.vocab, "scale": args.scale, "repeats": args.repeats, **vars(SETTING)},
        "runs": runs,
    }
    console.print(f"wrote {args.out} and {write_record(result, args.out, plot)}")
    return result


if __name__ == "__main__":
    main()
