"""The compiled small-rows linear kernel (`csrc/small_rows_linear.cpp`, built by sead/models/decode_kernel.py): its
products against fp64, as close as torch's own bf16 linear; bad inputs refused with the reason; the decoding step
taking it at up to `SMALL_ROWS` rows and oneDNN above, its logits as close to fp32 as oneDNN's.

On a CPU without AVX512-BF16 the kernel is never offered: there these tests check that, and that the step keeps
oneDNN's linears."""

import copy

import pytest
import torch
import torch.nn.functional as F
from test_decode_step import one_step

from sead.models import decode_kernel, decode_step
from sead.models.decode_kernel import pack_small_rows


@pytest.fixture(scope="module")
def op():
    found = decode_kernel.small_rows_linear()
    assert (found is not None) == decode_kernel.cpu_supports(), "the kernel is offered exactly where the CPU runs it"
    return found


def weights_and_rows(rows, out, inputs, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn((out, inputs), generator=g) * 0.1).bfloat16()
    x = torch.randn((rows, 1, inputs + 5), generator=g).bfloat16()[..., 2 : inputs + 2]  # a strided view
    return w, x


@pytest.mark.parametrize("out,inputs", [(48, 64), (40, 70), (960, 576), (7, 33), (576, 1536)])
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 12, 13, 40])
def test_products_match_fp64_as_closely_as_torch_s_linear(op, rows, out, inputs):
    """Tiles of 1-12 rows, rows past 12 taken in further passes, odd inputs and padded edges in both dimensions."""
    if op is None:
        return
    w, x = weights_and_rows(rows, out, inputs)
    got = op(x, pack_small_rows(w), out)
    exact = x.double() @ w.double().T
    assert got.shape == (rows, 1, out) and got.dtype == torch.bfloat16
    err = (got.double() - exact).abs()
    assert bool((err <= exact.abs() * 2**-8 + 1e-4).all())  # within bf16's rounding of the exact product
    assert err.max() <= 1.05 * (F.linear(x, w).double() - exact).abs().max() + 1e-6


def test_bad_inputs_are_refused_with_the_reason(op):
    if op is None:
        return
    w, x = weights_and_rows(3, 40, 70)
    packed = pack_small_rows(w)
    with pytest.raises(RuntimeError, match="bf16"):
        op(x.float(), packed, 40)
    with pytest.raises(RuntimeError, match="features"):
        op(x[..., :30], packed, 40)
    with pytest.raises(RuntimeError, match="does not match"):
        op(x, packed, 70)
    with pytest.raises(RuntimeError, match="packed"):
        op(x, packed.view(-1, 32), 40)


def test_the_decoding_step_takes_the_kernel_up_to_small_rows_and_stays_as_close_to_fp32(op, tiny, monkeypatch):
    calls = []
    if op is not None:
        monkeypatch.setattr(decode_step, "small_rows_linear", lambda: lambda *a: calls.append(1) or op(*a))
    reference = copy.deepcopy(tiny[0]).to(torch.bfloat16).float()  # bf16's weights, computed in fp32
    model = copy.deepcopy(reference).to(torch.bfloat16)  # a model of its own: its step is built afresh
    layers = model.config.num_hidden_layers
    for rows in (3, decode_step.SMALL_ROWS + 1):
        exact = one_step(reference, rows=rows)[0].log_softmax(-1)
        calls.clear()
        monkeypatch.setattr(decode_step, "USE_SMALL_ROWS", True)
        fast = one_step(model, rows=rows)[1].float().log_softmax(-1)
        taken = len(calls)
        monkeypatch.setattr(decode_step, "USE_SMALL_ROWS", False)
        onednn = one_step(model, rows=rows)[1].float().log_softmax(-1)
        small = rows <= decode_step.SMALL_ROWS and op is not None
        assert taken == (4 * layers + 1 if small else 0)  # q/k/v, o, gate/up, down per layer, and the head
        assert (fast - exact).abs().max() <= 1.5 * (onednn - exact).abs().max() + 1e-3
        if not small:
            assert torch.equal(fast, onednn)
