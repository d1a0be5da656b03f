"""Activation recomputation (trainer.recompute_activations) on the tiny model: the same log-probs and gradients as
keeping every activation, through the shared prompt's key/value cache, in a fraction of the saved memory."""

import copy

import pytest
import torch
from transformers import DynamicCache

from sead.trainer.estimators import Sequence
from sead.trainer.recompute import decoder_layers, recomputing
from sead.trainer.schema import UpdateConfig
from sead.trainer.scoring import masked_logprobs
from sead.trainer.update import Updater


def dialogues(prompt_len: int = 40) -> list[Sequence]:
    """Three sequences that start with one prompt, agent tokens after it (the shape SEAD trains on)."""
    torch.manual_seed(5)
    prompt = torch.randint(5, 400, (prompt_len,))
    seqs = []
    for n, reply_at in ((20, 3), (26, 5), (12, 2)):
        ids = torch.cat([prompt, torch.randint(5, 400, (n,))])
        mask = torch.zeros_like(ids)
        mask[prompt_len + reply_at :] = 1
        seqs.append(Sequence(ids, mask, 1.0 if n % 2 else -1.0))
    return seqs


def gradient(model, loss_of) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    loss_of().backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def weighted(scored) -> torch.Tensor:
    logp = torch.cat(scored.logps)
    return (logp * torch.linspace(-1.0, 1.0, len(logp))).sum()  # advantages of both signs


@pytest.mark.parametrize("share_prefix", [True, False])
def test_scoring_gives_the_same_logprobs_and_gradient_with_recomputed_activations(tiny, share_prefix):
    model, _ = tiny
    seqs = dialogues()
    plain = masked_logprobs(model, seqs, 0.7, share_prefix=share_prefix)
    exact = gradient(model, lambda: weighted(masked_logprobs(model, seqs, 0.7, share_prefix=share_prefix)))
    with recomputing(model):
        again = masked_logprobs(model, seqs, 0.7, share_prefix=share_prefix)
        got = gradient(model, lambda: weighted(masked_logprobs(model, seqs, 0.7, share_prefix=share_prefix)))
    for a, b in zip(again.logps, plain.logps):
        assert torch.equal(a, b)
    assert torch.allclose(got, exact, atol=1e-6, rtol=1e-4)


def test_a_cache_built_as_the_layers_run_is_rerun_from_its_state_before_each_layer(tiny):
    """A cache whose layer entries appear on first use (`DynamicCache()`), then a second forward appending to it:
    each layer's rerun starts from the entry its first run found."""
    model, _ = tiny
    ids = torch.randint(5, 400, (1, 30))

    def loss() -> torch.Tensor:
        cache = DynamicCache()
        first = model(input_ids=ids[:, :18], past_key_values=cache, use_cache=True).logits
        second = model(input_ids=ids[:, 18:], past_key_values=cache, use_cache=True).logits
        return first.square().mean() + second.square().mean()

    exact = gradient(model, loss)
    with recomputing(model):
        got = gradient(model, loss)
    assert torch.allclose(got, exact, atol=1e-6, rtol=1e-4)


def saved_bytes(model, ids: torch.Tensor, enabled: bool) -> int:
    """Bytes of the activations (not the weights) a trunk forward keeps for the backward pass outside any
    recomputed layer."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept = []

    def pack(t):
        if t.untyped_storage().data_ptr() not in weights:
            kept.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), recomputing(model, enabled):
        model.model(input_ids=ids, use_cache=True)
    return sum(kept)


def test_recomputed_layers_keep_a_fraction_of_the_activations(tiny):
    model, _ = tiny
    ids = torch.randint(5, 400, (1, 1000))
    assert saved_bytes(model, ids, enabled=True) * 5 < saved_bytes(model, ids, enabled=False)


def test_an_update_with_recomputed_activations_steps_with_the_same_gradient(tiny):
    model, _ = tiny
    given = []
    for context in (lambda: recomputing(model, False), lambda: recomputing(model)):
        upd = Updater(
            model, None, UpdateConfig(lr=1e-9, kl_coef=0.0, micro_batch=2, grad_clip=1e9), temperature=1.0,
            forward_context=context,
        )  # fmt: skip
        upd.opt.register_step_pre_hook(
            lambda *_: given.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
        )
        upd.step(copy.deepcopy(dialogues()))
    assert torch.allclose(given[1], given[0], atol=1e-6, rtol=1e-4)


def test_layers_are_themselves_again_after_the_block_and_a_copy_runs_its_own_weights(tiny):
    model, _ = tiny
    layers = decoder_layers(model)
    assert len(layers) == model.config.num_hidden_layers
    ids = torch.randint(5, 400, (1, 12))
    with recomputing(model):
        assert all("forward" in vars(layer) for layer in layers)
    assert not any("forward" in vars(layer) for layer in layers)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for p in twin.parameters():
            p.add_(0.1)
        assert not torch.equal(twin(input_ids=ids).logits, model(input_ids=ids).logits)
