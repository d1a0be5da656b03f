"""The compiled single-query attention kernel (sead/models/decode_kernel.py): its sums against an fp64 reference, the
decoding attention with it no further from the exact result than the matmul path it replaces, and its build: cached
once, rebuilt when the cached file is broken, and the matmul path wherever it cannot be built or used.

On a CPU without AVX512-BF16 the kernel is never built: there these tests check that it is not offered and that
decoding takes the matmul path."""

import copy
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from sead.models import attention, decode_kernel
from sead.models.attention import _cascade, _single_query


@pytest.fixture(scope="module")
def op():
    found = decode_kernel.single_query_attention()
    assert (found is not None) == decode_kernel.cpu_supports(), "the kernel is offered exactly where the CPU runs it"
    return found


def exact(q, k, v, valid, scale):
    """(unnormalised output, score maximum, exp-sum) in fp64, as the kernel defines them."""
    s = torch.einsum("bhgd,bhld->bhgl", q.double(), k.double())
    if valid is not None:
        s = s.masked_fill(~valid[:, None, None, :], float("-inf"))
    m = s.amax(-1)
    p = ((s - m.unsqueeze(-1)) * scale).exp().nan_to_num(0.0)
    return torch.einsum("bhgl,bhld->bhgd", p, v.double()), m, p.sum(-1)


