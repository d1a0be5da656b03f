"""The fused decoding step (`csrc/decode_layers.cpp`, taken by `sead.models.decode_step` up to `FUSED_ROWS` rows):
its logits and the keys/values it writes as close to an fp32 computation as the operator path's, with and without a
shared prefix; sampled dialogues whose log-probs match an fp32 model's scoring of them; the operators above
`FUSED_ROWS` rows, for other head sizes and when turned off; weights followed after updates; bad inputs refused with
the reason.

On a CPU without AVX512-BF16 the fused step is never offered: there these tests check that the operators run."""

import copy

import pytest
import torch
from test_decode_step import one_step

from sead.dialogue import AgentRequest
from sead.models import decode_kernel, decode_step
from sead.models.decode_step import DecodeStep
from sead.models.loading import ModelConfig, load_model
from sead.policy.hf import HFPolicy, prompt_mask
from sead.policy.settings import SamplingConfig
from sead.policy.turn_cache import BatchCache


@pytest.fixture(scope="module")
def op():
    found = decode_kernel.decode_layers()
    assert (found is not None) == decode_kernel.offered(), "offered exactly where the CPU runs it"
    return found


@pytest.fixture(scope="module")
def models():
    """SmolLM2's head size (64) and grouping (3 query heads per key/value head) in a small random model: the bf16
    model, and its weights computed in fp32 (the reference)."""
    cfg = ModelConfig(preset="tiny", dtype="float32", hidden=384, heads=6, kv_heads=2, intermediate=256, init_seed=3)
    reference = load_model(cfg)[0].eval().to(torch.bfloat16).float()
    return copy.deepcopy(reference).to(torch.bfloat16), reference


@pytest.fixture
def counted(op, monkeypatch):
    """The calls of the fused step, counted."""
    calls = []
    if op is not None:
        monkeypatch.setattr(decode_step, "decode_layers", lambda: lambda *a: calls.append(a[0].shape[0]) or op(*a))
    return calls


@torch.no_grad()
def step_after_prefix(model, rows, prefix=30, prompt=7, capacity=12, seed=0):
    """One decoding token per row after a shared prefix (one copy, passed apart as the policy does) and a prompt of
    each row's own (one row left-padded): (the step's logits, its cache)."""
    g = torch.Generator().manual_seed(seed)
    out = model(input_ids=torch.randint(0, 500, (1, prefix), generator=g), use_cache=True)
    shared = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
    ids = torch.randint(0, 500, (rows, prompt), generator=g)
    attn = torch.zeros((rows, capacity), dtype=torch.bool)
    attn[:, :prompt] = True
    attn[0, :2] = False
    pos = (attn[:, :prompt].cumsum(-1) - 1).clamp(min=0) + prefix
    cache = BatchCache(capacity)
    model(
        input_ids=ids,
        attention_mask=prompt_mask(attn, 0, prompt),
        position_ids=pos,
        past_key_values=cache,
        use_cache=True,
        shared_kv=shared,
    )
    attn[:, prompt] = True
    token = torch.randint(0, 500, (rows,), generator=g)
    step = DecodeStep.for_model(model)
    logits = step(token, pos[:, -1] + 1, attn[:, None, None, :], cache, torch.tensor([prompt]), shared)
    return logits, cache


def run(model, rows, with_prefix, fused, monkeypatch, prefix_by_matmul=False):
    monkeypatch.setattr(decode_step, "USE_FUSED", fused)
    monkeypatch.setattr(decode_step, "PREFIX_MATMUL_ROWS", 1 if prefix_by_matmul else 10**6)
    if with_prefix:
        logits, cache = step_after_prefix(model, rows)
    else:
        _, logits, _, cache = one_step(model, rows=rows)
    return logits.float().log_softmax(-1), cache


@pytest.mark.parametrize("prefix", ["none", "by tasks", "by matmuls"])
@pytest.mark.parametrize("rows", [1, 3, decode_step.FUSED_ROWS])
def test_a_fused_step_is_as_close_to_fp32_as_the_operators(models, counted, monkeypatch, rows, prefix):
    """Without a shared prefix, and with one attended by the single-query kernel's tasks or by matmuls."""
    model, reference = models
    with_prefix = prefix != "none"
    exact, exact_cache = run(reference, rows, with_prefix, True, monkeypatch)
    counted.clear()
    fused, fused_cache = run(model, rows, with_prefix, True, monkeypatch, prefix_by_matmul=prefix == "by matmuls")
    assert counted == ([rows] if decode_kernel.offered() else [])
    ops, ops_cache = run(model, rows, with_prefix, False, monkeypatch)
    assert len(counted) <= 1  # nothing more with the fused step off
    assert (fused - exact).abs().max() <= 1.5 * (ops - exact).abs().max() + 1e-3
    for want, got, base in zip(exact_cache.layers, fused_cache.layers, ops_cache.layers):
        for w, f, b in ((want.keys, got.keys, base.keys), (want.values, got.values, base.values)):
            assert (f.float() - w).abs().max() <= 1.5 * (b.float() - w).abs().max() + 1e-3


def test_above_fused_rows_and_for_other_head_sizes_the_operators_run(models, counted, tiny, monkeypatch):
    run(models[0], decode_step.FUSED_ROWS + 1, True, True, monkeypatch)
    small_heads = copy.deepcopy(tiny[0]).to(torch.bfloat16)  # head size 16: not one the kernel takes
    run(small_heads, 2, False, True, monkeypatch)
    assert counted == []


