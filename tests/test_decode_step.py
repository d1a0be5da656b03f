"""The written-out decoding step (`sead.models.decode_step`) changes nothing but speed: the same logits bit for bit
as the transformers forward, the same dialogues from `HFPolicy`, weights followed after updates, and the model's
own forward wherever the step does not reproduce it exactly."""

import copy

import pytest
import torch
from test_packed_linear import dialogues
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from sead.dialogue import AgentRequest
from sead.models import decode_step
from sead.models.attention import use_gqa_attention
from sead.models.decode_step import DecodeStep, supported
from sead.policy.hf import HFPolicy, prompt_mask
from sead.policy.settings import SamplingConfig
from sead.policy.turn_cache import BatchCache

SAMPLINGS = [SamplingConfig(temperature=0.0), SamplingConfig(temperature=1.0, top_p=0.9)]


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def model(request, tiny):
    return copy.deepcopy(tiny[0]).to(getattr(torch, request.param)), tiny[1]


@pytest.fixture(autouse=True)
def onednn_linears(monkeypatch):
    """The small-rows kernel and the fused step (tested in test_small_rows_linear.py and test_decode_layers.py) sum
    in other orders than oneDNN and the operators; bits are compared here with oneDNN's linears."""
    monkeypatch.setattr(decode_step, "USE_SMALL_ROWS", False)
    monkeypatch.setattr(decode_step, "USE_FUSED", False)


@torch.no_grad()
def one_step(model, rows=3, prompt=7, capacity=12, seed=0):
    """One decoding token per row after a prompt (one row left-padded), through the model's forward and through
    `DecodeStep`: (forward logits, step logits, forward cache, step cache)."""
    torch.manual_seed(seed)
    ids = torch.randint(0, 500, (rows, prompt))
    attn = torch.zeros((rows, capacity), dtype=torch.bool)
    attn[:, :prompt] = True
    attn[0, :2] = False  # a row with padding in front
    pos = (attn[:, :prompt].cumsum(-1) - 1).clamp(min=0)
    caches = []
    for _ in range(2):
        cache = BatchCache(capacity)
        mask = prompt_mask(attn, 0, prompt)
        model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True)
        caches.append(cache)
    attn[:, prompt] = True
    token, position = torch.randint(0, 500, (rows,)), pos[:, -1] + 1
    want = model(
        input_ids=token[:, None],
        attention_mask=attn[:, None, None, :],
        position_ids=position[:, None],
        past_key_values=caches[0],
        use_cache=True,
    ).logits
    got = DecodeStep.for_model(model)(token, position, attn[:, None, None, :], caches[1], torch.tensor([prompt]))
    return want, got, caches[0], caches[1]


def test_one_step_gives_the_forward_s_logits_and_cache_bit_for_bit(model):
    want, got, cache, step_cache = one_step(model[0])
    assert torch.equal(got, want)
    for a, b in zip(cache.layers, step_cache.layers):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_sampling_is_bit_equal_to_the_model_s_own_forward(model, sampling):
    """Several turns of three rows after a shared prefix, each turn reading the earlier ones from the turn cache."""
    model, tok = model
    fast = HFPolicy(model, tok, sampling)
    assert fast.decode_step is not None
    assert dialogues(fast, tok) == dialogues(HFPolicy(model, tok, sampling, fast_decode=False), tok)


def test_decoding_runs_through_the_step_and_prompts_through_the_model(model):
    model, tok = model
    calls = []
    hook = model.register_forward_hook(lambda m, a, k, out: calls.append(k["input_ids"].shape[1]), with_kwargs=True)
    try:
        got = HFPolicy(model, tok, SamplingConfig(temperature=1.0)).sample([AgentRequest([1, 2, 3, 4], [], 8, seed=1)])
    finally:
        hook.remove()
    assert len(got[0].token_ids) == 8  # a random tiny model does not stop early at this seed
    assert calls == [4]  # the prompt once; no decoding step went through the model's forward


def test_the_step_follows_weight_updates(model):
    model, tok = copy.deepcopy(model[0]), model[1]
    policies = HFPolicy(model, tok, SAMPLINGS[1]), HFPolicy(model, tok, SAMPLINGS[1], fast_decode=False)
    before = dialogues(policies[0], tok, turns=1)
    assert before == dialogues(policies[1], tok, turns=1)
    with torch.no_grad():  # in place, as an optimiser step or the rollout copy's refresh changes them
        for p in model.parameters():
            p.mul_(1.5)
    after = dialogues(policies[0], tok, turns=1)
    assert after != before
    assert after == dialogues(policies[1], tok, turns=1)


def llama(**overrides) -> LlamaForCausalLM:
    conf = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    conf.update(overrides)
    model = LlamaForCausalLM(LlamaConfig(intermediate_size=64, **conf))
    use_gqa_attention(model)
    return model


def test_only_what_the_step_reproduces_exactly_is_taken():
    assert supported(llama())
    assert not supported(llama(attention_bias=True))
    assert not supported(llama(hidden_act="gelu"))
    scaled = llama()
    scaled.config.rope_parameters = {**scaled.config.rope_parameters, "rope_type": "linear", "factor": 2.0}
    assert not supported(scaled)
    eager = llama()
    eager.set_attn_implementation("eager")
    assert not supported(eager) and DecodeStep.for_model(eager) is None

    class Adapted(nn.Linear):  # what a LoRA or quantised layer looks like: a forward of its own
        pass

    wrapped = llama()
    wrapped.model.layers[1].mlp.up_proj = Adapted(32, 64, bias=False)
    assert not supported(wrapped)


def test_autocast_and_gradients_keep_the_model_s_forward(model):
    step = DecodeStep.for_model(model[0])
    with torch.no_grad():
        assert step.usable()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not step.usable()
    assert not step.usable()  # with gradients on, the caller runs the model (the step builds no graph for them)
    with torch.no_grad():
        model[0].set_attn_implementation("sdpa")
        try:
            assert not step.usable()
        finally:
            use_gqa_attention(model[0])
        assert step.usable()