def case(rows=5, kv=3, group=3, dim=64, positions=37, spare=11, seed=0):
    """bf16 queries, and keys/values as views of a larger cache buffer (room for tokens not decoded yet)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn((rows, kv, group, dim), generator=g).bfloat16()
    k, v = (torch.randn((rows, kv, positions + spare, dim), generator=g).bfloat16()[:, :, :positions] for _ in "kv")
    valid = torch.ones(rows, positions, dtype=torch.bool)
    for r in range(rows):
        valid[r, : 3 * r] = False  # left padding of different lengths
        valid[r, positions - r :] = False  # and room at the end
    if positions > 20:
        valid[1, 20] = False  # a hole
    valid[-1] = False  # a row with nothing to attend
    return q, k, v, valid


@pytest.mark.parametrize("dim,group,positions", [(64, 3, 37), (64, 1, 16), (128, 3, 70), (64, 3, 1)])
def test_the_kernel_s_sums_match_fp64(op, dim, group, positions):
    if op is None:
        return
    q, k, v, valid = case(dim=dim, group=group, positions=positions)
    valid[0] = True
    out, m, total = op(q, k, v, valid, dim**-0.5)
    ref_out, ref_m, ref_total = exact(q, k, v, valid, dim**-0.5)
    live = ref_total > 0
    assert torch.equal(live, total > 0) and torch.equal(m[~live], ref_m[~live])  # -inf max, 0 sum: weight 0
    assert torch.allclose(m[live].double(), ref_m[live], atol=1e-4)
    assert torch.allclose(total.double(), ref_total, rtol=1e-5)
    assert torch.allclose(out.double(), ref_out, rtol=1e-5, atol=1e-4 * ref_out.abs().max().item())
    assert not out[~live].any()
    whole, _, _ = op(q, k, v, torch.empty(0, dtype=torch.bool), dim**-0.5)  # no mask: every position
    assert torch.allclose(whole.double(), exact(q, k, v, None, dim**-0.5)[0], rtol=1e-5, atol=1e-3)


def test_what_a_masked_or_unused_position_holds_does_not_matter(op):
    if op is None:
        return
    q, k, v, valid = case()
    got = op(q, k, v, valid, 0.125)
    k2, v2 = k.clone(), v.clone()
    k2.masked_fill_(~valid[:, None, :, None], 1e4)
    v2.masked_fill_(~valid[:, None, :, None], float("nan"))
    assert all(torch.equal(a, b) for a, b in zip(op(q, k2, v2, valid, 0.125), got))


def test_bad_shapes_and_dtypes_are_refused_with_the_reason(op):
    if op is None:
        return
    q, k, v, valid = case()
    with pytest.raises(RuntimeError, match="bf16"):
        op(q.float(), k, v, valid, 0.125)
    with pytest.raises(RuntimeError, match="head dimension"):
        op(q[..., :32], k[..., :32], v[..., :32], valid, 0.125)
    with pytest.raises(RuntimeError, match="valid"):
        op(q, k, v, valid[:, :5], 0.125)


def decoding_case(rows=6, heads=9, kv=3, dim=64, prefix=45, own=37):
    g = torch.Generator().manual_seed(5)
    q = torch.randn((rows, heads, 1, dim), generator=g).bfloat16()
    pk, pv = (torch.randn((1, kv, prefix, dim), generator=g).bfloat16() for _ in "kv")
    k, v = (torch.randn((rows, kv, own + 9, dim), generator=g).bfloat16()[:, :, :own] for _ in "kv")
    mask = case(rows=rows, positions=own)[3].view(rows, 1, 1, own)
    return q, k, v, mask, (pk, pv)


def exact_attention(q, k, v, mask, prefix=None):
    rows, heads, _, dim = q.shape
    group = heads // k.shape[1]
    if prefix is not None:
        k, v = (torch.cat([p.expand(rows, -1, -1, -1), t], 2) for p, t in zip(prefix, (k, v)))
        mask = torch.cat([torch.ones(rows, 1, 1, prefix[0].shape[2], dtype=torch.bool), mask], -1)
    s = (q.double() @ k.double().repeat_interleave(group, 1).transpose(-1, -2)) * dim**-0.5
    w = s.masked_fill(~mask, float("-inf")).softmax(-1)
    return (w @ v.double().repeat_interleave(group, 1)).transpose(1, 2)


@pytest.mark.parametrize("with_prefix", [True, False])
def test_decoding_attention_with_the_kernel_is_no_further_from_exact_than_the_matmul_path(op, monkeypatch, with_prefix):
    """`_cascade` (a shared prefix kept apart) and `_single_query` take the kernel for each row's own positions
    in bf16 decoding; the result is as close to the fp64 attention as the batched matmuls' (whose softmax weights
    are rounded to bf16 before the values; the kernel keeps them in fp32)."""
    q, k, v, mask, prefix = decoding_case()
    if not with_prefix:
        mask[-1, ..., 0] = True  # without a prefix every row needs a position to attend
    calls = []
    if op is not None:
        monkeypatch.setattr(attention, "single_query_attention", lambda: lambda *a: calls.append(1) or op(*a))

    def run(kernel: bool):
        monkeypatch.setattr(attention, "USE_KERNEL", kernel)
        with torch.no_grad():
            if with_prefix:
                return _cascade(q, k, v, mask, prefix, None)
            return _single_query(q, k, v, mask, None)

    ref = exact_attention(q, k, v, mask, prefix if with_prefix else None)
    fused, matmuls = run(True), run(False)
    assert len(calls) == (1 if op is not None else 0)
    assert fused.shape == matmuls.shape == ref.shape and fused.dtype == torch.bfloat16
    err = {name: (t.double() - ref).abs().max().item() for name, t in (("kernel", fused), ("matmuls", matmuls))}
    assert err["kernel"] <= 1.05 * err["matmuls"] + 1e-3 and err["kernel"] < 2e-2, err


def test_training_and_prompt_positions_never_take_the_kernel(monkeypatch):
    taken = []
    monkeypatch.setattr(attention, "single_query_attention", lambda: taken.append(1))
    q, k, v, mask, prefix = decoding_case()
    _cascade(q, k, v, mask, prefix, None)  # gradient enabled: a training forward
    with torch.no_grad():
        _cascade(q.float(), k.float(), v.float(), mask, tuple(p.float() for p in prefix), None)  # fp32
        q5 = q.expand(-1, -1, 5, -1)
        _cascade(q5, k, v, mask.expand(-1, -1, 5, -1), prefix, None)  # prompt positions
    assert not taken
    with torch.no_grad():
        _cascade(q, k, v, mask, prefix, None)
    assert taken == [1]


BUILD = textwrap.dedent(
    """
    import sys, warnings, torch
    warnings.simplefilter("always")
    from sead.models import decode_kernel
    op = decode_kernel.single_query_attention()
    print("OP", op is not None)
    if op is not None:
        q = torch.ones(1, 1, 1, 64, dtype=torch.bfloat16)
        out, m, l = op(q, q, q, torch.empty(0, dtype=torch.bool), 0.125)
        print("SUM", float(out.sum() / l.sum()))
    """
)


def build_in(cache, **env):
    done = subprocess.run(
        [sys.executable, "-c", BUILD],
        env={**os.environ, "SEAD_CACHE_DIR": str(cache), **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def test_the_kernel_is_built_once_into_the_cache_and_rebuilt_when_its_file_is_broken(tmp_path):
    out, err = build_in(tmp_path)
    if not decode_kernel.cpu_supports():
        assert "OP False" in out and not (tmp_path / "kernels").exists()
        return
    assert "OP True" in out and "SUM 64.0" in out and "building" in err
    (built,) = (tmp_path / "kernels").glob("single_query_attention-*.so")
    left = sorted(p.name for p in (tmp_path / "kernels").iterdir())
    assert left == sorted([built.name, built.with_suffix(".sha256").name])  # no build folder left behind
    out, err = build_in(tmp_path)
    assert "OP True" in out and "building" not in err  # loaded from the cache
    built.write_bytes(built.read_bytes()[:1000])  # a truncated file (loading it would crash the process)
    out, err = build_in(tmp_path)
    assert "OP True" in out and "SUM 64.0" in out and "building" in err and built.stat().st_size > 1000


def test_without_a_compiler_or_when_turned_off_decoding_takes_the_matmul_path(tmp_path):
    out, err = build_in(tmp_path, CXX=str(tmp_path / "no-such-compiler"))
    assert "OP False" in out and not list((tmp_path / "kernels").glob("*.so"))
    if decode_kernel.cpu_supports():
        assert "not used" in err and "no-such-compiler" in err  # a warning that names the cause
    out, _ = build_in(tmp_path, SEAD_DECODE_KERNEL="0")
    assert "OP False" in out


def test_a_model_with_64_wide_heads_decodes_through_the_kernel_no_further_from_fp32(op, monkeypatch):
    """SmolLM2's head size (64) and grouping (3 query heads per key/value head) in a small random model: bf16
    decoding steps with the kernel stay as close to the fp32 logits as with the matmul path."""
    from sead.models.attention import NAME
    from sead.models.loading import ModelConfig, load_model

    cfg = ModelConfig(preset="tiny", dtype="float32", hidden=384, heads=6, kv_heads=2, init_seed=3)
    model = load_model(cfg)[0].eval()
    exact = copy.deepcopy(model)
    exact.set_attn_implementation("sdpa")
    fast = copy.deepcopy(model).to(torch.bfloat16)
    assert fast.config._attn_implementation == NAME
    calls = []
    if op is not None:
        monkeypatch.setattr(attention, "single_query_attention", lambda: lambda *a: calls.append(1) or op(*a))
    ids = torch.randint(5, 900, (3, 20), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :4], mask[2, :9] = 0, 0  # left padding of different lengths

    def steps(m, kernel=True, n=4):
        monkeypatch.setattr(attention, "USE_KERNEL", kernel)
        with torch.no_grad():
            out = m(input_ids=ids, attention_mask=mask, use_cache=True)
            cache, nxt, am, logits = out.past_key_values, ids[:, -1:], mask, []
            for _ in range(n):
                am = torch.cat([am, torch.ones_like(nxt)], 1)
                out = m(input_ids=nxt, attention_mask=am, past_key_values=cache, use_cache=True)
                logits.append(out.logits[:, -1].float().log_softmax(-1))
        return logits

    ref, with_kernel, without = steps(exact), steps(fast), steps(fast, kernel=False)
    assert len(calls) == (4 * cfg.layers if op is not None else 0)
    for r, a, b in zip(ref, with_kernel, without):
        assert (a - r).abs().max() <= 1.5 * (b - r).abs().max() + 1e-3


def test_prebuild_compiles_a_dtypes_kernels_once_beside_other_work(tmp_path, monkeypatch):
    """`prebuild` starts one build per kernel of the dtype, in the background; a first use while one runs waits
    for it and builds nothing more; nothing starts where kernels are off or the CPU lacks their instructions."""
    import threading

    monkeypatch.setenv("SEAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(decode_kernel, "_PREBUILDS", {})
    monkeypatch.setattr(decode_kernel, "cpu_supports", lambda isa="avx512_bf16": isa == "avx2")
    monkeypatch.setattr(decode_kernel, "_registered", lambda name: None)  # as in a process that loaded none yet
    release, builds = threading.Event(), []

    def slow_build(name, target):  # writes a library file that is intact (its digest matches) but does not load
        builds.append(name)
        release.wait(10)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"not a library")
        decode_kernel._digest_file(target).write_text(decode_kernel._digest(target))

    monkeypatch.setattr(decode_kernel, "_build", slow_build)
    decode_kernel.prebuild("bfloat16")  # this CPU "lacks" AVX512-BF16: nothing to build
    assert decode_kernel._PREBUILDS == {}
    decode_kernel.prebuild("float32")
    wanted = sorted(n for n, (_, isa) in decode_kernel.KERNELS.items() if isa == "avx2")
    assert sorted(decode_kernel._PREBUILDS) == wanted
    decode_kernel.prebuild("float32")  # asked again while they run: no second build
    first_use = threading.Thread(target=decode_kernel._load, args=(wanted[0],))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fake library does not load: the operators' path, with a warning
        first_use.start()
        first_use.join(0.5)
        assert first_use.is_alive()  # it waits for the background build
        release.set()
        first_use.join(10)
        for build in decode_kernel._PREBUILDS.values():
            build.join(10)
    assert not first_use.is_alive() and sorted(builds) == wanted  # each compiled once
    monkeypatch.setenv("SEAD_DECODE_KERNEL", "0")
    monkeypatch.setattr(decode_kernel, "_PREBUILDS", {})
    decode_kernel.prebuild("float32")
    assert decode_kernel._PREBUILDS == {}
