"""The transformers policy's generation: shared-prefix and per-dialogue KV caches change nothing but speed, and
batched top-k / top-p sampling keeps every row to its own seed and to the nucleus."""

import copy

import pytest
import torch

from sead.dialogue import AgentRequest
from sead.policy.hf import HFPolicy
from sead.policy.sampling import pick_tokens
from sead.policy.settings import SamplingConfig

GREEDY, NUCLEUS = SamplingConfig(temperature=0.0), SamplingConfig(temperature=1.0, top_p=0.9)


def encode(tok, text):
    return tok.encode(text, add_special_tokens=False)


def test_shared_prefix_sampling_matches_plain_batched_sampling(tiny):
    model, tok = tiny
    prefix = encode(tok, "You are Alex. Follow the SOP and answer in tags. " * 8)
    requests = [
        AgentRequest(prefix + encode(tok, f" user says {i} " * (i + 1)), [], 12, seed=100 + i) for i in range(3)
    ]
    for sampling in (GREEDY, NUCLEUS):
        plain = HFPolicy(model, tok, sampling, share_prefix=False, turn_cache_mb=0).sample(requests)
        shared_policy = HFPolicy(model, tok, sampling)
        shared = shared_policy.sample(requests)
        assert len(shared_policy._prefix[1]) >= len(prefix)
        for a, b in zip(plain, shared):
            assert a.token_ids == b.token_ids
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    version = shared_policy._prefix[0]
    shared_policy.sample(requests)
    assert shared_policy._prefix[0] == version  # same weights: the cached prefix is reused
    with torch.no_grad():
        next(model.parameters()).add_(0.0)  # any in-place weight update
    shared_policy.sample(requests)
    assert shared_policy._prefix[0] != version  # ... makes it recompute


def test_batched_decoding_matches_each_row_recomputed_alone(tiny):
    """The batch layout (shared prefix, padding, one preallocated KV buffer, a 4-D mask over positions not
    decoded yet) against the plainest reference: each row alone, the whole sequence recomputed per token."""
    model, tok = tiny
    prefix = encode(tok, "You are Alex. Follow the SOP and answer in tags. " * 8)
    requests = [
        AgentRequest(prefix + encode(tok, f" user says {i} " * (2 * i + 1)), [], 8 + 2 * i, seed=i) for i in range(3)
    ]
    outs = HFPolicy(model, tok, GREEDY).sample(requests)
    with torch.no_grad():
        for request, out in zip(requests, outs):
            ids, expected = list(request.prompt_ids), []
            for token in out.token_ids:
                logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
                assert int(logits.argmax()) == token
                expected.append(float(torch.log_softmax(logits, -1)[token]))
                ids.append(token)
            assert out.logprobs == pytest.approx(expected, abs=1e-5)


def test_rows_with_one_prompt_are_run_through_the_model_once_and_sample_apart(tiny):
    """A branched group's members share their prompt: its tokens go through the model once for all of them, and
    each member still samples from its own seed the tokens it would alone (float64, so that the batch's row count
    cannot change a draw)."""
    model, tok = copy.deepcopy(tiny[0]).double(), tiny[1]
    prefix = encode(tok, "You are Alex. Follow the SOP and answer in tags. " * 8)
    same, other = prefix + encode(tok, " the user asks about fees " * 3), prefix + encode(tok, " hello")
    requests = [AgentRequest(p, [], 10, seed=s) for p, s in ((same, 1), (other, 2), (same, 3), (same, 4))]
    rows_run = []
    hook = model.register_forward_pre_hook(
        lambda m, a, kw: rows_run.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        together = HFPolicy(model, tok, NUCLEUS).sample(requests)
    finally:
        hook.remove()
    assert [r for r in rows_run if r[1] > 1][-1][0] == 2  # the prompt tokens: two distinct prompts, not four rows
    assert all(r[0] == 4 for r in rows_run if r[1] == 1)  # every row decodes
    alone = [HFPolicy(model, tok, NUCLEUS).sample([r])[0] for r in requests]
    for a, b in zip(together, alone):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)  # log-softmax runs in fp32
    assert len({tuple(o.token_ids) for o in (together[0], together[2], together[3])}) > 1  # apart from one prompt


def play(policy, tok, prefix, turns, rows):
    """Dialogues as the runner builds them: each prompt extends the last one with the reply and a user turn.
    Rows start at different turns, so batches mix rows with and without cached turns."""
    prompts = [prefix + encode(tok, f" hello {r}") for r in range(rows)]
    replies = [[] for _ in range(rows)]
    for t in range(turns):
        active = [r for r in range(rows) if t >= r % 2]
        outs = policy.sample([AgentRequest(prompts[r], [], 6, seed=10 * r + t) for r in active])
        for r, out in zip(active, outs):
            replies[r].append(out)
            prompts[r] = prompts[r] + out.token_ids + encode(tok, f" user turn {t} of {r}")
    return replies


