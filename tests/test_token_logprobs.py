"""`sead.trainer.token_logprobs`: the chosen tokens' log-probs and the entropies through the LM head a slice of rows
at a time give the plain way's values and gradients (log-softmax over the full logits), for the hidden states, the
head's weight and bias, in fp32 and under bf16 autocast over fp32 weights."""

import pytest
import torch

import sead.trainer.token_logprobs as tl
from sead.trainer.token_logprobs import token_logprobs


def plain(head, hidden, targets, temperature):
    every = torch.log_softmax(head(hidden).float() / temperature, -1)
    return every.gather(-1, targets[:, None]).squeeze(-1), -(every.exp() * every).sum(-1)


def values_and_grads(fn, head, hidden, targets, weights):
    """Outputs and the gradients of a * sum(logp) + b * sum(entropy) for the hidden states and the head."""
    hidden = hidden.detach().requires_grad_()
    head.zero_grad(set_to_none=True)
    logp, ent = fn(head, hidden, targets, 0.7)
    a, b = weights
    (a * (logp * torch.linspace(0.5, 1.5, len(logp), device=logp.device)).sum() + b * ent.sum()).backward()
    grads = [hidden.grad, head.weight.grad] + ([head.bias.grad] if head.bias is not None else [])
    return [logp.detach(), ent.detach()], grads


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows_per_slice", [1, 3, 1000])  # one row, a partial last slice, everything in one
@pytest.mark.parametrize("weights", [(1.0, 0.0), (0.0, 1.0), (1.0, -0.3)])  # log-probs, entropy, both
def test_values_and_gradients_are_the_plain_way_s_in_fp32(bias, rows_per_slice, weights, monkeypatch):
    torch.manual_seed(0)
    vocab = 97
    monkeypatch.setattr(tl, "CHUNK_ELEMENTS", rows_per_slice * vocab)
    head = torch.nn.Linear(24, vocab, bias=bias)
    hidden, targets = torch.randn(11, 24) * 2, torch.randint(0, vocab, (11,))
    ours, ref = (values_and_grads(f, head, hidden, targets, weights) for f in (token_logprobs, plain))
    (ours, ours_g), (ref, ref_g) = ours, ref
    for x, y in zip(ours + ours_g, ref + ref_g):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


def test_under_bf16_autocast_it_is_the_plain_way_within_bf16_rounding():
    """fp32 master weights, bf16 matmuls: the same bf16 logits, so the log-probs agree to fp32 rounding; the
    gradients (bf16 matmuls both ways, summed in another order) to bf16's."""
    torch.manual_seed(1)
    head = torch.nn.Linear(64, 500, bias=False)
    hidden, targets = torch.randn(40, 64), torch.randint(0, 500, (40,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        (ours, ours_g), (ref, ref_g) = (
            values_and_grads(f, head, hidden, targets, (1.0, 0.2)) for f in (token_logprobs, plain)
        )
    torch.testing.assert_close(ours[0], ref[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours[1], ref[1], rtol=1e-5, atol=1e-5)
    for x, y in zip(ours_g, ref_g):
        assert x.dtype == y.dtype == torch.float32  # the master weights' gradient, as autocast's own cast gives
        assert float((x - y).norm() / y.norm()) < 1e-2


def test_a_head_other_than_a_plain_linear_runs_as_a_module():
    """An adapter or any wrapper around the head must run its own forward: its weight alone is not the head."""

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Linear(8, 30, bias=False)

        def forward(self, x):
            return 2.0 * self.inner(x)

    torch.manual_seed(2)
    head, hidden, targets = Scaled(), torch.randn(5, 8), torch.randint(0, 30, (5,))
    logp, ent = token_logprobs(head, hidden, targets, 1.0)
    ref_logp, ref_ent = plain(head, hidden, targets, 1.0)
    torch.testing.assert_close(logp, ref_logp)
    torch.testing.assert_close(ent, ref_ent)
