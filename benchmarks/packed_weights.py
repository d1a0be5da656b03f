"""One evaluation pass of a model, with and without oneDNN-packed weights, side by side in one run.

`sead eval MODEL` as a user runs it (the CPU preset: the first 16 test profiles, up to 8 turns of 144 tokens,
bf16 where the CPU has native bf16), alternately with packing (`sead.models.packed_linear`) and with plain
`F.linear`, ABAB so that drift in the machine's speed falls on both arms. Both arms must play the same dialogues
token for token and log-probs (packing is bit-equal in bf16); the script stops with an error if they do not.

    .venv/bin/python benchmarks/packed_weights.py RUN/warmup/model [--repeats 2] [key=value ...]
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
from sead.models.packed_linear import PackedLinears
from sead.models.precision import cpu_info

console = Console()
ARMS = ("packed", "plain")


def token_segments(folder: Path) -> dict[str, list]:
    """Every dialogue's token segments (ids, training mask, sampled log-probs), by episode id."""
    out = {}
    for line in (folder / "dialogues.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out[rec["meta"]["episode_id"]] = rec["segments"]
    return out


def one_pass(model: str, arm: str, out_dir: Path, overrides: list[str]) -> tuple[float, dict]:
    cfg = load_config(["preset=cpu", f"eval.out_dir={out_dir}", "eval.fresh=true", *overrides])
    off = mock.patch.object(PackedLinears, "enabled", property(lambda self: False))
    t0 = time.perf_counter()
    with off if arm == "plain" else contextlib.nullcontext():
        eval_cmd(cfg, [model])
    seconds = time.perf_counter() - t0
    (folder,) = [p for p in out_dir.iterdir() if (p / "dialogues.jsonl").exists()]
    return seconds, token_segments(folder)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="an HF model folder (a warm-up's or a checkpoint's model/)")
    ap.add_argument("overrides", nargs="*", help="config overrides for `sead eval` (e.g. eval.limit=8)")
    ap.add_argument("--repeats", type=int, default=2, help="passes per arm, interleaved")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("packed_weights.json"))
    args = ap.parse_args(argv)
    cpu = cpu_info()
    console.print(f"[bold]CPU:[/] {cpu['model']} ({cpu['family_model']}), {torch.get_num_threads()} threads")
    times: dict[str, list[float]] = {a: [] for a in ARMS}
    dialogues = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for arm in ARMS:
                seconds, turns = one_pass(args.model, arm, Path(tmp) / f"{arm}{r}", args.overrides)
                times[arm].append(seconds)
                if dialogues and turns != dialogues:
                    raise SystemExit(f"{arm} pass {r + 1} played other tokens or log-probs than the first pass")
                dialogues = turns
                console.print(f"pass {r + 1}, {arm}: {seconds:.1f} s")
    best = {a: min(t) for a, t in times.items()}
    result = {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "model": args.model,
        "overrides": args.overrides,
        "dialogues": len(dialogues),
        "agent_tokens": sum(sum(seg["mask"]) for segs in dialogues.values() for seg in segs),
        "seconds": times,
        "best_s": best,
        "speedup": best["plain"] / best["packed"],
        "same_dialogues": True,
    }
    console.print(
        f"[bold]{len(dialogues)} dialogues, {result['agent_tokens']} agent tokens, the same in every pass: "
        f"packed {best['packed']:.1f} s, plain {best['plain']:.1f} s (best of {args.repeats}): "
        f"{result['speedup']:.2f}x[/]"
    )
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
