"""One evaluation pass of a model with SEAD's sampling fast paths turned off in turn, side by side in one run.

`sead eval MODEL` as a user runs it (the CPU preset: the first 16 test profiles, up to 8 turns of 144 tokens,
bf16 where the CPU has native bf16), in these arms, interleaved (AB AB) so that drift in the machine's speed
falls on every arm alike:
- `fast`: as shipped;
- `no_packing`: linear layers through plain `F.linear` instead of oneDNN-packed weights
  (`sead.models.packed_linear`; bit-equal in bf16).
An arm whose batches differ from `fast`'s may play other dialogues (which rows share a batch decides the last
bits of bf16 arithmetic, and greedy decoding amplifies them), so each pass reports its agent tokens, its tok/s
and the share of its dialogues identical (token ids and log-probs) to the `fast` arm's first pass.

    .venv/bin/python benchmarks/eval_pass.py RUN/warmup/model [--repeats 2] [key=value ...]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch
from rich.console import Console

from sead.cli.eval_commands import eval_cmd
from sead.config import load_config
from sead.dialogue.rollout_log import read_rollouts
from sead.models.packed_linear import PackedLinears
from sead.models.precision import cpu_info

console = Console()
ARMS = {
    "fast": contextlib.nullcontext,
    "no_packing": lambda: mock.patch.object(PackedLinears, "enabled", property(lambda self: False)),
}


def token_segments(folder: Path) -> dict[str, list]:
    """Every dialogue's token segments (ids, training mask, sampled log-probs), by episode id."""
    return {rec["meta"]["episode_id"]: rec["segments"] for rec in read_rollouts(folder / "dialogues.jsonl")}


def one_pass(model: str, arm: str, out_dir: Path, overrides: list[str]) -> tuple[float, dict]:
    cfg = load_config(["preset=cpu", f"eval.out_dir={out_dir}", "eval.fresh=true", *overrides])
    t0 = time.perf_counter()
    with ARMS[arm]():
        eval_cmd(cfg, [model])
    seconds = time.perf_counter() - t0
    (folder,) = [p for p in out_dir.iterdir() if (p / "dialogues.jsonl").exists()]
    return seconds, token_segments(folder)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="an HF model folder (a warm-up's or a checkpoint's model/)")
    ap.add_argument("overrides", nargs="*", help="config overrides for `sead eval` (e.g. eval.limit=8)")
    ap.add_argument("--repeats", type=int, default=2, help="passes per arm, interleaved")
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS), help="fast is always run")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("eval_pass.json"))
    args = ap.parse_args(argv)
    cpu = cpu_info()
    console.print(f"[bold]CPU:[/] {cpu['model']} ({cpu['family_model']}), {torch.get_num_threads()} threads")
    arms = ["fast", *(a for a in args.arms if a != "fast")]
    times: dict[str, list[float]] = {a: [] for a in arms}
    tokens: dict[str, list[int]] = {a: [] for a in arms}
    same: dict[str, list[float]] = {a: [] for a in arms}
    reference = None
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for arm in arms:
                seconds, dialogues = one_pass(args.model, arm, Path(tmp) / f"{arm}{r}", args.overrides)
                reference = reference or dialogues
                times[arm].append(seconds)
                tokens[arm].append(sum(sum(seg["mask"]) for segs in dialogues.values() for seg in segs))
                same[arm].append(sum(dialogues.get(k) == v for k, v in reference.items()) / len(reference))
                console.print(
                    f"pass {r + 1}, {arm}: {seconds:.1f} s, {tokens[arm][-1]} agent tokens "
                    f"({tokens[arm][-1] / seconds:.1f}/s), {same[arm][-1]:.0%} of dialogues as fast's first"
                )
    best = {a: min(t) for a, t in times.items()}
    rate = {a: max(n / s for n, s in zip(tokens[a], times[a])) for a in arms}
    result = {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "model": args.model,
        "overrides": args.overrides,
        "dialogues": len(reference),
        "agent_tokens": tokens,
        "seconds": times,
        "best_s": best,
        "best_agent_tok_s": rate,
        "fast_speedup_over": {a: best[a] / best["fast"] for a in arms if a != "fast"},
        "fast_tok_s_over": {a: rate["fast"] / rate[a] for a in arms if a != "fast"},
        "share_identical_to_fast": same,
    }
    for arm, x in result["fast_speedup_over"].items():
        console.print(
            f"[bold]fast vs {arm}: {best['fast']:.1f} s vs {best[arm]:.1f} s (best of {args.repeats}): {x:.2f}x"
        )
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
