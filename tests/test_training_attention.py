"""The compiled causal attention of training forwards (sead/models/training_attention.py, csrc/causal_attention.cpp):
its output and gradients against fp64 attention with the mask it stands for, no further from exact than torch's bf16
kernel given that mask, packed segments blind to each other, bad input refused with the reason, and
`masked_logprobs` taking it (log-probs and the weights' gradient as close to fp32 as torch's kernel makes them).

On a CPU without AVX512-BF16 the kernel is never built: there these tests check that it is not offered and that
training keeps torch's kernel."""

import pytest
import torch
import torch.nn.functional as F
from test_decode_step import llama

from sead.models import decode_kernel, training_attention
from sead.trainer.estimators import Sequence
from sead.trainer.scoring import masked_logprobs


@pytest.fixture(scope="module")
def ops():
    found = decode_kernel.causal_attention()
    assert (found is not None) == decode_kernel.offered(), "the kernel is offered exactly where the CPU runs it"
    return found


def case(kv=3, group=3, prefix=21, lengths=(37, 30, 1), seed=0):
    """One packed row: bf16 queries laid out as transformers gives them (a transposed view), keys/values over the
    prefix and the segments' positions, and a gradient for the output."""
    g = torch.Generator().manual_seed(seed)
    queries = sum(lengths)
    q = torch.randn((1, queries, kv * group, 64), generator=g).bfloat16().transpose(1, 2)
    k, v = (torch.randn((1, kv, prefix + queries, 64), generator=g).bfloat16() for _ in "kv")
    grad = torch.randn((1, queries, kv * group, 64), generator=g).bfloat16()
    return q, k, v, grad, torch.tensor(lengths)


def mask_of(lengths, prefix):
    """sdpa's boolean mask for the packed row: a query sees the prefix and its own segment up to itself."""
    segment = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    at = torch.arange(len(segment))
    own = (segment[:, None] == segment[None, :]) & (at[None, :] <= at[:, None])
    return torch.cat([torch.ones(len(segment), prefix, dtype=torch.bool), own], 1)[None, None]


def reference(q, k, v, lengths, dtype):
    """torch's attention with the mask, in `dtype` (fp64: exact), as (1, queries, heads, 64)."""
    mask = mask_of(lengths, k.shape[2] - q.shape[2])
    out = F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), attn_mask=mask, enable_gqa=True)
    return out.transpose(1, 2)


def with_grads(fn, q, k, v, grad):
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves)
    out.backward(grad.to(out.dtype))
    return out.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize(
    "shape",
    [
        dict(),  # the shared prompt, segments of several lengths, one of a single token
        dict(prefix=0, lengths=(5, 3, 2)),  # no shared prompt: each segment's first query sees one key
        dict(kv=1, group=9, prefix=130, lengths=(70, 65, 17)),  # key counts past the 64-key granule
        dict(kv=2, group=1, prefix=64, lengths=(16,)),  # no grouping, one segment of whole tiles
    ],
)
def test_output_and_gradients_match_fp64_as_closely_as_torch_s_bf16_kernel(ops, shape):
    if ops is None:
        return
    q, k, v, grad, lengths = case(**shape)
    scale = 64**-0.5
    out, grads = with_grads(lambda *t: training_attention.causal_attention(*t, lengths, scale), q, k, v, grad)
    exact, exact_grads = with_grads(lambda *t: reference(*t, lengths, torch.float64), q, k, v, grad)
    torch_out, torch_grads = with_grads(lambda *t: reference(*t, lengths, torch.bfloat16), q, k, v, grad)
    assert out.dtype == torch.bfloat16 and out.shape == exact.shape
    err = (out.double() - exact).abs().max().item()
    torch_err = (torch_out.double() - exact).abs().max().item()
    assert err < 2e-2 and err <= 2 * torch_err + 2e-3, (err, torch_err)
    for name, mine, theirs, truth in zip("qkv", grads, torch_grads, exact_grads):
        assert mine.shape == truth.shape and mine.dtype == torch.bfloat16, name
        gap = ((mine.double() - truth).norm() / truth.norm()).item()
        torch_gap = ((theirs.double() - truth).norm() / truth.norm()).item()
        assert gap < 2e-2 and gap <= 2 * torch_gap + 2e-3, (name, gap, torch_gap)


