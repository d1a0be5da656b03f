"""The transformers policy's generation: shared-prefix and per-dialogue KV caches change nothing but speed, and
batched top-k / top-p sampling keeps every row to its own seed and to the nucleus."""

import copy

import pytest
import torch

from sead.dialogue import AgentRequest
from sead.policy.hf import HFPolicy
from sead.policy.sampling import _binned_nucleus_mask, _sorted_nucleus_mask, pick_tokens
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


def reference_nucleus(row: torch.Tensor, top_p: float) -> set[int]:
    """The textbook nucleus in fp64: the whole vocabulary sorted (ties by index), tokens kept while the mass
    before them is within top_p."""
    p, idx = torch.sort(torch.softmax(row.double(), -1), descending=True, stable=True)
    return set(idx[(p.cumsum(-1) - p) <= top_p].tolist())


def three_kinds_of_row(vocab: int = 6000) -> torch.Tensor:
    """A peaked row (one token holds most of the mass), a middling one (a nucleus of tens of tokens) and a flat one
    (thousands), rounded to bf16 as the policy's logits are, so that ties are common."""
    g = torch.Generator().manual_seed(5)
    peaked = torch.randn(vocab, generator=g)
    peaked[17] = 20.0
    middling = torch.randn(vocab, generator=g)
    middling[torch.randperm(vocab, generator=g)[:40]] += 14 + torch.randn(40, generator=g)
    flat = torch.randn(vocab, generator=g) * 0.5
    return torch.stack([peaked, middling, flat]).bfloat16().float()


@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.95, 0.999])
def test_nucleus_equals_a_full_sort_of_the_vocabulary(top_p):
    """Every way a row can take (its top token alone, a few candidates, the bins, or on a GPU one sort of the
    vocabulary) keeps exactly the tokens the full fp64 sort keeps, ties at the boundary included; every draw lies
    in that nucleus."""
    logits = three_kinds_of_row()
    allowed = [reference_nucleus(row, top_p) for row in logits]
    sizes = [len(a) for a in allowed]
    assert sizes[0] == 1 and 1 < sizes[1] < 256 < sizes[2]  # the three ways are all taken
    logp = torch.log_softmax(logits, -1)
    for way in (_binned_nucleus_mask, _sorted_nucleus_mask):  # the GPU's way runs on any device
        for row, a in zip(way(logp, top_p)[1], allowed):
            assert set(row.nonzero()[:, 0].tolist()) == a, way.__name__
    gens = [torch.Generator().manual_seed(s) for s in range(3)]
    cfg = SamplingConfig(temperature=1.0, top_p=top_p)
    for _ in range(200):
        tok, _ = pick_tokens(logits, gens, cfg)
        assert all(t in a for t, a in zip(tok.tolist(), allowed))


def test_a_wide_nucleus_is_drawn_in_proportion_and_breaks_ties_by_index():
    """300 tokens of 0.002, 300 of 0.001, 400 of 0.00025, interleaved: at top_p = 0.8 the nucleus is the 0.002
    tokens and the first 201 of the 0.001 ones by index (a tie broken as a stable sort breaks it), drawn in
    proportion 0.6 : 0.201."""
    kinds = torch.tensor([0, 1, 2] * 300 + [2] * 100)
    probs = torch.tensor([0.002, 0.001, 0.00025])[kinds]
    rows = 2000
    logits = torch.log(probs).expand(rows, -1).contiguous()
    gens = [torch.Generator().manual_seed(s) for s in range(rows)]
    counts = torch.zeros(len(probs))
    for _ in range(10):
        tok, _ = pick_tokens(logits, gens, SamplingConfig(temperature=1.0, top_p=0.8))
        counts += torch.bincount(tok, minlength=len(probs))
    second = (kinds == 1).nonzero()[:, 0]
    assert counts[kinds == 2].sum() == 0 and counts[second[201:]].sum() == 0 and counts[second[200]] > 0
    assert float(counts[kinds == 0].sum() / counts.sum()) == pytest.approx(0.6 / 0.801, abs=0.01)


def test_a_row_draws_the_same_token_whichever_way_its_batch_mates_take():
    logits = three_kinds_of_row()
    cfg = SamplingConfig(temperature=1.0, top_p=0.95)
    for step in range(20):
        together = pick_tokens(logits, [torch.Generator().manual_seed(100 * step + i) for i in range(3)], cfg)[0]
        for i in range(3):
            alone = pick_tokens(logits[i : i + 1], [torch.Generator().manual_seed(100 * step + i)], cfg)[0]
            assert int(alone[0]) == int(together[i])
