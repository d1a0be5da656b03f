"""The fp32 decoding kernels for CPUs with AVX2 and FMA (`csrc/small_rows_linear_fp32.cpp`,
`csrc/decode_layers_fp32.cpp`, built by sead/models/decode_kernel.py and taken by `sead.models.decode_step` for fp32
models): the linear's products within fp32's summation error of fp64 and as close as torch's; the fused step's logits
and the keys/values it writes as close to fp64 as the operator path's, with and without a shared prefix of several
attention pieces; sampled tokens' log-probs as an fp64 scoring gives them; the operators above `FUSED_ROWS` rows and
with the kernels off; weights followed after updates; bad inputs refused with the reason.

Where the CPU lacks AVX2 or FMA (ARM, older x86) the kernels are never offered: there these tests check that, and
that the operators run."""

import copy

import pytest
import torch
import torch.nn.functional as F
from test_decode_layers import step_after_prefix

from sead.dialogue import AgentRequest
from sead.models import decode_kernel, decode_step
from sead.models.decode_kernel import pack_small_rows_fp32
from sead.models.decode_step import DecodeStep
from sead.models.loading import ModelConfig, load_model
from sead.policy.hf import HFPolicy
from sead.policy.settings import SamplingConfig

SUPPORTED = decode_kernel.offered("avx2")  # False with the kernels switched off, as on a CPU without AVX2


@pytest.fixture(scope="module")
def linear():
    found = decode_kernel.small_rows_linear_fp32()
    assert (found is not None) == SUPPORTED, "the kernel is offered exactly where the CPU runs it"
    return found


@pytest.fixture(scope="module")
def fused():
    found = decode_kernel.decode_layers_fp32()
    assert (found is not None) == SUPPORTED, "the kernel is offered exactly where the CPU runs it"
    return found


@pytest.fixture(scope="module")
def models():
    """SmolLM2's head size (64) and grouping (3 query heads per key/value head) in a small random fp32 model, and
    the same weights in fp64 (the reference)."""
    cfg = ModelConfig(preset="tiny", dtype="float32", hidden=384, heads=6, kv_heads=2, intermediate=256, init_seed=3)
    model = load_model(cfg)[0].eval()
    return model, copy.deepcopy(model).double()


@pytest.fixture
def counted(fused, monkeypatch):
    """The rows of each call of the fused fp32 step, counted."""
    calls = []
    if fused is not None:
        monkeypatch.setattr(
            decode_step, "decode_layers_fp32", lambda: lambda *a: calls.append(a[0].shape[0]) or fused(*a)
        )
    return calls


@pytest.mark.parametrize("out,inputs", [(48, 64), (40, 70), (960, 576), (7, 33), (576, 1536)])
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 6, 7, 8, 13, 40])
def test_products_are_within_fp32_summation_error_of_fp64(linear, rows, out, inputs):
    """Tiles of 1-6 rows (two sets of sums up to 3), more rows split into equal tiles, odd inputs, outputs padded
    to whole blocks."""
    if linear is None:
        return
    g = torch.Generator().manual_seed(rows)
    w = torch.randn((out, inputs), generator=g) * 0.1
    x = torch.randn((rows, 1, inputs + 5), generator=g)[..., 2 : inputs + 2]  # a strided view
    got = linear(x, pack_small_rows_fp32(w), out)
    exact = x.double() @ w.double().T
    assert got.shape == (rows, 1, out) and got.dtype == torch.float32
    err = (got.double() - exact).abs()
    bound = inputs * 2**-24 * (x.double().abs() @ w.double().abs().T)  # recursive summation's worst case
    assert bool((err <= bound).all())
    assert err.max() <= 8 * (F.linear(x, w).double() - exact).abs().max() + 1e-6


def test_linear_bad_inputs_are_refused_with_the_reason(linear):
    if linear is None:
        return
    w, x = torch.randn(40, 70), torch.randn(3, 70)
    packed = pack_small_rows_fp32(w)
    for args, reason in [
        ((x.bfloat16(), packed, 40), "fp32"),
        ((x[..., :30], packed, 40), "features"),
        ((x, packed, 70), "does not match"),
        ((x, packed.view(-1, 16), 40), "packed"),
    ]:
        with pytest.raises(RuntimeError, match=reason):
            linear(*args)


def one_step(model, rows, prefix, fused_on, monkeypatch):
    """One decoding step after a prefix of `prefix` positions (1: next to none): its log-probs and its cache."""
    monkeypatch.setattr(decode_step, "USE_FUSED", fused_on)
    monkeypatch.setattr(decode_step, "USE_SMALL_ROWS", fused_on)
    logits, cache = step_after_prefix(model, rows, prefix=prefix)
    return logits.double().log_softmax(-1), cache


@pytest.mark.parametrize("prefix", [1, 30, 600])  # 600: three pieces of the prefix's attention (256 each)
@pytest.mark.parametrize("rows", [1, 3, 8, decode_step.FUSED_ROWS])
def test_a_fused_step_is_as_close_to_fp64_as_the_operators(models, counted, monkeypatch, rows, prefix):
    model, reference = models
    exact, exact_cache = one_step(reference, rows, prefix, False, monkeypatch)
    counted.clear()
    got, got_cache = one_step(model, rows, prefix, True, monkeypatch)
    assert counted == ([rows] if SUPPORTED else [])
    ops, ops_cache = one_step(model, rows, prefix, False, monkeypatch)
    assert len(counted) <= 1  # nothing more with the fused step off
    assert (got - exact).abs().max() <= 4 * (ops - exact).abs().max() + 1e-5
    for want, mine, base in zip(exact_cache.layers, got_cache.layers, ops_cache.layers):
        for w, f, b in ((want.keys, mine.keys, base.keys), (want.values, mine.values, base.values)):
            assert (f.double() - w).abs().max() <= 4 * (b.double() - w).abs().max() + 1e-5


