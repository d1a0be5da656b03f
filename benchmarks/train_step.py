"""Speed of the embedded trainer's two hot paths on SmolLM2-135M, each against its naive version on the same batch:

1. generation: sampling with the shared SOP-prompt KV cache vs plain left-padded batched sampling (tokens/s);
   and over whole dialogues (each turn's prompt extends the last), keeping each dialogue's KV between turns vs
   running its whole history again every turn; and one decoding step over a 600-token cache of `--decode-rows`
   rows, with the preallocated KV cache (BatchCache) vs transformers' DynamicCache (which copies the cache every step);
2. training forward + backward of the agent tokens' log-probs, three ways: the naive full-vocabulary logits
   of every position; the LM head only where agent tokens are predicted; and that plus the shared SOP prompt
   run once, its KV cache serving every row (with its gradient, as the trainer does).

    .venv/bin/python benchmarks/train_step.py [--rows 4] [--new-tokens 32] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json

import torch
from transformers import DynamicCache

from sead.config import build_scenario, load_config
from sead.dialogue import AgentRequest
from sead.models.loading import ModelConfig, load_model
from sead.policy.hf import HFPolicy, prompt_mask
from sead.policy.settings import SamplingConfig
from sead.policy.turn_cache import BatchCache
from sead.timing import timed
from sead.trainer.estimators import Sequence
from sead.trainer.scoring import masked_logprobs


def dialogues(model, tok, prompts, args, turn_cache_mb: float) -> None:
    """Greedy dialogues as the runner builds them: every turn's prompt is the last one plus the reply and a
    ~30-token user turn in the chat template. Both settings give the same tokens (tests/test_policy_sampling.py)."""
    policy = HFPolicy(model, tok, SamplingConfig(temperature=0.0), turn_cache_mb=turn_cache_mb)
    prompts = list(prompts)
    for _t in range(args.turns):
        outs = policy.sample([AgentRequest(p, [], args.new_tokens, seed=i) for i, p in enumerate(prompts)])
        user = (
            "<|im_start|>user\n<response>Hm. Okay, and what does it cost me, exactly? Tell me.</response>"
            "<|im_end|>\n<|im_start|>assistant\n"
        )
        prompts = [p + o.token_ids + tok(user, add_special_tokens=False)["input_ids"] for p, o in zip(prompts, outs)]


@torch.no_grad()
def decode_step(model, rows: int, batch_cache: bool) -> float:
    """Best of 4 single-token steps after a 600-token prefill of `rows` rows: transformers' DynamicCache (copies
    the cache to grow it) or SEAD's preallocated BatchCache (with the 4-D mask it needs)."""
    torch.manual_seed(0)
    cache, mask = DynamicCache(), None
    if batch_cache:
        cache, mask = BatchCache(capacity=600 + 4), torch.zeros((rows, 1, 1, 604), dtype=torch.bool)
        mask[..., :600] = True
    prefill_mask = prompt_mask(mask[:, 0, 0], 0, 600) if batch_cache else None
    ids = torch.randint(100, 20000, (rows, 600))
    model(input_ids=ids, attention_mask=prefill_mask, past_key_values=cache, use_cache=True, logits_to_keep=1)
    step = torch.randint(100, 2000, (rows, 1))
    best = float("inf")
    for k in range(4):  # each step one position further, in both caches
        if batch_cache:
            mask[..., 600 + k] = True
        best = min(best, timed(lambda: model(input_ids=step, attention_mask=mask, past_key_values=cache), 1))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--turns", type=int, default=6, help="turns per dialogue in the multi-turn generation test")
    ap.add_argument("--decode-rows", type=int, default=32)
    args = ap.parse_args()
    torch.manual_seed(0)
    model, tok, _ = load_model(ModelConfig(preset="smollm2"))
    sop = build_scenario(load_config([])).agent_system_prompt()
    system = tok.apply_chat_template([{"role": "system", "content": sop}], tokenize=False, add_generation_prompt=True)
    base = tok(system, add_special_tokens=False)["input_ids"]
    # Each row: the SOP prompt plus a short, different conversation so far.
    prompts = [
        base + tok(f"Hello, this is Alex, turn {i}. " * (1 + i % 3), add_special_tokens=False)["input_ids"]
        for i in range(args.rows)
    ]
    requests = [AgentRequest(p, [], args.new_tokens, seed=i) for i, p in enumerate(prompts)]
    sampling = SamplingConfig(temperature=0.0)
    plain = HFPolicy(model, tok, sampling, share_prefix=False, turn_cache_mb=0)
    shared = HFPolicy(model, tok, sampling, turn_cache_mb=0)
    shared.sample(requests[:1])  # the prefix cache is built once per weights version; a step reuses it
    n_new = args.rows * args.new_tokens
    t_plain = timed(lambda: plain.sample(requests), args.repeats)
    t_shared = timed(lambda: shared.sample(requests), args.repeats)

    t_recompute, t_turn_cache = (timed(lambda mb=mb: dialogues(model, tok, prompts, args, mb), 1) for mb in (0, 4096))
    t_dynamic, t_batch = (decode_step(model, args.decode_rows, batch_cache) for batch_cache in (False, True))

    seqs = []
    for p in prompts:
        reply = tok(
            "<response>Sure, let me help you claim the credit.</response><stage>1</stage>", add_special_tokens=False
        )["input_ids"] + [tok.eos_token_id]
        ids = torch.tensor(p + reply)
        mask = torch.zeros_like(ids)
        mask[len(p) :] = 1
        seqs.append(Sequence(ids, mask, 1.0))
    agent_tokens = sum(int(s.mask.sum()) for s in seqs)

    def picked(share_prefix):
        model.zero_grad()
        torch.cat(masked_logprobs(model, seqs, 1.0, share_prefix=share_prefix).logps).sum().backward()

    def full():
        model.zero_grad()
        width = max(len(s.ids) for s in seqs)
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        attn = torch.zeros_like(ids)
        for i, s in enumerate(seqs):
            ids[i, : len(s.ids)], attn[i, : len(s.ids)] = s.ids, 1
        logp = torch.log_softmax(model(input_ids=ids, attention_mask=attn).logits[:, :-1].float(), -1)
        tgt = torch.stack([torch.nn.functional.pad(s.mask, (0, width - len(s.mask))) for s in seqs])[:, 1:].bool()
        logp.gather(-1, ids[:, 1:, None]).squeeze(-1)[tgt].sum().backward()

    t_full = timed(full, args.repeats)
    t_picked = timed(lambda: picked(False), args.repeats)
    t_prefix = timed(lambda: picked(True), args.repeats)
    result = {
        "rows": args.rows,
        "prompt_tokens": len(base),
        "new_tokens_per_row": args.new_tokens,
        "generation_tok_s": {"plain": n_new / t_plain, "shared_prefix": n_new / t_shared},
        "generation_speedup": t_plain / t_shared,
        "dialogue_generation_s": {"turns": args.turns, "recompute_history": t_recompute, "turn_cache": t_turn_cache},
        "turn_cache_speedup": t_recompute / t_turn_cache,
        "decode_step_s": {"rows": args.decode_rows, "dynamic_cache": t_dynamic, "batch_cache": t_batch},
        "batch_cache_speedup": t_dynamic / t_batch,
        "train_forward_backward_s": {
            "full_logits": t_full,
            "agent_positions_only": t_picked,
            "agent_positions_and_shared_prompt": t_prefix,
        },
        "train_speedup_vs_full_logits": t_full / t_prefix,
        "shared_prompt_speedup": t_picked / t_prefix,
        "agent_tokens": agent_tokens,
    }
    print(json.dumps(result, indent=2))
    print(
        f"generation: shared prefix {t_plain / t_shared:.2f}x plain; over {args.turns}-turn dialogues, turn cache "
        f"{t_recompute / t_turn_cache:.2f}x recomputing the history; decoding step with the preallocated batch cache "
        f"{t_dynamic / t_batch:.2f}x DynamicCache; training forward+backward: "
        f"agent-positions-only LM head {t_full / t_picked:.2f}x full logits, plus the shared prompt "
        f"{t_picked / t_prefix:.2f}x more ({t_full / t_prefix:.2f}x the naive forward)"
    )


if __name__ == "__main__":
    main()
