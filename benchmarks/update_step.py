"""What skipping the separate old-log-prob pass saves in one GRPO update (issue 17, section 4).

With one PPO epoch and no value head the policy that sampled is the one being trained, so `Updater` takes the
old log-probs from the training forward itself (detached) instead of running every micro-batch through the
model once more before the update. This times `Updater.step` on the same sequences both ways, side by side in
one run, in the precision the trainer would choose on this machine (`model.dtype=auto`: fp32 master weights,
bf16 autocast where the CPU has native bf16), and checks that both ways end at the same weights.

    .venv/bin/python benchmarks/update_step.py [--sequences 10] [--repeats 2] [--model smollm2|/hf/folder]
"""

from __future__ import annotations

import argparse
import copy
import json
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
REPLY = "<response>Sure, let me help you claim the credit.</response><stage>1</stage><status>0</status>"


class WithOldPass(Updater):
    """The update as it was: old log-probs from a separate forward before the training one."""

    @property
    def _needs_old_pass(self) -> bool:
        return True


def sequences(tok, n: int) -> list[Sequence]:
    """GRPO-shaped segments: the SOP prompt, a user turn, the agent's tagged reply (the trained tokens); half
    the rows with advantage +1, half -1, so the update moves the weights."""
    sop = build_scenario(load_config([])).agent_system_prompt()
    reply = tok(REPLY, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    seqs = []
    for i in range(n):
        chat = [{"role": "system", "content": sop}, {"role": "user", "content": f"Who is this? (call {i})"}]
        prompt = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
        mask = torch.zeros(len(prompt) + len(reply), dtype=torch.long)
        mask[len(prompt) :] = 1
        seqs.append(Sequence(torch.tensor(list(prompt) + reply), mask, 1.0 if i % 2 else -1.0, episode=i))
    return seqs


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="'smollm2' (the packaged model) or a local HF folder")
    ap.add_argument("--sequences", type=int, default=10, help="segments per update (the recipe: 2 x 5 rollouts)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("update_step.json"))
    args = ap.parse_args(argv)
    preset = {"preset": "smollm2"} if args.model == "smollm2" else {"preset": "path", "path": args.model}
    cfg = ModelConfig(**preset)
    precision = Precision.for_training(cfg.dtype, cfg.device)
    master, tok, _ = load_model(cfg, precision.master)
    update = UpdateConfig(kl_coef=0.0, micro_batch=4, lr=1e-5, warmup_steps=1)
    console.print(f"CPU: {cpu_info()['model']}; precision: {precision.describe()}")
    seqs = sequences(tok, args.sequences)
    results, weights = {}, {}
    for name, cls in (("old_pass", WithOldPass), ("skipped", Updater)):
        best = float("inf")
        for _ in range(args.repeats):  # each repeat from the same weights and optimiser state
            model = copy.deepcopy(master)
            updater = cls(model, None, update, temperature=1.0, autocast=precision.autocast)
            best = min(best, timed(lambda u=updater: u.step(copy.deepcopy(seqs)), 1))
        results[name] = best
        weights[name] = torch.cat([p.detach().flatten() for p in model.parameters()])
        console.print(f"{name}: {best:.2f} s per update")
    diff = float((weights["old_pass"] - weights["skipped"]).abs().max())
    before = torch.cat([p.detach().flatten() for p in master.parameters()])
    moved = float((weights["skipped"] - before).abs().max())  # the update did change the weights
    out = {
        "precision": precision.record(),  # with the CPU it ran on
        "sequences": args.sequences,
        "tokens": sum(len(s.ids) for s in seqs),
        "seconds": results,
        "speedup": results["old_pass"] / results["skipped"],
        "max_weight_difference": diff,
        "max_weight_change": moved,
    }
    console.print(
        f"[bold]skipping the old-log-prob pass: {out['speedup']:.2f}x[/] ({results['old_pass']:.2f} s -> "
        f"{results['skipped']:.2f} s per update of {args.sequences} sequences, {out['tokens']} tokens); "
        f"largest weight difference between the two ways: {diff:.2e}"
    )
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