def test_a_segment_sees_nothing_of_the_others(ops):
    """Changing one segment's keys, values and queries leaves every other segment's output and gradients as they
    were, bit for bit, and changes the shared prefix's gradient, which every segment adds to."""
    if ops is None:
        return
    q, k, v, grad, lengths = case()
    prefix, run = k.shape[2] - q.shape[2], lambda *t: training_attention.causal_attention(*t, lengths, 0.125)
    out, (dq, dk, dv) = with_grads(run, q, k, v, grad)
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    second = slice(prefix + 37, prefix + 67)  # the second segment's own keys
    k2[:, :, second], v2[:, :, second], q2[:, :, 37:67] = 0.5, -0.5, 1.0
    out2, (dq2, dk2, dv2) = with_grads(run, q2, k2, v2, grad)
    for a, b in ((out, out2), (dq.transpose(1, 2), dq2.transpose(1, 2))):
        assert torch.equal(a[:, :37], b[:, :37]) and torch.equal(a[:, 67:], b[:, 67:])
        assert not torch.equal(a[:, 37:67], b[:, 37:67])
    own = [slice(prefix, prefix + 37), slice(prefix + 67, None)]
    assert all(torch.equal(dk[:, :, s], dk2[:, :, s]) and torch.equal(dv[:, :, s], dv2[:, :, s]) for s in own)
    assert not torch.equal(dk[:, :, :prefix], dk2[:, :, :prefix])


def test_bad_input_is_refused_with_the_reason(ops):
    if ops is None:
        return
    q, k, v, _, lengths = case()
    q, k, v = q[0], k[0], v[0]
    starts = torch.cumsum(lengths, 0) - lengths
    forward = ops.causal_attention_forward
    with pytest.raises(RuntimeError, match="bf16"):
        forward(q.float(), k, v, starts, lengths, 0.125)
    with pytest.raises(RuntimeError, match="head size 64"):
        forward(torch.zeros(9, 68, 128).bfloat16(), torch.zeros(3, 89, 128).bfloat16(), v, starts, lengths, 0.125)
    with pytest.raises(RuntimeError, match="add up to the queries"):
        forward(q, k, v, starts, torch.tensor([37, 30, 2]), 0.125)
    with pytest.raises(RuntimeError, match="follow each other from 0"):
        forward(q, k, v, starts + 1, lengths, 0.125)
    with pytest.raises(RuntimeError, match="fewer key positions than queries"):
        forward(q, k[:, :10], v[:, :10], starts, lengths, 0.125)
    with pytest.raises(RuntimeError, match="multiple of key/value heads"):
        forward(q[:8], k, v, starts, lengths, 0.125)
    with pytest.raises(RuntimeError, match="one per segment"):
        forward(q, k, v, starts[:2], lengths, 0.125)
    with pytest.raises(ValueError, match="one row"):
        training_attention.causal_attention(q[None].expand(2, -1, -1, -1), k[None], v[None], lengths, None)


def small_llama():
    """A random 2-layer Llama with 64-wide heads grouped 3 to 1 (SmolLM2's attention shape), fp32 weights."""
    torch.manual_seed(0)
    return llama(vocab_size=300, hidden_size=192, num_attention_heads=3, num_key_value_heads=1)


def sequences() -> list[Sequence]:
    """A shared 40-token prompt, then each row's own turns (agent tokens trained), of different lengths."""
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(1, 300, (40,), generator=g)
    seqs = []
    for n in (90, 61, 33):
        ids = torch.cat([prompt, torch.randint(1, 300, (n,), generator=g)])
        mask = torch.zeros(len(ids), dtype=torch.long)
        mask[50::2] = 1
        seqs.append(Sequence(ids, mask, 1.0, episode=len(seqs)))
    return seqs


def test_masked_logprobs_takes_the_kernel_and_is_as_close_to_fp32_as_torch_s_kernel(ops, monkeypatch):
    """Under bf16 autocast over fp32 weights (the trainer's precision on such CPUs) the sequences' packed forward
    and the shared prompt's go through the kernel; log-probs and the weights' gradient are as close to the fp32
    forward's as with padded rows, torch's kernel and the mask."""
    model, seqs = small_llama(), sequences()
    calls = []
    apply = training_attention._CausalAttention.apply
    monkeypatch.setattr(training_attention._CausalAttention, "apply", lambda *a: calls.append(1) or apply(*a))

    def run(autocast: bool, kernel: bool):
        monkeypatch.setattr(training_attention, "ENABLED", kernel)
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logps = torch.cat(masked_logprobs(model, seqs, 1.0).logps)
        (logps * torch.linspace(-1, 1, len(logps))).sum().backward()
        return logps.detach().double(), torch.cat([p.grad.flatten() for p in model.parameters()]).double()

    exact_logp, exact_grad = run(autocast=False, kernel=False)
    torch_logp, torch_grad = run(autocast=True, kernel=False)
    assert not calls
    logp, grad = run(autocast=True, kernel=True)
    if ops is None:
        assert not calls
        return
    assert len(calls) == 2 * 2  # the shared prompt's forward and the rows', each layer
    err, torch_err = ((t - exact_logp).abs().max().item() for t in (logp, torch_logp))
    assert err <= 2 * torch_err + 1e-3, (err, torch_err)
    gap, torch_gap = (((g - exact_grad).norm() / exact_grad.norm()).item() for g in (grad, torch_grad))
    assert gap <= 2 * torch_gap + 1e-3 and gap < 5e-2, (gap, torch_gap)
