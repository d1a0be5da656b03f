"""What choices in one GRPO update save, each timed both ways side by side in one run,
in the precision the trainer would choose on this machine (`model.dtype=auto`: fp32 master weights, bf16 autocast
where the CPU has native bf16), on the same sequences and from the same weights:

- `--case old_pass` (default): with one PPO epoch and no value head the policy that sampled is the one being
  trained, so `Updater` takes the old log-probs from the training forward itself (detached) instead of running
  every micro-batch through the model once more. Both ways end at the same weights (checked).
- `--case branched`: a branched group's members replay one dialogue prefix and differ only in the turn after the
  cut. `Updater` keeps them in one micro-batch where that pays (`sead.trainer.batching.micro_batches`), so the shared
  context runs once for them; before, micro-batches were cut from the sequences sorted by length and each row ran
  its whole context again. Both ways give the same gradient up to rounding (compared; Adam's first step turns any
  rounding difference in a gradient's sign into a full-size weight difference, so weights are not compared).
- `--case entropy`: at `entropy_coef` 0 (the learning-curve recipe) the entropies are only logged. `Updater`
  computes them as values; before, they kept their autograd graph (a log-softmax product over the vocabulary for
  every agent token) and entered the loss times zero, so the backward pass walked it too. On branched groups, as
  `--case branched`. Both ways end at the same weights (checked).
- `--case head`: the chosen tokens' log-probs and entropies through the LM head (`sead.trainer.token_logprobs`:
  the vocabulary-wide work a slice of rows at a time, the logits' gradient written over them) against the plain
  way (the full logits cast to fp32, divided by the temperature, log-softmax, gather, and each of their
  gradients, tokens x vocabulary each). On branched groups, as `--case branched`. The same gradient up to
  rounding (compared).
- `--case attention`: training forwards with the sequences packed into one row and their attention through SEAD's
  compiled causal kernel (`sead.models.training_attention`: no mask, no padding, the keys above the diagonal
  skipped) against padded rows and torch's CPU flash kernel given the mask, on whole dialogues (`--sequences` of
  them: the SOP prompt, then 4-8 turns, the agent's trained). The same gradient up to bf16 rounding (compared).
  Where the kernel cannot run (no AVX512-BF16, fp32), both ways are torch's.

Each way's page faults and system CPU time during its fastest update are recorded beside its seconds.

    .venv/bin/python benchmarks/update_step.py [--case old_pass|branched|entropy|head|attention] [--sequences 10]
        [--groups 4 --size 8] [--repeats 2] [--model smollm2|/hf/folder]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import resource
from pathlib import Path

import torch
from rich.console import Console

from sead.config import build_scenario, load_config
from sead.models import training_attention
from sead.models.loading import ModelConfig, load_model
from sead.models.precision import Precision, cpu_info
from sead.timing import timed
from sead.trainer import scoring
from sead.trainer.estimators import Sequence
from sead.trainer.schema import UpdateConfig
from sead.trainer.token_logprobs import full_logits
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


class ByLength(Updater):
    """Micro-batches as they were cut before: the sequences sorted by length, every `micro_batch`."""

    def _batches(self, seqs: list[Sequence]) -> list[list[Sequence]]:
        order = sorted(seqs, key=lambda s: len(s.ids))
        return [order[i : i + self.cfg.micro_batch] for i in range(0, len(order), self.cfg.micro_batch)]


def sop_opening(tok) -> list[int]:
    """The SOP prompt and a first user message in the chat template, up to the agent's turn."""
    sop = build_scenario(load_config([])).agent_system_prompt()
    chat = [{"role": "system", "content": sop}, {"role": "user", "content": "Hello?"}]
    return list(tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False))


def branched_groups(tok, groups: int, size: int, seed: int = 0) -> list[Sequence]:
    """`groups` groups of `size` one-turn continuations: the SOP prompt in the chat template, a dialogue prefix of
    300-1,100 tokens (a cut after a few turns), then each member's own reply of 40-144 tokens (the trained part);
    advantages of both signs. Token values do not change the work."""
    rng, opening = random.Random(seed), sop_opening(tok)
    seqs = []
    for g in range(groups):
        context = opening + [rng.randrange(100, 40_000) for _ in range(rng.randint(300, 1_100))]
        for m in range(size):
            reply = [rng.randrange(100, 40_000) for _ in range(rng.randint(40, 144))]
            mask = torch.zeros(len(context) + len(reply), dtype=torch.long)
            mask[len(context) :] = 1
            seqs.append(Sequence(torch.tensor(context + reply), mask, 1.0 if m % 2 else -1.0, episode=g * size + m))
    return seqs


class EntropyInGraph(Updater):
    """The update as it was at entropy_coef 0: the entropies' graph kept, and the term in the loss times zero."""

    @property
    def _entropy_bonus(self) -> bool:
        return True


class FullLogits(Updater):
    """The update with the plain way through the LM head (as `masked_logprobs` ran it before `token_logprobs`)."""

    def step(self, seqs):
        sliced, scoring.token_logprobs = scoring.token_logprobs, full_logits
        try:
            return super().step(seqs)
        finally:
            scoring.token_logprobs = sliced


