"""Sampling from oneDNN-packed weights changes nothing but speed: in bf16 the same tokens and bit-equal log-probs
as `F.linear`, the model's own forward back after every call, packs that follow in-place weight updates."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sead.dialogue import AgentRequest
from sead.models.packed_linear import PackedLinears, packing_available
from sead.policy.hf import HFPolicy
from sead.policy.settings import SamplingConfig

ONEDNN_BF16 = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def dialogues(policy, tok, turns=3, rows=3):
    prefix = tok.encode("System: you are Alex, follow the SOP. " * 4, add_special_tokens=False)
    prompts = [prefix + tok.encode(f" hello {r}", add_special_tokens=False) for r in range(rows)]
    outs = []
    for t in range(turns):
        got = policy.sample([AgentRequest(p, [], 6, seed=10 * r + t) for r, p in enumerate(prompts)])
        outs.append([(o.token_ids, o.logprobs) for o in got])
        prompts = [p + o.token_ids + tok.encode(f" user {t}", add_special_tokens=False) for p, o in zip(prompts, got)]
    return outs


@pytest.fixture(scope="module")
def tiny_bf16(tiny):
    return copy.deepcopy(tiny[0]).to(torch.bfloat16), tiny[1]


def swapped(model):
    return [m for m in model.modules() if "forward" in m.__dict__]


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=0.0), SamplingConfig(temperature=1.0, top_p=0.9)])
def test_bf16_packed_sampling_is_bit_equal_to_plain_linear(tiny_bf16, sampling):
    model, tok = tiny_bf16
    packed = HFPolicy(model, tok, sampling)
    assert packed.packed.enabled == ONEDNN_BF16  # without oneDNN bf16 kernels the plain path is the only one
    assert dialogues(packed, tok) == dialogues(HFPolicy(model, tok, sampling, pack_weights=False), tok)
    assert not swapped(model)  # every layer has its own forward again
    assert HFPolicy(model, tok, sampling).packed is packed.packed  # one set of packs per model


def test_the_shared_packs_do_not_keep_a_model_alive():
    import gc
    import weakref

    model = nn.Sequential(nn.Linear(8, 8)).to(torch.bfloat16)
    PackedLinears.for_model(model)
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None


def test_linears_compute_from_packs_only_inside_the_block_even_when_it_fails(tiny_bf16):
    model, _ = tiny_bf16
    packs = PackedLinears(model)
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    with pytest.raises(RuntimeError, match="boom"), packs.active():
        assert swapped(model) == (linears if ONEDNN_BF16 else [])
        raise RuntimeError("boom")
    assert not swapped(model)


@torch.no_grad()
def test_packs_follow_in_place_weight_updates_and_subclasses_keep_their_forward():
    """In fp32 (opt-in), which oneDNN packs on any x86 CPU, so this runs whatever the machine."""

    class Custom(nn.Linear):
        pass

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 96), Custom(96, 32))
    x = torch.randn(5, 1, 64)
    packs = PackedLinears(model, dtypes=(torch.float32,))
    with packs.active():
        before = model(x)
        assert swapped(model) == [model[0]]
    model[0].weight.mul_(0.5)  # what an update of the rollout copy does to its parameters
    with packs.active():
        after = model(x)
    expected = model[1](F.linear(x, model[0].weight, model[0].bias))
    assert torch.allclose(after, expected, atol=1e-5) and not torch.allclose(after, before, atol=1e-2)


@torch.no_grad()
def test_fp32_is_packed_only_when_asked_for_and_then_within_a_few_parts_per_million(tiny):
    model, _ = tiny
    assert not packing_available(model)
    layer = nn.Linear(576, 1536)
    x = torch.randn(8, 576)
    with PackedLinears(layer, dtypes=(torch.float32,)).active():
        got = layer(x)
    expected = F.linear(x, layer.weight, layer.bias)
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-5 * float(expected.abs().max()))
