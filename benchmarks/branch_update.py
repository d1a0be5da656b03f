"""One GRPO update of branched groups (issue 17 / 18): micro-batches by group against micro-batches by length.

A branched group's members replay one dialogue prefix and differ only in the turn after the cut, so most of
each row is a context they share. `Updater` now keeps a group's members in one micro-batch where that pays
(`sead.trainer.update.micro_batches`), and `masked_logprobs` runs the shared context once for them, with its
gradient. Before, micro-batches were cut from the sequences sorted by length, so members met only by chance and
each row ran its whole context again. This times `Updater.step` on the same sequences both ways, side by side in
one run, in the precision the trainer picks on this machine, and compares the two updates' gradients (the same
up to rounding: only the work differs).

    .venv/bin/python benchmarks/branch_update.py [--groups 4] [--size 8] [--repeats 1] [--model smollm2|/hf/folder]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
from pathlib import Path

import torch
from rich.console import Console

from sead.config import build_scenario, load_config
from sead.models.loading import ModelConfig, load_model
from sead.models.precision import Precision, cpu_info
from sead.timing import timed
from sead.trainer.estimators import Sequence
from sead.trainer.schema import UpdateConfig
from sead.trainer.update import Updater

console = Console()


class ByLength(Updater):
    """The update as it was batched: the sequences sorted by length, cut every `micro_batch`."""

    def _batches(self, seqs: list[Sequence]) -> list[list[Sequence]]:
        order = sorted(seqs, key=lambda s: len(s.ids))
        return [order[i : i + self.cfg.micro_batch] for i in range(0, len(order), self.cfg.micro_batch)]


def branched_groups(tok, groups: int, size: int, seed: int = 0) -> list[Sequence]:
    """`groups` groups of `size` one-turn continuations: the SOP prompt in the chat template, a dialogue prefix of
    300-1,100 tokens (a cut after a few turns), then each member's own reply of 40-144 tokens (the trained part);
    advantages of both signs, so the update moves the weights. Token values do not change the work."""
    rng = random.Random(seed)
    sop = build_scenario(load_config([])).agent_system_prompt()
    opening = tok.apply_chat_template(
        [{"role": "system", "content": sop}, {"role": "user", "content": "Hello?"}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    seqs = []
    for g in range(groups):
        context = list(opening) + [rng.randrange(100, 40_000) for _ in range(rng.randint(300, 1_100))]
        for m in range(size):
            reply = [rng.randrange(100, 40_000) for _ in range(rng.randint(40, 144))]
            mask = torch.zeros(len(context) + len(reply), dtype=torch.long)
            mask[len(context) :] = 1
            seqs.append(Sequence(torch.tensor(context + reply), mask, 1.0 if m % 2 else -1.0, episode=g * size + m))
    return seqs


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="'smollm2' (the packaged model) or a local HF folder")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--size", type=int, default=8, help="continuations per group")
    ap.add_argument("--micro-batch", type=int, default=4, help="as the learning-curve recipe")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("branch_update.json"))
    args = ap.parse_args(argv)
    preset = {"preset": "smollm2"} if args.model == "smollm2" else {"preset": "path", "path": args.model}
    cfg = ModelConfig(**preset)
    precision = Precision.for_training(cfg.dtype, cfg.device)
    master, tok, _ = load_model(cfg, precision.master)
    update = UpdateConfig(kl_coef=0.0, micro_batch=args.micro_batch, lr=1e-5, warmup_steps=1)
    console.print(f"CPU: {cpu_info()['model']}; precision: {precision.describe()}")
    seqs = branched_groups(tok, args.groups, args.size)
    results, grads = {}, {}
    for name, cls in (("by_length", ByLength), ("by_group", Updater)):
        best = float("inf")
        for _ in range(args.repeats):  # each repeat from the same weights and optimiser state
            model = copy.deepcopy(master)
            updater = cls(model, None, update, temperature=1.0, autocast=precision.autocast)
            best = min(best, timed(lambda u=updater: u.step(copy.deepcopy(seqs)), 1))
        results[name] = best
        grads[name] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        console.print(f"{name}: {best:.2f} s per update")
    gap = float((grads["by_length"] - grads["by_group"]).norm() / grads["by_length"].norm())
    out = {
        "precision": precision.record(),  # with the CPU it ran on
        "groups": args.groups,
        "size": args.size,
        "micro_batch": args.micro_batch,
        "tokens": sum(len(s.ids) for s in seqs),
        "trained_tokens": int(sum(int(s.mask.sum()) for s in seqs)),
        "seconds": results,
        "speedup": results["by_length"] / results["by_group"],
        "gradient_norm": float(grads["by_group"].norm()),
        "gradient_relative_difference": gap,  # |g_length - g_group| / |g_length|
    }
    console.print(
        f"[bold]micro-batches by group: {out['speedup']:.2f}x[/] ({results['by_length']:.2f} s -> "
        f"{results['by_group']:.2f} s per update of {len(seqs)} sequences, {out['tokens']} tokens); gradients "
        f"differ by {gap:.1e} of their norm"
    )
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