def dialogues(tok, n: int, turns: int = 8, seed: int = 0) -> list[Sequence]:
    """`n` whole dialogues as GRPO trains them: the SOP prompt in the chat template, then `turns` turns of a user
    (30-80 tokens) and the agent (40-144 tokens, trained); advantages of both signs. Token values do not change the
    work."""
    rng, opening = random.Random(seed), sop_opening(tok)
    seqs = []
    for i in range(n):
        ids, mask = list(opening), [0] * len(opening)
        for _ in range(rng.randint(turns // 2, turns)):
            reply = [rng.randrange(100, 40_000) for _ in range(rng.randint(40, 144))]
            user = [rng.randrange(100, 40_000) for _ in range(rng.randint(30, 80))]
            ids += reply + user
            mask += [1] * len(reply) + [0] * len(user)
        seqs.append(Sequence(torch.tensor(ids), torch.tensor(mask), 1.0 if i % 2 else -1.0, episode=i))
    return seqs


class TorchAttention(Updater):
    """The update with torch's CPU flash kernel and the mask for the attention of its forwards."""

    def step(self, seqs):
        kept, training_attention.ENABLED = training_attention.ENABLED, False
        try:
            return super().step(seqs)
        finally:
            training_attention.ENABLED = kept


# case: (the way before, the way now, what "now" is called in the summary)
CASES = {
    "old_pass": (("old_pass", WithOldPass), ("skipped", Updater), "skipping the old-log-prob pass"),
    "branched": (("by_length", ByLength), ("by_group", Updater), "micro-batches by branched group"),
    "entropy": (("in_graph", EntropyInGraph), ("values_only", Updater), "entropies as logged values"),
    "head": (("full_logits", FullLogits), ("sliced", Updater), "the LM head's log-probs a slice at a time"),
    "attention": (("torch_flash", TorchAttention), ("kernel", Updater), "the compiled training attention"),
}


def flat(model, what: str) -> torch.Tensor:
    return torch.cat([getattr(p, what).detach().flatten() for p in model.parameters() if p.requires_grad])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=CASES, default="old_pass")
    ap.add_argument("--model", default="smollm2", help="'smollm2' (the packaged model) or a local HF folder")
    ap.add_argument(
        "--sequences", type=int, default=10, help="old_pass: segments per update (2 x 5 rollouts); attention: dialogues"
    )
    ap.add_argument("--groups", type=int, default=4, help="branched, entropy: groups per update")
    ap.add_argument("--size", type=int, default=8, help="branched, entropy: continuations per group")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, help="default: update_step.json (old_pass), else update_step_CASE.json")
    args = ap.parse_args(argv)
    out_path = args.out or Path(__file__).with_name(
        "update_step.json" if args.case == "old_pass" else f"update_step_{args.case}.json"
    )
    preset = {"preset": "smollm2"} if args.model == "smollm2" else {"preset": "path", "path": args.model}
    cfg = ModelConfig(**preset)
    precision = Precision.for_training(cfg.dtype, cfg.device)
    master, tok, _ = load_model(cfg, precision.master)
    update = UpdateConfig(kl_coef=0.0, micro_batch=4, lr=1e-5, warmup_steps=1)
    console.print(f"CPU: {cpu_info()['model']}; precision: {precision.describe()}")
    if args.case == "old_pass":
        seqs = sequences(tok, args.sequences)
    elif args.case == "attention":
        seqs = dialogues(tok, args.sequences)
    else:
        seqs = branched_groups(tok, args.groups, args.size)
    *ways, summary = CASES[args.case]
    seconds, weights, grads = {}, {}, {}
    faults, system = {}, {}
    for name, cls in ways:
        best = float("inf")
        for _ in range(args.repeats):  # each repeat from the same weights and optimiser state
            model = copy.deepcopy(master)
            updater = cls(model, None, update, temperature=1.0, forward_context=precision.autocast)
            stepped = {}  # the gradient the optimiser steps on (the update lets it go after the step)
            updater.opt.register_step_pre_hook(lambda *_, m=model, g=stepped: g.update(grad=flat(m, "grad")))
            before = resource.getrusage(resource.RUSAGE_SELF)
            took = timed(lambda u=updater: u.step(copy.deepcopy(seqs)), 1)
            after = resource.getrusage(resource.RUSAGE_SELF)
            if took < best:
                best, faults[name] = took, after.ru_minflt - before.ru_minflt
                system[name] = after.ru_stime - before.ru_stime
        seconds[name] = best
        weights[name], grads[name] = flat(model, "data"), stepped["grad"]
        console.print(f"{name}: {best:.2f} s per update, {faults[name]:,} page faults, {system[name]:.2f} s system CPU")
    (before, _), (now, _) = ways
    gap = float((grads[before] - grads[now]).norm() / grads[before].norm())
    out = {
        "case": args.case,
        "precision": precision.record(),  # with the CPU it ran on
        "sequences": len(seqs),
        "tokens": sum(len(s.ids) for s in seqs),
        "trained_tokens": int(sum(int(s.mask.sum()) for s in seqs)),
        "seconds": seconds,
        "speedup": seconds[before] / seconds[now],
        "page_faults": faults,
        "system_cpu_s": system,
        "max_weight_difference": float((weights[before] - weights[now]).abs().max()),
        "max_weight_change": float((weights[now] - flat(master, "data")).abs().max()),  # the update moved them
        "gradient_relative_difference": gap,  # |g_before - g_now| / |g_before|
    }
    console.print(
        f"[bold]{summary}: {out['speedup']:.2f}x[/] ({seconds[before]:.2f} s -> {seconds[now]:.2f} s per update of "
        f"{len(seqs)} sequences, {out['tokens']} tokens); the two ways' gradients differ by {gap:.1e} of their norm, "
        f"their weights by at most {out['max_weight_difference']:.1e}"
    )
    out_path.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
