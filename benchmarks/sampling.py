"""Choosing the next token: SEAD's sampler beside transformers' own top-p, inside real decoding.

Each setting decodes the same batch with `HFPolicy.sample` twice, once with SEAD's `pick_tokens` and once with
transformers' logits processors in its place (`TemperatureLogitsWarper` and `TopPLogitsWarper`, which sort every
row's whole vocabulary, then a draw per row from its own generator), and times every call of the sampler. The
settings are the temperatures SEAD ships: the evaluation's 0.7 (top-p 0.9), the CPU preset's training 1.0 and the
trainer's default 1.2 (top-p 0.95). Rows never stop early, so every step samples every row.

`--before REV` adds a third sampler: `pick_tokens` as it was at that git revision, so a change to SEAD's own
sampler is measured side by side with the code it replaced.

A base model at temperature >= 1 is flat (its 0.95 nucleus holds hundreds to thousands of tokens); a trained one is
peaked. Give `--model` a warmed model's folder to measure the second kind.

    .venv/bin/python benchmarks/sampling.py [--rows 1 8 32] [--new-tokens 32] [--model /hf/folder]
        [--before REV] [--out benchmarks/sampling.json]  (a PNG is written beside it)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import types
from pathlib import Path
from types import SimpleNamespace

import torch
from rich.console import Console
from rich.table import Table
from transformers import TemperatureLogitsWarper, TopPLogitsWarper

import sead.policy.hf as hf_policy
from sead.config import build_scenario, load_config
from sead.dialogue import AgentRequest
from sead.models.loading import ModelConfig, load_model
from sead.models.precision import cpu_info, cpu_line
from sead.policy.hf import HFPolicy
from sead.policy.sampling import pick_tokens
from sead.policy.settings import SamplingConfig
from sead.progress import progress_bar

sys.path.insert(0, str(Path(__file__).resolve().parent))
from roofline import row_prompts  # noqa: E402  (the prompts roofline.py decodes: a sibling script, not a package)

console = Console()
SETTINGS = [(0.7, 0.9), (1.0, 0.95), (1.2, 0.95)]  # (temperature, top_p) as shipped: eval, CPU preset, default


def transformers_pick(logits: torch.Tensor, gens: list[torch.Generator], cfg: SamplingConfig):
    """What `generate()` does for one step: the warpers over the whole batch, then one draw per row."""
    scores = TopPLogitsWarper(cfg.top_p)(None, TemperatureLogitsWarper(cfg.temperature)(None, logits))
    probs = torch.softmax(scores, -1)
    tok = torch.cat([torch.multinomial(p, 1, generator=g) for p, g in zip(probs, gens)])
    return tok, torch.log_softmax(logits / cfg.temperature, -1).gather(1, tok[:, None])[:, 0]


def sampler_at(rev: str):
    """`pick_tokens` from sead/policy/sampling.py as it was at git revision `rev`."""
    root = Path(__file__).resolve().parents[1]
    cmd = ["git", "show", f"{rev}:sead/policy/sampling.py"]
    got = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if got.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed: {got.stderr.strip()}")
    source = got.stdout
    module = types.ModuleType(f"sampling_at_{rev}")
    exec(compile(source, f"{rev}:sead/policy/sampling.py", "exec"), module.__dict__)
    return module.pick_tokens


def decode(model, tok, prompts, new: int, cfg: SamplingConfig, pick) -> dict:
    """One sampling call over `prompts` with `pick` as the sampler: decode seconds and the sampler's share."""
    spent: list[float] = []

    def timed(logits, gens, sampling):
        start = time.perf_counter()
        out = pick(logits, gens, sampling)
        spent.append(time.perf_counter() - start)
        return out

    no_eos = SimpleNamespace(eos_token_id=-1, pad_token_id=tok.pad_token_id)
    policy = HFPolicy(model, no_eos, cfg, turn_cache_mb=0)
    requests = [AgentRequest(p, [], new, seed=i) for i, p in enumerate(prompts)]
    hf_policy.pick_tokens = timed
    try:
        start = time.perf_counter()
        policy.sample(requests)
        total = time.perf_counter() - start
    finally:
        hf_policy.pick_tokens = pick_tokens
    return {"seconds": total, "sampler_ms_per_step": 1e3 * sum(spent[1:]) / len(spent[1:]), "steps": len(spent)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2, help="the faster of this many calls is kept")
    ap.add_argument("--model", help="a local HF model folder (default: the packaged SmolLM2-135M)")
    ap.add_argument("--before", help="a git revision whose sampler is measured beside today's")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("sampling.json"))
    args = ap.parse_args(argv)
    info = cpu_info()
    console.print(f"CPU: {cpu_line(info)}; torch threads {torch.get_num_threads()}")
    spec = {"preset": "path", "path": args.model} if args.model else {"preset": "smollm2"}
    model, tok, label = load_model(ModelConfig(**spec, dtype="auto"))
    sop = build_scenario(load_config([])).agent_system_prompt()
    prompts = row_prompts(tok, sop, max(args.rows))
    samplers = {"sead": pick_tokens, "transformers": transformers_pick}
    if args.before:
        samplers["before"] = sampler_at(args.before)
    runs = []
    with progress_bar(console) as progress:
        task = progress.add_task("decoding", total=len(SETTINGS) * len(args.rows) * len(samplers) * args.repeats)
        for temperature, top_p in SETTINGS:
            cfg = SamplingConfig(temperature=temperature, top_p=top_p)
            for rows in args.rows:
                run = {"temperature": temperature, "top_p": top_p, "rows": rows}
                for name, pick in samplers.items():
                    best = None
                    for _ in range(args.repeats):
                        got = decode(model, tok, prompts[:rows], args.new_tokens, cfg, pick)
                        best = got if best is None or got["seconds"] < best["seconds"] else best
                        progress.advance(task)
                    run[name] = best
                run["sampler_speedup"] = run["transformers"]["sampler_ms_per_step"] / run["sead"]["sampler_ms_per_step"]
                run["decode_speedup"] = run["transformers"]["seconds"] / run["sead"]["seconds"]
                if args.before:
                    before = run["before"]["sampler_ms_per_step"]
                    run["over_before"] = {
                        "sampler": before / run["sead"]["sampler_ms_per_step"],
                        "decode": run["before"]["seconds"] / run["sead"]["seconds"],
                    }
                runs.append(run)
    result = {"cpu": info, "torch": torch.__version__, "model": label, "dtype": str(next(model.parameters()).dtype)}
    result |= {"new_tokens": args.new_tokens, "before": args.before, "runs": runs}
    args.out.write_text(json.dumps(result, indent=1))
    table = Table(title=f"the sampler per decoding step, {label} ({result['dtype']})")
    columns = ["temperature / top-p", "rows", "SEAD ms", "transformers ms", "sampler x", "whole call x"]
    columns += [f"{args.before} ms", "sampler x", "whole call x"] if args.before else []
    for col in columns:
        table.add_column(col, justify="right")
    for r in runs:
        cells = [f"{r['temperature']} / {r['top_p']}", str(r["rows"]), f"{r['sead']['sampler_ms_per_step']:.2f}"]
        cells += [f"{r['transformers']['sampler_ms_per_step']:.2f}", f"{r['sampler_speedup']:.1f}"]
        cells += [f"{r['decode_speedup']:.2f}"]
        if args.before:
            cells += [f"{r['before']['sampler_ms_per_step']:.2f}", f"{r['over_before']['sampler']:.1f}"]
            cells += [f"{r['over_before']['decode']:.2f}"]
        table.add_row(*cells)
    console.print(table)
    plot(result, args.out.with_suffix(".png"))
    console.print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return result


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SETTINGS), figsize=(4 * len(SETTINGS), 3.4), sharey=True)
    for ax, (temperature, top_p) in zip(axes, SETTINGS):
        runs = [r for r in result["runs"] if r["temperature"] == temperature]
        for name, marker in (("sead", "o-"), ("transformers", "s--"), ("before", "^:")):
            if name not in runs[0]:
                continue
            label = f"before ({result['before']})" if name == "before" else name
            ax.plot([r["rows"] for r in runs], [r[name]["sampler_ms_per_step"] for r in runs], marker, label=label)
        ax.set(xscale="log", yscale="log", xlabel="rows", title=f"T {temperature}, top-p {top_p}")
    axes[0].set_ylabel("sampler ms per decoding step")
    axes[0].legend()
    fig.suptitle(f"{result['model']} on {cpu_line(result['cpu'])}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
