"""SEAD's grouped-query attention (`sead_gqa`) against transformers' own `sdpa` path: bit-equal in fp32 (prefill,
cached decoding, training gradients, whole sampled dialogues), and in bf16 no further from the fp32 result than
the `sdpa` path is."""

import copy

import pytest
import torch
import torch.nn.functional as F

from sead.dialogue import AgentRequest
from sead.models import attention
from sead.models.attention import NAME, _cascade, _single_query, _tiled, _with_shared_prefix
from sead.models.loading import ModelConfig, load_model
from sead.policy.hf import HFPolicy
from sead.policy.settings import SamplingConfig


@pytest.fixture(scope="module")
def gqa_model():
    """The tiny preset with 3 query heads per key/value head, like SmolLM2."""
    model, tok, _ = load_model(ModelConfig(preset="tiny", dtype="float32", hidden=96, heads=6, kv_heads=2, init_seed=3))
    assert model.config._attn_implementation == NAME
    return model.eval(), tok


def with_attention(model, impl: str, dtype=torch.float32):
    twin = copy.deepcopy(model).to(dtype)
    twin.set_attn_implementation(impl)
    return twin


def padded_batch(rows=4, width=24):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 900, (rows, width), generator=g)
    mask = torch.ones_like(ids)
    for i in range(rows):
        mask[i, : 3 * i] = 0  # left padding of different lengths: the case where sdpa copies the cache
    return ids, mask


def prefill_and_decode(model, ids, mask, steps=5):
    """Logits of a padded prefill and of `steps` cached single-token steps after it."""
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, use_cache=True)
        logits, cache = [out.logits], out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        for _ in range(steps):
            mask = torch.cat([mask, torch.ones_like(nxt)], dim=1)
            out = model(input_ids=nxt, attention_mask=mask, past_key_values=cache, use_cache=True)
            logits.append(out.logits)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    return logits


def test_fp32_prefill_and_decoding_are_bit_equal_to_sdpa(gqa_model):
    model, _ = gqa_model
    ids, mask = padded_batch()
    ours = prefill_and_decode(with_attention(model, NAME), ids, mask)
    theirs = prefill_and_decode(with_attention(model, "sdpa"), ids, mask)
    assert torch.equal(ours[0][mask.bool()], theirs[0][mask.bool()])  # padded positions' outputs are unused
    for a, b in zip(ours[1:], theirs[1:]):
        assert torch.equal(a, b)


def test_fp32_training_gradients_match_sdpa(gqa_model):
    model, _ = gqa_model
    ids, mask = padded_batch()
    grads = []
    for impl in (NAME, "sdpa"):
        twin = with_attention(model, impl).train()
        logits = twin(input_ids=ids, attention_mask=mask).logits
        F.cross_entropy(logits[:, :-1][mask[:, 1:].bool()], ids[:, 1:][mask[:, 1:].bool()]).backward()
        grads.append(torch.cat([p.grad.flatten() for p in twin.parameters()]))
    assert torch.allclose(grads[0], grads[1], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    "dtype, sampling, tol",
    [(torch.float32, SamplingConfig(temperature=0.0), 2e-5), (torch.float64, SamplingConfig(temperature=1.0), 1e-6)],
)
def test_sampled_dialogues_match_transformers_sdpa_without_prefix_sharing(gqa_model, dtype, sampling, tol):
    """SEAD's path (one prefix copy read by cascade attention, rows' own caches) against transformers' sdpa
    attention, where the policy runs every row's whole prompt. Sampled (nucleus) draws are compared in float64:
    in fp32 the two paths round differently, enough to flip a draw of this near-uniform random model."""
    model, tok = gqa_model
    prefix = tok.encode("You are Alex. Follow the SOP and answer in tags. " * 4, add_special_tokens=False)
    requests = [
        AgentRequest(prefix + tok.encode(f" user says {i} " * (i + 1), add_special_tokens=False), [], 10, seed=i)
        for i in range(3)
    ]
    ours = HFPolicy(with_attention(model, NAME, dtype), tok, sampling)
    theirs = HFPolicy(with_attention(model, "sdpa", dtype), tok, sampling)
    for a, b in zip(ours.sample(requests), theirs.sample(requests)):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=tol)
    assert len(ours._prefix[1]) >= len(prefix) and theirs._prefix is None  # the two paths did differ


def test_bf16_decoding_is_no_further_from_fp32_than_sdpa_in_bf16(gqa_model):
    model, _ = gqa_model
    ids, mask = padded_batch()
    exact = prefill_and_decode(with_attention(model, "sdpa"), ids, mask)
    runs = {impl: prefill_and_decode(with_attention(model, impl, torch.bfloat16), ids, mask) for impl in (NAME, "sdpa")}
    for step in range(1, len(exact)):  # the single-query steps, where sead_gqa has its own bf16 path
        ref = exact[step].log_softmax(-1)
        err = {impl: (r[step].float().log_softmax(-1) - ref).abs().max().item() for impl, r in runs.items()}
        assert err[NAME] <= 1.5 * err["sdpa"] + 1e-3, err


def test_single_query_path_matches_the_fused_kernel_and_ignores_masked_keys():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(shape, generator=g) for shape in ((3, 6, 1, 16), (3, 2, 20, 16), (3, 2, 20, 16)))
    mask = torch.ones(3, 1, 1, 20, dtype=torch.bool)
    mask[1, ..., :7] = False
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).transpose(1, 2)
    got = _single_query(q, k, v, mask, None)
    assert torch.allclose(got, expected, atol=1e-5)
    k2, v2 = k.clone(), v.clone()
    k2[1, :, :7], v2[1, :, :7] = 1e4, -1e4  # what a masked key holds must not matter
    assert torch.equal(_single_query(q, k2, v2, mask, None), got)
    bf16 = _single_query(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask, None)
    assert torch.allclose(bf16.float(), expected, atol=3e-2)


