"""Rollout-vs-trainer mismatch (sead/trainer/rollout_correction.py): TIS weights and the logged mismatch, by hand
and through the update; and the old-log-prob pass skipped when one epoch makes it the training forward's."""

import copy
import math

import pytest
import torch
from test_trainer_update import make_sequence

from sead.trainer.rollout_correction import RolloutMismatch
from sead.trainer.schema import UpdateConfig
from sead.trainer.scoring import masked_logprobs
from sead.trainer.update import Updater


def test_weights_are_capped_ratios_and_sequences_without_rollout_numbers_weigh_one():
    cfg = UpdateConfig(rollout_is_threshold=2.0)
    trainer = torch.log(torch.tensor([0.5, 0.5, 0.2, 0.9]))
    # sequence 1 (2 tokens): the rollout gave 0.25 and 0.5 -> ratios 2 and 1; sequence 2 (2 tokens): no numbers
    rollout = [torch.log(torch.tensor([0.25, 0.5])), None]
    m = RolloutMismatch()
    w = m.weights(trainer, rollout, [2, 2], cfg)
    assert w.tolist() == pytest.approx([2.0, 1.0, 1.0, 1.0])
    # a ratio of 4 is capped at the threshold
    m.weights(torch.log(torch.tensor([0.8])), [torch.log(torch.tensor([0.2]))], [1], cfg)
    s = m.summary()
    assert s["rollout_ratio_max"] == pytest.approx(4.0) and s["rollout_is_capped"] == pytest.approx(1 / 3)
    # k3 per known token: r - 1 - ln r for r = 2, 1, 4
    k3 = [(r - 1 - math.log(r)) for r in (2.0, 1.0, 4.0)]
    assert s["rollout_kl"] == pytest.approx(sum(k3) / 3)
    assert RolloutMismatch().weights(trainer, [None, None], [2, 2], cfg) is None


def test_off_measures_the_mismatch_but_weighs_nothing():
    m = RolloutMismatch()
    w = m.weights(torch.zeros(2), [torch.full((2,), -1.0)], [2], UpdateConfig(rollout_is="off"))
    assert w is None and m.summary()["rollout_ratio_max"] == pytest.approx(math.e)


def _update(tiny, cfg, rollout_shift=None):
    model, tok = tiny
    policy = copy.deepcopy(model)
    seqs = [make_sequence(tok, 1.0), make_sequence(tok, -0.5)]
    if rollout_shift is not None:
        exact = masked_logprobs(policy, seqs, 1.0).logps
        for s, lp in zip(seqs, exact):
            s.rollout_logp = lp.detach() + rollout_shift
    return policy, Updater(policy, None, cfg, temperature=1.0).step(seqs)


def test_the_update_weighs_each_token_by_its_capped_ratio(tiny):
    cfg = dict(lr=1e-2, kl_coef=0.0)
    _, plain = _update(tiny, UpdateConfig(**cfg, rollout_is="off"), rollout_shift=-1.0)
    _, same = _update(tiny, UpdateConfig(**cfg), rollout_shift=0.0)
    _, corrected = _update(tiny, UpdateConfig(**cfg), rollout_shift=-1.0)  # ratio e, capped at 2
    assert same["rollout_kl"] == pytest.approx(0.0, abs=1e-5) and same["rollout_ratio_max"] == pytest.approx(1.0)
    assert same["pg_loss"] == pytest.approx(plain["pg_loss"], rel=1e-4)  # ratio 1: nothing changes
    assert corrected["rollout_is_capped"] == 1.0 and corrected["rollout_ratio_max"] == pytest.approx(math.e)
    assert corrected["pg_loss"] == pytest.approx(2.0 * plain["pg_loss"], rel=1e-4)


def test_one_epoch_skips_the_old_log_prob_pass_and_trains_the_same_weights(tiny, monkeypatch):
    cfg = UpdateConfig(lr=1e-2, kl_coef=0.0)
    fast, _ = _update(tiny, cfg)
    monkeypatch.setattr(Updater, "_needs_old_pass", property(lambda self: True))
    calls = []
    real = masked_logprobs

    def counting(*a, **k):
        calls.append(k.get("with_entropy", False))
        return real(*a, **k)

    monkeypatch.setattr("sead.trainer.update.masked_logprobs", counting)
    slow, _ = _update(tiny, cfg)
    assert calls.count(False) == 1  # the separate pass ran here, and only here
    for a, b in zip(fast.parameters(), slow.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