def test_above_fused_rows_the_operators_run(models, counted, monkeypatch):
    one_step(models[0], decode_step.FUSED_ROWS + 1, 30, True, monkeypatch)
    assert counted == []


@torch.no_grad()
def test_sampled_log_probs_match_an_fp64_scoring_of_the_dialogue(models, counted, tiny):
    """Three turns of three rows after a shared prefix through `HFPolicy` (the turn cache, the columns and masks of
    a real call): each sampled token's log-prob as the fp64 model scores the whole text."""
    model, reference = models
    tok = tiny[1]
    policy = HFPolicy(model, tok, SamplingConfig(temperature=1.0, top_p=1.0))
    prefix = tok.encode("System: you are Alex, follow the SOP. " * 4, add_special_tokens=False)
    prompts = [prefix + tok.encode(f" hello {r}", add_special_tokens=False) for r in range(3)]
    gap = 0.0
    for turn in range(3):
        outs = policy.sample([AgentRequest(p, [], 6, seed=10 * r + turn) for r, p in enumerate(prompts)])
        for p, o in zip(prompts, outs):
            logp = reference(input_ids=torch.tensor([p + o.token_ids])).logits[0, len(p) - 1 : -1].log_softmax(-1)
            want = logp.gather(1, torch.tensor(o.token_ids)[:, None])[:, 0]
            gap = max(gap, (torch.tensor(o.logprobs, dtype=torch.float64) - want).abs().max().item())
        prompts = [
            p + o.token_ids + tok.encode(f" user {turn}", add_special_tokens=False) for p, o in zip(prompts, outs)
        ]
    assert len(counted) == (3 * 5 if SUPPORTED else 0)  # 6 tokens a turn: 5 decoding steps
    assert gap <= 1e-4  # fp32 sums against fp64: no other difference


def test_the_fused_step_follows_weight_updates(models, monkeypatch):
    model, reference = copy.deepcopy(models[0]), copy.deepcopy(models[1])
    before = one_step(model, 2, 30, True, monkeypatch)[0]
    with torch.no_grad():  # in place, as an optimiser step changes them
        for m in (model, reference):
            for p in m.parameters():
                p.mul_(1.25)
    after = one_step(model, 2, 30, True, monkeypatch)[0]
    exact = one_step(reference, 2, 30, False, monkeypatch)[0]
    assert (after - before).abs().max() > 0.1
    assert (after - exact).abs().max() <= 1e-4


def test_fused_step_bad_inputs_are_refused_with_the_reason(fused):
    if fused is None:
        return
    rows, hidden, heads, kv, dim, inner, cap = 2, 64, 3, 1, 64, 96, 5
    g = torch.Generator().manual_seed(0)

    def w(out, inputs):
        return pack_small_rows_fp32(torch.randn(out, inputs, generator=g) * 0.1)

    args = {
        "x": torch.randn(rows, hidden),
        "cos": torch.ones(rows, dim),
        "sin": torch.zeros(rows, dim),
        "norm_in": [torch.ones(hidden)],
        "qkv": [w((heads + 2 * kv) * dim, hidden)],
        "o": [w(hidden, heads * dim)],
        "norm_post": [torch.ones(hidden)],
        "gate_up": [w(2 * inner, hidden)],
        "down": [w(hidden, inner)],
        "keys": [torch.zeros(rows, kv, cap, dim)],
        "values": [torch.zeros(rows, kv, cap, dim)],
        "prefix_keys": [],
        "prefix_values": [],
        "valid": torch.ones(rows, cap, dtype=torch.bool),
        "column": 4,
    }
    shape = {"heads": heads, "kv_heads": kv, "inner": inner, "eps": 1e-5, "scale": dim**-0.5}
    out = fused(**args, **shape)
    assert out.shape == (rows, hidden) and bool(out.isfinite().all())
    assert bool(args["keys"][0][:, :, 4].ne(0).any())  # this step's keys went to column 4
    for change, reason in [
        ({"column": 5}, "outside the cache"),
        ({"o": []}, "o has 0 tensors for 1 layers"),
        ({"down": [w(hidden, inner + 40)]}, r"down\[0\] is packed for another shape"),
        ({"x": args["x"].bfloat16()}, "fp32"),
        ({"valid": args["valid"][:, :3]}, "valid must be"),
        ({"keys": [torch.zeros(rows + 1, kv, cap, dim)]}, r"keys/values\[0\] must be"),
        ({"prefix_keys": [torch.zeros(1, kv, 3, dim)]}, "prefix_values has 0 tensors"),
    ]:
        with pytest.raises(RuntimeError, match=reason):
            fused(**(args | change), **shape)
    with pytest.raises(RuntimeError, match="do not group"):
        fused(**args, **(shape | {"kv_heads": 2}))


def test_with_the_kernels_turned_off_an_fp32_model_decodes_through_the_operators(models, monkeypatch):
    """`SEAD_DECODE_KERNEL=0` declines the fp32 kernels too: what runs where they cannot be built (ARM)."""
    monkeypatch.setenv("SEAD_DECODE_KERNEL", "0")
    decode_kernel.kernel.cache_clear()
    try:
        model = copy.deepcopy(models[0])  # a model of its own: its step is built afresh, without the kernels
        assert DecodeStep.for_model(model).ready().args[2] is None  # no fused step: the operators
        got = one_step(model, 2, 30, True, monkeypatch)[0]
        exact = one_step(models[1], 2, 30, False, monkeypatch)[0]
        assert (got - exact).abs().max() <= 1e-4
    finally:
        decode_kernel.kernel.cache_clear()
