"""Prefill of many rows in one `HFPolicy.sample` call: what a branched step's first turn costs, side by side in one
run, each case in a fresh process (so that its peak memory is its own).

- `distinct`: ROWS different prompts of the same length (every row's tokens go through the model);
- `alike`: ROWS / GROUP distinct prompts, GROUP rows each (a branched group's members: one pass per prompt);
- `cascade`: `distinct` with prompt attention as matmuls that hold fp32 scores a slice of rows at a time
  (`attention.TILED_PREFILL` off: how it was before the tiled CPU kernel);
- `all_scores`: `cascade` with `attention.SCORE_BUDGET` lifted, so attention holds every row's scores at once
  (how it was before the slices).

    .venv/bin/python benchmarks/prefill_rows.py [--rows 32] [--group 4] [--words 480] [--out FILE.json]

Prints the CPU it ran on; seconds and peak resident memory per case, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

CASES = ("distinct", "alike", "cascade", "all_scores")


def one_case(case: str, rows: int, group: int, words: int, model_path: str | None = None) -> dict:
    import torch

    from sead.dialogue.agent import AgentRequest
    from sead.models import attention
    from sead.models.loading import ModelConfig, load_model
    from sead.policy.hf import HFPolicy
    from sead.policy.settings import SamplingConfig

    cfg = ModelConfig(preset="path", path=model_path) if model_path else ModelConfig(preset="smollm2")
    model, tok, _ = load_model(cfg)
    sop = (Path(__file__).resolve().parents[1] / "configs/format_prompt/call_chatbot_compact.txt").read_text()

    def prompt(i: int) -> list[int]:
        user = f"Customer {i:03d}: " + "tell me about the credit and the fees, " * (words // 8)
        msgs = [{"role": "system", "content": sop}, {"role": "user", "content": user}]
        return list(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)["input_ids"])

    prompts = [prompt(i // group if case == "alike" else i) for i in range(rows)]
    if case in ("cascade", "all_scores"):
        attention.TILED_PREFILL = False
    if case == "all_scores":
        attention.SCORE_BUDGET = 2**62
    policy = HFPolicy(model, tok, SamplingConfig(temperature=1.0, top_p=1.0), max_batch=rows, turn_cache_mb=0)
    policy.sample([AgentRequest(p, [], 1, seed=i) for i, p in enumerate(prompts[:2])])  # the shared SOP prefix
    prompt_rows = []  # rows of each forward that runs prompt tokens (more than one position)
    model.register_forward_pre_hook(
        lambda m, a, kw: prompt_rows.append(kw["input_ids"].shape[0]) if kw["input_ids"].shape[1] > 1 else None,
        with_kwargs=True,
    )
    before = rss_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # peak RSS starts again from here (Linux), not from loading
    t0 = time.perf_counter()
    policy.sample([AgentRequest(p, [], 1, seed=i) for i, p in enumerate(prompts)])
    seconds = time.perf_counter() - t0
    peak = rss_kb("VmHWM")
    return {
        "seconds": seconds,
        "peak_rss_gb": peak / 2**20,
        "peak_rise_gb": (peak - before) / 2**20,
        "new_tokens_per_row": len(prompts[0]) - len(policy._prefix[1]),
        "prompt_rows_run": prompt_rows[-1],
        "threads": torch.get_num_threads(),
        "tiled_prefill": attention.TILED_PREFILL,
        "score_budget_lifted": attention.SCORE_BUDGET >= 2**62,
    }


def rss_kb(field: str) -> int:
    """This process's resident memory (VmRSS) or its peak since the last reset (VmHWM), in kB."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--group", type=int, default=4, help="rows per prompt in the `alike` case")
    ap.add_argument("--words", type=int, default=480, help="words of the user turn after the SOP prompt")
    ap.add_argument("--model", help="a local HF model folder (default: the packaged SmolLM2-135M)")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("prefill_rows.json"))
    ap.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)  # one case, in a child process
    args = ap.parse_args(argv)
    if args.case:
        print(json.dumps(one_case(args.case, args.rows, args.group, args.words, args.model)))
        return
    from rich.console import Console
    from rich.progress import track

    console = Console()
    from sead.models.precision import cpu_info, cpu_line

    info = cpu_info()
    console.print(f"CPU: {cpu_line(info)}; {args.rows} rows, {args.group} per prompt in `alike`")
    results = {}
    for case in track(CASES, description="cases (one process each)", console=console):
        cmd = [sys.executable, __file__, "--case", case, f"--rows={args.rows}", f"--group={args.group}"]
        cmd += [f"--words={args.words}", *(["--model", args.model] if args.model else [])]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results[case] = json.loads(out.stdout.strip().splitlines()[-1])
        r = results[case]
        console.print(
            f"{case:>10}: {r['seconds']:.1f} s, peak RSS {r['peak_rss_gb']:.2f} GB (+{r['peak_rise_gb']:.2f})"
        )
    d, a, c, s = (results[c] for c in CASES)

    def rise(r: dict) -> float:
        return max(r["peak_rise_gb"], 1e-9)

    ratios = {
        "distinct_over_alike_seconds": d["seconds"] / a["seconds"],
        "cascade_over_tiled_seconds": c["seconds"] / d["seconds"],
        "cascade_over_tiled_peak_rise": rise(c) / rise(d),
        "all_scores_over_sliced_peak_rise": rise(s) / rise(c),
        "all_scores_over_sliced_seconds": s["seconds"] / c["seconds"],
    }
    for k, v in ratios.items():
        console.print(f"{k}: {v:.2f}x")
    record = {"cpu": info, "rows": args.rows, "group": args.group, "cases": results, "ratios": ratios}
    args.out.write_text(json.dumps(record, indent=1))
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