def test_saved_models_do_not_name_the_sead_attention(gqa_model, tmp_path):
    """A checkpoint must load anywhere (vLLM, verl, plain transformers) without SEAD registered."""
    model, _ = gqa_model
    model.save_pretrained(tmp_path)
    assert NAME not in (tmp_path / "config.json").read_text()


def prefix_case(seed: int, q_len: int, dtype=torch.float32, rows: int = 3):
    g = torch.Generator().manual_seed(seed)
    heads, kv_heads, dim, p, own = 6, 2, 16, 11, 9
    q = torch.randn((rows, heads, q_len, dim), generator=g)
    pk, pv = (torch.randn((1, kv_heads, p, dim), generator=g) for _ in range(2))
    k, v = (torch.randn((rows, kv_heads, own, dim), generator=g) for _ in range(2))
    mask = torch.rand((rows, 1, q_len, own), generator=g) > 0.4
    mask[1] = False  # a row whose own keys are all hidden still sees the prefix
    mask[0, :, 0] = False  # and so does a single query whose own keys are all hidden (a left-padded position)
    full_mask = torch.cat([torch.ones((rows, 1, q_len, p), dtype=torch.bool), mask], dim=-1)
    expected = F.scaled_dot_product_attention(
        q,
        torch.cat([pk.expand(rows, -1, -1, -1), k], dim=2),
        torch.cat([pv.expand(rows, -1, -1, -1), v], dim=2),
        attn_mask=full_mask,
        enable_gqa=True,
    ).transpose(1, 2)
    inputs = [t.to(dtype) for t in (q, k, v)] + [mask, (pk.to(dtype), pv.to(dtype))]
    return inputs, expected


@pytest.mark.parametrize("path", [_cascade, _tiled])
@pytest.mark.parametrize("q_len", [1, 5])
def test_a_shared_prefix_kept_apart_gives_the_attention_of_prefix_and_rows_concatenated(path, q_len):
    """The prefix (one copy) and each row's own keys in one softmax, equal to the fused kernel over [prefix | own]
    with the prefix copied into every row: cascade matmuls, and the tiled kernel's two parts merged."""
    (q, k, v, mask, prefix), expected = prefix_case(2, q_len)
    got = path(q, k, v, mask, prefix, None)
    assert torch.allclose(got, expected, atol=1e-6)


def test_the_tiled_prefix_attention_in_bf16_stays_within_bf16_rounding():
    (q, k, v, mask, prefix), expected = prefix_case(3, 7, torch.bfloat16)
    got = _tiled(q, k, v, mask, prefix, None)
    assert got.dtype == torch.bfloat16 and torch.allclose(got.float(), expected, atol=3e-2)
    assert (got.float() - expected).abs().mean() < 5e-3


def test_cpu_prompt_positions_take_the_tiled_kernel_and_decoding_steps_the_cascade(monkeypatch):
    taken = []
    monkeypatch.setattr(attention, "_tiled", lambda *a: taken.append("tiled"))
    monkeypatch.setattr(attention, "_cascade", lambda *a: taken.append("cascade"))
    with torch.no_grad():  # as HFPolicy samples
        for q_len in (5, 1):
            _with_shared_prefix(*prefix_case(2, q_len)[0], None)
    _with_shared_prefix(*prefix_case(2, 5)[0], None)  # a forward with gradient: the tiled kernel's lse has none
    monkeypatch.setattr(attention, "TILED_PREFILL", False)
    with torch.no_grad():
        _with_shared_prefix(*prefix_case(2, 5)[0], None)
    assert taken == ["tiled", "cascade", "cascade", "cascade"]


def test_a_prompt_of_many_rows_is_attended_a_slice_of_rows_at_a_time_with_the_same_result(monkeypatch):
    """The cascade's scores (a GPU's prompt positions, or with TILED_PREFILL off) are held for a slice of rows at a
    time (attention.SCORE_BUDGET), so their memory stays bounded however many rows a call has; rows are
    independent, so the slices change nothing."""
    g = torch.Generator().manual_seed(4)
    rows, heads, kv_heads, dim, p, own, q_len = 7, 6, 2, 16, 11, 9, 5
    q = torch.randn((rows, heads, q_len, dim), generator=g)
    pk, pv = (torch.randn((1, kv_heads, p, dim), generator=g) for _ in range(2))
    k, v = (torch.randn((rows, kv_heads, own, dim), generator=g) for _ in range(2))
    mask = torch.rand((rows, 1, q_len, own), generator=g) > 0.4
    whole = _cascade(q, k, v, mask, (pk, pv), None)
    held = []
    real_matmul = torch.matmul

    def recording_matmul(a, b):
        out = real_matmul(a, b)
        held.append(out.numel())
        return out

    monkeypatch.setattr(attention, "SCORE_BUDGET", 3 * heads * q_len * (p + own))  # three rows' scores
    monkeypatch.setattr(attention.torch, "matmul", recording_matmul)
    sliced = _cascade(q, k, v, mask, (pk, pv), None)
    monkeypatch.undo()
    assert max(held) <= 3 * heads * q_len * max(p, own, dim)  # never more than three rows' scores at once
    assert sliced.shape == whole.shape and torch.allclose(sliced, whole, atol=1e-6)