@pytest.mark.parametrize("sampling", [GREEDY, NUCLEUS])
def test_turn_cache_gives_the_same_dialogues_as_recomputing_every_turn(tiny, sampling):
    """In float64, so the comparison sees the caches' logic only: in fp32 the two key layouts round differently
    (about 1e-6 in a log-prob), enough to flip a nucleus draw of the near-uniform random model now and then."""
    model, tok = copy.deepcopy(tiny[0]).double(), tiny[1]
    prefix = encode(tok, "System: you are Alex, follow the SOP. " * 4)
    cached_policy = HFPolicy(model, tok, sampling)
    cached = play(cached_policy, tok, prefix, turns=4, rows=3)
    fresh = play(HFPolicy(model, tok, sampling, turn_cache_mb=0), tok, prefix, turns=4, rows=3)
    for a_row, b_row in zip(cached, fresh):
        for a, b in zip(a_row, b_row):
            assert a.token_ids == b.token_ids
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    turns = cached_policy.turns
    assert turns.hits == 3 + 3 + 2 and turns.reused_tokens > 0  # every turn after a row's first one was a hit
    assert len(turns) == 3  # one entry per dialogue: a turn's entry replaces the one it extends


def test_turn_cache_respects_its_budget_and_forgets_on_new_weights(tiny):
    model, tok = tiny
    prefix = encode(tok, "System: you are Alex, follow the SOP. " * 4)
    policy = HFPolicy(model, tok, GREEDY, turn_cache_mb=0.02)  # ~20 KB: room for about one dialogue
    play(policy, tok, prefix, turns=2, rows=3)
    assert 0 < policy.turns._bytes <= policy.turns.budget and len(policy.turns) < 3
    with torch.no_grad():
        next(model.parameters()).add_(0.0)
    policy.turns.misses = 0
    policy.sample([AgentRequest(prefix + encode(tok, " hello 0"), [], 4, seed=1)])
    assert len(policy.turns) == 1 and policy.turns.misses == 1


def test_nucleus_sampling_stays_in_the_nucleus_and_follows_its_probabilities():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.05, 0.1, 0.8]]))
    cfg = SamplingConfig(temperature=1.0, top_p=0.7)
    counts = torch.zeros(2, 4)
    gens = [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]
    for _ in range(4000):
        tok, lp = pick_tokens(logits, gens, cfg)
        counts[[0, 1], tok] += 1
    # row 0 keeps {0.5, 0.3} (mass before 0.15 is 0.8 > 0.7), renormalised to 5/8 and 3/8; row 1 keeps only 0.8
    assert counts[0, 2:].sum() == 0 and counts[1].tolist() == [0, 0, 0, 4000]
    assert counts[0, 0] / 4000 == pytest.approx(5 / 8, abs=0.03)
    # the log-prob is the chosen token's under the unfiltered distribution (what the training forward computes)
    assert lp.tolist() == pytest.approx(torch.log_softmax(logits, -1)[[0, 1], tok].tolist())


def test_top_k_and_wide_nuclei_match_a_full_sort():
    torch.manual_seed(0)
    logits = torch.randn(3, 1000) * 0.1  # flat: the 0.95 nucleus is far wider than the candidate window
    for cfg in (
        SamplingConfig(temperature=1.0, top_p=0.95),
        SamplingConfig(temperature=0.7, top_p=1.0, top_k=5),
        SamplingConfig(temperature=1.3, top_p=0.5, top_k=400),
    ):
        allowed = []
        for row in logits / cfg.temperature:
            k = cfg.top_k or row.numel()
            vals, idx = torch.sort(row, descending=True)
            p = torch.softmax(vals[:k], -1)
            allowed.append(set(idx[:k][(p.cumsum(-1) - p) <= cfg.top_p].tolist()))
        gens = [torch.Generator().manual_seed(s) for s in range(3)]
        seen = [set() for _ in range(3)]
        for _ in range(300):
            tok, _ = pick_tokens(logits, gens, cfg)
            for i, t in enumerate(tok.tolist()):
                seen[i].add(t)
        for s, a in zip(seen, allowed):
            assert s <= a and len(s) > min(len(a), 300) * 0.3


def test_each_row_samples_from_its_own_seed_whatever_shares_its_batch():
    torch.manual_seed(1)
    logits = torch.randn(3, 500)
    alone = pick_tokens(logits[1:2], [torch.Generator().manual_seed(7)], NUCLEUS)[0]
    together = pick_tokens(logits, [torch.Generator().manual_seed(s) for s in (3, 7, 9)], NUCLEUS)[0]
    assert together[1] == alone[0]