@torch.no_grad()
def test_sampled_log_probs_match_an_fp32_scoring_of_the_dialogue(models, counted, tiny):
    """Three turns of three rows after a shared prefix through `HFPolicy` (the turn cache, the columns and masks of
    a real call): each sampled token's log-prob as the fp32 model scores the whole text, as closely as the
    operators' sampling of its own tokens."""
    model, reference = models
    tok = tiny[1]

    def worst_gap(fused: bool) -> float:
        decode_step.USE_FUSED = fused
        try:
            policy = HFPolicy(model, tok, SamplingConfig(temperature=1.0, top_p=1.0))
            prefix = tok.encode("System: you are Alex, follow the SOP. " * 4, add_special_tokens=False)
            prompts = [prefix + tok.encode(f" hello {r}", add_special_tokens=False) for r in range(3)]
            gap = 0.0
            for turn in range(3):
                outs = policy.sample([AgentRequest(p, [], 6, seed=10 * r + turn) for r, p in enumerate(prompts)])
                for p, o in zip(prompts, outs):
                    ids = torch.tensor([p + o.token_ids])
                    logp = reference(input_ids=ids).logits[0, len(p) - 1 : -1].log_softmax(-1)
                    want = logp.gather(1, torch.tensor(o.token_ids)[:, None])[:, 0]
                    gap = max(gap, (torch.tensor(o.logprobs) - want).abs().max().item())
                prompts = [p + o.token_ids + tok.encode(f" user {turn}", add_special_tokens=False)
                           for p, o in zip(prompts, outs)]  # fmt: skip
            return gap
        finally:
            decode_step.USE_FUSED = True

    fused = worst_gap(True)
    assert len(counted) == (3 * 5 if decode_kernel.offered() else 0)  # 6 tokens a turn: 5 decoding steps
    assert fused <= 1.5 * worst_gap(False) + 0.02


def test_the_fused_step_follows_weight_updates(models, counted, monkeypatch):
    model, reference = copy.deepcopy(models[0]), copy.deepcopy(models[1])
    before = run(model, 2, True, True, monkeypatch)[0]
    with torch.no_grad():  # in place, as an optimiser step or the rollout copy's refresh changes them
        for m in (model, reference):
            for p in m.parameters():
                p.mul_(1.25)
    after = run(model, 2, True, True, monkeypatch)[0]
    exact = run(reference, 2, True, True, monkeypatch)[0]
    ops = run(model, 2, True, False, monkeypatch)[0]
    assert (after - before).abs().max() > 0.1
    assert (after - exact).abs().max() <= 1.5 * (ops - exact).abs().max() + 1e-3


def test_bad_inputs_are_refused_with_the_reason(op):
    if op is None:
        return
    rows, hidden, heads, kv, dim, inner, cap = 2, 64, 3, 1, 64, 96, 5
    g = torch.Generator().manual_seed(0)

    def w(out, inputs):
        return decode_kernel.pack_small_rows((torch.randn(out, inputs, generator=g) * 0.1).bfloat16())

    norm = torch.ones(hidden, dtype=torch.bfloat16)
    args = {
        "x": torch.randn(rows, hidden).bfloat16(),
        "cos": torch.ones(rows, dim).bfloat16(),
        "sin": torch.zeros(rows, dim).bfloat16(),
        "norm_in": [norm],
        "qkv": [w((heads + 2 * kv) * dim, hidden)],
        "o": [w(hidden, heads * dim)],
        "norm_post": [norm],
        "gate_up": [w(2 * inner, hidden)],
        "down": [w(hidden, inner)],
        "keys": [torch.zeros(rows, kv, cap, dim).bfloat16()],
        "values": [torch.zeros(rows, kv, cap, dim).bfloat16()],
        "prefix_keys": [],
        "prefix_values": [],
        "valid": torch.ones(rows, cap, dtype=torch.bool),
        "column": 4,
    }
    shape = {"heads": heads, "kv_heads": kv, "inner": inner, "eps": 1e-5, "scale": dim**-0.5, "prefix_matmul_rows": 8}
    out = op(**args, **shape)
    assert out.shape == (rows, hidden) and bool(out.isfinite().all())
    assert bool(args["keys"][0][:, :, 4].ne(0).any())  # this step's keys went to column 4
    for change, reason in [
        ({"column": 5}, "outside the cache"),
        ({"o": []}, "o has 0 tensors for 1 layers"),
        ({"down": [w(hidden, inner + 40)]}, r"down\[0\] is packed for another shape"),
        ({"x": args["x"].float()}, "bf16"),
        ({"valid": args["valid"][:, :3]}, "valid must be"),
        ({"keys": [torch.zeros(rows + 1, kv, cap, dim).bfloat16()]}, r"keys/values\[0\] must be"),
        ({"prefix_keys": [torch.zeros(1, kv, 3, dim).bfloat16()]}, "prefix_values has 0 tensors"),
    ]:
        with pytest.raises(RuntimeError, match=reason):
            op(**(args | change), **shape)
    with pytest.raises(RuntimeError, match="do not group"):
        op(**args, **(shape | {"kv_heads": 2}))


def test_with_the_kernels_turned_off_the_operators_run(models, monkeypatch):
    """`SEAD_DECODE_KERNEL=0` (docs/installation.md) declines every compiled kernel, the fused step included."""
    monkeypatch.setenv("SEAD_DECODE_KERNEL", "0")
    decode_kernel.kernel.cache_clear()
    try:
        assert all(decode_kernel.kernel(name) is None for name in decode_kernel.KERNELS)
        model = copy.deepcopy(models[0])  # a model of its own: its step is built afresh, without the kernels
        step = DecodeStep.for_model(model)
        assert step.ready().args[2] is None  # no fused weights: the operators' step
        logits = run(model, 2, True, True, monkeypatch)[0]
        exact = run(models[1], 2, True, True, monkeypatch)[0]
        assert (logits - exact).abs().max() < 0.5
    finally:
        decode_kernel.kernel.cache_clear()
