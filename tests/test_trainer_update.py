"""Phase 3 on the tiny model: the loss pieces against hand-computed values, and the update touching only
agent tokens while the reference model stays frozen."""

import copy
import math

import pytest
import torch

from sead.trainer.estimators import Sequence
from sead.trainer.losses import clipped_policy_loss, grpo_advantages, low_var_kl
from sead.trainer.schema import UpdateConfig
from sead.trainer.scoring import masked_logprobs
from sead.trainer.update import Updater


def test_grpo_advantages_by_hand():
    # group 0: rewards 1,0,1,1 -> mean .75, sample std sqrt((3*.25^2 + .75^2)/3) = .5
    # -> (1-.75)/.5 = .5 and (0-.75)/.5 = -1.5; group 1 (all equal) -> 0; a lone rollout -> 0
    adv = grpo_advantages(
        torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]), torch.tensor([0, 0, 0, 0, 1, 1, 2]), eps=0.0
    )
    assert adv.tolist() == pytest.approx([0.5, -1.5, 0.5, 0.5, 0.0, 0.0, 0.0])
    centred = grpo_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), normalise_std=False)
    assert centred.tolist() == pytest.approx([0.5, -0.5])


def test_low_var_kl_by_hand():
    # logp = ln .5, ref = ln .25: d = ln .5 = -0.693147; e^d - d - 1 = .5 + .693147 - 1 = .193147
    kl = low_var_kl(torch.tensor([math.log(0.5), math.log(0.3)]), torch.tensor([math.log(0.25), math.log(0.3)]))
    assert kl.tolist() == pytest.approx([0.193147, 0.0], abs=1e-6)


def test_clipped_loss_by_hand():
    old = torch.zeros(4)
    # ratios 1.5, 0.5, 1.25, 1.1; advantages 1, -1, 1, 1
    logp = torch.log(torch.tensor([1.5, 0.5, 1.25, 1.1]))
    adv = torch.tensor([1.0, -1.0, 1.0, 1.0])
    loss, clipped = clipped_policy_loss(logp, old, adv, clip_low=0.2, clip_high=0.2)
    # 1.5 clipped to 1.2 -> -1.2; 0.5 with A<0 -> max(0.5, 0.8) = 0.8; 1.25 -> -1.2; 1.1 inside -> -1.1
    assert loss.tolist() == pytest.approx([-1.2, 0.8, -1.2, -1.1])
    assert clipped.tolist() == [1.0, 1.0, 1.0, 0.0]
    loss_hi, clipped_hi = clipped_policy_loss(logp, old, adv, clip_low=0.2, clip_high=0.28)  # clip-higher
    assert loss_hi.tolist() == pytest.approx([-1.28, 0.8, -1.25, -1.1]) and clipped_hi.tolist() == [1, 1, 0, 0]


def make_sequence(tok, adv):
    ids = torch.tensor(
        tok.encode(
            "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\nhi, this is "
            "Alex<|im_end|>\n<|im_start|>user\nwho?<|im_end|>\n<|im_start|>assistant\nAlex "
            "again<|im_end|>",
            add_special_tokens=False,
        )
    )
    mask = torch.zeros_like(ids)
    mask[12:18] = 1
    mask[-4:] = 1
    return Sequence(ids, mask, adv)


def test_gradient_is_exactly_zero_at_positions_that_predict_user_tokens(tiny):
    model, tok = tiny
    model = copy.deepcopy(model)
    seq = make_sequence(tok, 1.0)
    captured = {}

    def keep(_module, _inp, out):
        out.retain_grad()
        captured["h"] = out

    handle = model.model.norm.register_forward_hook(keep)  # its output is the last hidden state
    logp = masked_logprobs(model, [seq], temperature=1.0).logps
    (-logp[0].sum()).backward()
    handle.remove()
    grad = captured["h"].grad[0].abs().sum(-1)  # per position
    predicts_agent = seq.mask[1:].bool()
    assert torch.all(grad[:-1][~predicts_agent] == 0)
    assert grad[-1] == 0  # the last position predicts nothing
    assert torch.all(grad[:-1][predicts_agent] > 0)


def test_update_moves_the_policy_and_never_the_reference(tiny):
    model, tok = tiny
    policy, ref = copy.deepcopy(model), copy.deepcopy(model).requires_grad_(False)
    before_ref = {k: v.clone() for k, v in ref.state_dict().items()}
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    upd = Updater(policy, ref, UpdateConfig(lr=1e-2, warmup_steps=1, kl_coef=0.1), temperature=1.0)
    for _ in range(2):
        stats = upd.step([make_sequence(tok, 1.0), make_sequence(tok, -0.5)])
    assert stats["kl"] > 0 and stats["trained_tokens"] == 2 * 10
    assert all(torch.equal(v, before_ref[k]) for k, v in ref.state_dict().items())
    assert any(not torch.equal(v, before[k]) for k, v in policy.state_dict().items())


def test_played_tokens_shrink_a_steps_gradient_by_the_share_that_was_kept(tiny):
    """`loss_tokens=played`: the token mean runs over every dialogue the step played, so a step whose kept groups
    hold a third of its tokens gets a third of the gradient; `kept` (the default) ignores what was dropped."""
    model, tok = tiny

    def grad_norm(loss_tokens, played):
        cfg = UpdateConfig(lr=1e-9, kl_coef=0.0, grad_clip=1e9, loss_tokens=loss_tokens)
        upd = Updater(copy.deepcopy(model), None, cfg, temperature=1.0)
        return upd.step([make_sequence(tok, 1.0), make_sequence(tok, -0.5)], played)["grad_norm"]

    kept = grad_norm("kept", None)
    assert kept > 0 and grad_norm("kept", 60) == pytest.approx(kept, rel=1e-6)
    assert grad_norm("played", 60) == pytest.approx(kept / 3, rel=1e-5)  # 20 kept of 60 played tokens
    assert grad_norm("played", None) == pytest.approx(kept, rel=1e-6)  # nothing said: the kept tokens'


def test_zero_advantages_leave_the_policy_unchanged_without_kl(tiny):
    model, tok = tiny
    policy = copy.deepcopy(model)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    upd = Updater(policy, None, UpdateConfig(lr=1e-2, kl_coef=0.0), temperature=1.0)
    stats = upd.step([make_sequence(tok, 0.0)])
    assert stats["grad_norm"] == 0.0
    assert all(torch.equal(v, before[k]) for k, v in policy.state_dict().items())


def test_the_imitation_anchor_adds_coef_times_its_mean_nll_gradient_and_only_when_on(tiny):
    """`imitation_coef`: each optimiser step adds coef x the gradient of the anchor's mean NLL (reported as
    `imitation_nll`); with zero advantages and no KL it alone moves the policy, toward the imitated tokens."""
    model, tok = tiny
    flat, anchor = [make_sequence(tok, 0.0)], [make_sequence(tok, 0.0), make_sequence(tok, 0.0)]

    def update(coef, lr=1e-9, anchor=anchor):
        cfg = UpdateConfig(lr=lr, warmup_steps=1, kl_coef=0.0, grad_clip=1e9, imitation_coef=coef)
        policy = copy.deepcopy(model)
        return policy, Updater(policy, None, cfg, temperature=0.7).step(flat, None, anchor)

    policy, one = update(1.0)
    with torch.no_grad():
        nll = -torch.cat(masked_logprobs(model, anchor, temperature=1.0).logps).mean()
    assert one["imitation_nll"] == pytest.approx(float(nll), rel=1e-5)  # at temperature 1, not the rollouts' 0.7
    assert one["grad_norm"] > 0 and update(2.0)[1]["grad_norm"] == pytest.approx(2 * one["grad_norm"], rel=1e-5)
    assert update(0.0)[1]["grad_norm"] == 0.0 and "imitation_nll" not in update(0.0)[1]
    assert "imitation_nll" not in update(1.0, anchor=())[1]
    trained, stats = update(1.0, lr=1e-2)
    with torch.no_grad():
        after = -torch.cat(masked_logprobs(trained, anchor, temperature=1.0).logps).mean()
    assert float(after) < stats["imitation_nll"]  # the step moved the policy toward the imitated tokens


def test_imitating_alone_takes_the_anchored_steps_optimiser_step_without_the_policy_gradient(tiny):
    """`imitate` (policy_gradient=false, the anchor's control) moves the weights exactly as an anchored update
    whose policy-gradient term is zero does: same optimiser, clipping and schedule, the same NLL reported."""
    model, tok = tiny
    anchor = [make_sequence(tok, 0.0), make_sequence(tok, 0.0)]
    cfg = UpdateConfig(lr=1e-2, warmup_steps=3, kl_coef=0.0, grad_clip=0.5, imitation_coef=0.7)
    alone, anchored = copy.deepcopy(model), copy.deepcopy(model)
    upd_alone, upd_anchored = (Updater(m, None, cfg, temperature=0.7) for m in (alone, anchored))
    for _ in range(2):
        a = upd_alone.imitate(anchor)
        b = upd_anchored.step([make_sequence(tok, 0.0)], None, anchor)  # zero advantage: no policy gradient
        assert a["imitation_nll"] == pytest.approx(b["imitation_nll"], rel=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5) and a["grad_norm"] > 0.5  # clipped
        assert a["lr"] == b["lr"] and a["optimiser_steps"] == 1
    for (name, x), y in zip(alone.named_parameters(), anchored.parameters()):
        assert torch.allclose(x, y, atol=1e-6), name
    assert not torch.equal(next(alone.parameters()), next(model.parameters()))


def test_entropies_without_a_bonus_are_values_only_and_leave_the_update_as_it_was(tiny, monkeypatch):
    """At entropy_coef 0 the entropies are logged, not trained: they carry no autograd graph, have the values
    the graph-carrying ones have, and the update ends at the weights it reached when the term was in the loss
    times zero. With a bonus the term reaches the weights."""
    model, tok = tiny
    seqs = [make_sequence(tok, 1.0), make_sequence(tok, -0.5)]
    kept = masked_logprobs(model, seqs, temperature=0.7, with_entropy=True)
    values = masked_logprobs(model, seqs, temperature=0.7, with_entropy=True, entropy_grad=False)
    assert all(e.requires_grad for e in kept.entropies) and not any(e.requires_grad for e in values.entropies)
    for a, b in zip(kept.entropies + kept.logps, values.entropies + values.logps):
        assert torch.equal(a.detach(), b.detach())

    def trained(coef: float) -> tuple[torch.Tensor, dict]:
        policy = copy.deepcopy(model)
        stats = Updater(policy, None, UpdateConfig(lr=1e-2, kl_coef=0.0, entropy_coef=coef), temperature=1.0).step(
            [make_sequence(tok, 1.0), make_sequence(tok, -0.5)]
        )
        return torch.cat([p.detach().flatten() for p in policy.parameters()]), stats

    no_bonus, stats = trained(0.0)
    with monkeypatch.context() as m:  # the way before: the entropy in the graph and in the loss, times zero
        m.setattr(Updater, "_entropy_bonus", property(lambda self: True))
        in_graph, stats_before = trained(0.0)
    torch.testing.assert_close(no_bonus, in_graph, rtol=0, atol=1e-7)
    assert stats["entropy"] == pytest.approx(stats_before["entropy"]) and stats["entropy"] > 0
    with_bonus, _ = trained(0.5)
    assert (with_bonus - no_bonus).abs().max() > 1e-4


def test_lora_trains_only_adapters_and_uses_the_base_as_reference(tiny):
    from sead.trainer.lora import LoraSettings, wrap

    model, tok = tiny
    policy = wrap(copy.deepcopy(model), LoraSettings(r=4, alpha=8, target_modules=["q_proj", "v_proj"]))
    base_before = {k: v.clone() for k, v in policy.named_parameters() if "lora_" not in k}
    lora_before = {k: v.clone() for k, v in policy.named_parameters() if "lora_" in k}
    upd = Updater(policy, None, UpdateConfig(lr=5e-2, kl_coef=0.1), temperature=1.0)
    stats = [upd.step([make_sequence(tok, 1.0), make_sequence(tok, -0.5)]) for _ in range(3)]
    assert stats[0]["kl"] == 0.0 and stats[-1]["kl"] > 0  # the adapters moved away from the base
    after = dict(policy.named_parameters())
    assert all(torch.equal(after[k], v) for k, v in base_before.items())
    assert any(not torch.equal(after[k], v) for k, v in lora_before.items())


def test_gae_by_hand():
    from sead.trainer.losses import clipped_value_loss, gae

    # values .5, .2, .4; reward 1 on the last token; gamma 1, lambda .5
    # deltas: t2 = 1 - .4 = .6; t1 = 0 + .4 - .2 = .2; t0 = 0 + .2 - .5 = -.3
    # advantages: A2 = .6; A1 = .2 + .5*.6 = .5; A0 = -.3 + .5*.5 = -.05; returns = A + V
    adv, ret = gae(torch.tensor([0.5, 0.2, 0.4]), 1.0, gamma=1.0, lam=0.5)
    assert adv.tolist() == pytest.approx([-0.05, 0.5, 0.6])
    assert ret.tolist() == pytest.approx([0.45, 0.7, 1.0])
    # value loss: v .9 from old .5 clipped to .7 at clip .2; returns 1 -> max(.01, .09)/2 = .045
    vf = clipped_value_loss(torch.tensor([0.9]), torch.tensor([0.5]), torch.tensor([1.0]), clip=0.2)
    assert vf.tolist() == pytest.approx([0.045])


def test_ppo_update_trains_a_value_head_toward_the_returns(tiny):
    model, tok = tiny
    policy = copy.deepcopy(model)
    upd = Updater(
        policy,
        None,
        UpdateConfig(lr=1e-2, kl_coef=0.0, estimator="ppo", vf_coef=1.0, value_clip=10.0),
        temperature=1.0,
    )
    seq = make_sequence(tok, 0.0)
    seq.reward = 1.0
    losses = [upd.step([copy.deepcopy(seq)])["value_loss"] for _ in range(5)]
    assert losses[-1] < losses[0]  # values move toward the return of 1
    assert upd.estimator.critic.weight.abs().sum() > 0


def test_shared_prompt_forward_gives_the_full_forward_logprobs_and_gradient_and_runs_the_prompt_once(tiny):
    from sead.trainer.batching import shared_prompt_length

    model, _ = tiny
    torch.manual_seed(3)
    prompt, head = torch.randint(5, 400, (40,)), torch.randint(5, 400, (6,))  # every reply starts alike
    seqs = []
    for n, reply_at in ((20, 3), (26, 5), (12, 2)):  # own tokens after the prompt; agent tokens from reply_at
        ids = torch.cat([prompt, head, torch.randint(5, 400, (n,))])
        mask = torch.zeros_like(ids)
        mask[40 + reply_at :] = 1
        seqs.append(Sequence(ids, mask, 1.0))
    assert shared_prompt_length(seqs) == 40 + 2 - 1  # stops where the first agent token is predicted
    passes = []  # (rows, positions, carries a gradient) of each trunk pass
    handle = model.model.norm.register_forward_hook(
        lambda _m, _i, out: passes.append((*out.shape[:2], out.requires_grad))
    )
    shared = masked_logprobs(model, seqs, temperature=0.7, with_entropy=True)
    handle.remove()
    full = masked_logprobs(model, seqs, temperature=0.7, with_entropy=True, share_prefix=False)
    for a, b in zip(shared.logps + shared.entropies, full.logps + full.entropies):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5)
    # the prompt once, then only each row's own tokens, both with gradient
    assert passes == [(1, 41, True), (3, 40 + 6 + 26 - 41, True)]

    def gradient(scored) -> torch.Tensor:
        model.zero_grad()
        weights = torch.linspace(-1.0, 1.0, sum(len(lp) for lp in scored.logps))  # advantages of both signs
        (torch.cat(scored.logps) * weights).sum().backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    # the rows' gradients through the shared prompt's keys and values add up to the full forward's
    exact = gradient(masked_logprobs(model, seqs, temperature=0.7, share_prefix=False))
    assert torch.allclose(gradient(masked_logprobs(model, seqs, temperature=0.7)), exact, atol=1e-6, rtol=1e-4)


def test_micro_batches_keep_a_branched_group_together_and_whole_dialogues_by_length():
    from sead.trainer.batching import micro_batches, shared_prompt_length

    torch.manual_seed(5)
    sop = torch.randint(5, 400, (30,))

    def seq(context: torch.Tensor, own: int) -> Sequence:
        ids = torch.cat([sop, context, torch.randint(5, 400, (own,))])
        mask = torch.zeros_like(ids)
        mask[len(sop) + len(context) :] = 1
        return Sequence(ids, mask, 0.0)

    # a branched group: 4 one-turn continuations of one 200-token dialogue prefix, 20-35 own tokens each
    prefix = torch.randint(5, 400, (200,))
    group = [seq(prefix, n) for n in (20, 35, 27, 31)]
    # other sequences whose lengths fall among the group's, each with its own context
    others = [seq(torch.randint(5, 400, (200,)), n) for n in (22, 29, 33)]
    # whole dialogues of one group: one opening, then 40 to 900 own tokens
    opening = torch.randint(5, 400, (12,))
    dialogues = [seq(opening, n) for n in (40, 300, 610, 900)]
    batches = micro_batches([*others, *dialogues, *group], 4)
    assert sorted(id(s) for b in batches for s in b) == sorted(id(s) for s in [*group, *others, *dialogues])
    assert all(len(b) <= 4 for b in batches)
    together = next(b for b in batches if any(s is group[0] for s in b))
    assert {id(s) for s in together} == {id(s) for s in group}  # the group runs its 200-token context once
    assert shared_prompt_length(together) == 30 + 200 - 1
    # the dialogues share only a 12-token opening: padding 40 to 900 would cost more, so they go by length
    for b in batches:
        lengths = [len(s.ids) for s in b]
        assert lengths == sorted(lengths)
    shortest = next(b for b in batches if any(s is dialogues[0] for s in b))
    assert {id(s) for s in shortest} == {id(dialogues[0]), *(id(s) for s in others)}  # its neighbours by length
    assert micro_batches([], 4) == []


def test_mini_batches_are_consecutive_whole_dialogues_of_about_equal_tokens():
    from sead.trainer.batching import mini_batches

    # (episode, length): episode 1 has two segments, episode 3 three
    shape = [(0, 100), (1, 60), (1, 50), (2, 90), (3, 30), (3, 40), (3, 20), (4, 110), (5, 100)]
    seqs = [
        Sequence(torch.zeros(n, dtype=torch.long), torch.ones(n, dtype=torch.long), 0.0, episode=e) for e, n in shape
    ]
    assert mini_batches(seqs, 1) == [seqs]
    for parts in (2, 3):
        split = mini_batches(seqs, parts)
        assert len(split) == parts and [s for part in split for s in part] == seqs  # nothing lost, order kept
        episodes = [{s.episode for s in part} for part in split]
        assert all(not a & b for i, a in enumerate(episodes) for b in episodes[i + 1 :])  # a dialogue in one part
        sizes = [sum(len(s.ids) for s in part) for part in split]
        assert max(sizes) - min(sizes) <= 110  # within one dialogue's tokens of each other
    assert len(mini_batches(seqs[:1], 4)) == 1  # never an empty part


def test_each_mini_batch_is_an_optimiser_step_measured_against_the_sampling_policy(tiny):
    """With two mini-batches the second optimiser step sees a policy the first one moved: its ratios are taken
    against the log-probs the sampling policy gave (the old-log-prob pass), so they leave 1 and some clip. With one
    mini-batch the old log-probs are the training forward's own and nothing clips."""
    model, tok = tiny
    stats = {}
    for parts in (1, 2):
        # advantages that do not cancel within a part (equal rows at +1 and -1 would leave only rounding noise)
        seqs = [make_sequence(tok, a) for a in (1.0, -0.5, 1.0, -0.5)]
        for i, s in enumerate(seqs):
            s.episode = i
        upd = Updater(
            copy.deepcopy(model),
            None,
            UpdateConfig(lr=3e-2, warmup_steps=1, kl_coef=0.0, mini_batches=parts),
            temperature=1.0,
        )
        stats[parts] = upd.step(seqs)
        steps = {int(state["step"]) for state in upd.opt.state.values()}
        assert steps == {parts} and stats[parts]["optimiser_steps"] == parts
        assert all(s.old_logp is not None for s in seqs) == (parts > 1)
    assert stats[1]["clip_frac"] == 0.0 and stats[2]["clip_frac"] > 0.0


def prompt_and_branches() -> list[Sequence]:
    """Five sequences after one 40-token prompt: a branched group of three (one 25-token cut), two others."""
    torch.manual_seed(7)
    prompt, cut = torch.randint(5, 400, (40,)), torch.randint(5, 400, (25,))
    seqs = []
    for i, (context, own) in enumerate(
        [(cut, 9), (cut, 12), (cut, 7), (torch.randint(5, 400, (8,)), 30), (torch.randint(5, 400, (15,)), 22)]
    ):
        ids = torch.cat([prompt, context, torch.randint(5, 400, (own,))])
        mask = torch.zeros_like(ids)
        mask[40 + len(context) :] = 1
        seqs.append(Sequence(ids, mask, (-1.0) ** i * (0.5 + i), episode=i))
    return seqs


def test_the_old_and_reference_passes_run_the_prompt_once_each_and_give_the_full_forwards_logprobs(tiny):
    model, _ = tiny
    policy, ref = copy.deepcopy(model), copy.deepcopy(model).requires_grad_(False)
    seqs = prompt_and_branches()
    full = [lp.detach() for lp in masked_logprobs(policy, seqs, temperature=1.0, share_prefix=False).logps]
    passes = {"policy": [], "ref": []}
    for name, net in (("policy", policy), ("ref", ref)):
        net.model.norm.register_forward_hook(lambda _m, _i, out, name=name: passes[name].append(out.shape[1]))
    cfg = UpdateConfig(lr=1e-9, kl_coef=0.1, ppo_epochs=2, micro_batch=2, grad_clip=1e9)
    Updater(policy, ref, cfg, temperature=1.0).step(seqs)
    for s, lp in zip(seqs, full):  # old and reference log-probs: the sampling policy's, as the full forward gives
        assert torch.allclose(s.old_logp, lp, atol=1e-5) and torch.allclose(s.ref_logp, lp, atol=1e-5)
    # the prompt: once in the old pass and once per epoch (policy), once in the reference pass (ref)
    assert passes["policy"].count(40) == 3 and passes["ref"].count(40) == 1
    assert max(passes["ref"][1:]) < 40


def test_an_update_runs_the_shared_prompt_once_and_its_gradient_is_the_full_forwards(tiny):
    """Updater.step: the SOP prompt every sequence starts with goes through the trunk once per epoch (not once
    per micro-batch), a branched group's own context once per micro-batch on top of it, and the gradient the
    optimiser gets is the one of running every sequence whole."""
    model, _ = tiny
    seqs = prompt_and_branches()
    total = sum(int(s.mask.sum()) for s in seqs)

    model.zero_grad()
    full = masked_logprobs(model, seqs, temperature=1.0, share_prefix=False)
    (-sum(s.advantage * lp.sum() for s, lp in zip(seqs, full.logps)) / total).backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}

    passes = []  # positions of each trunk pass
    handle = model.model.norm.register_forward_hook(lambda _m, _i, out: passes.append(out.shape[1]))
    upd = Updater(model, None, UpdateConfig(lr=1e-9, kl_coef=0.0, micro_batch=2, grad_clip=1e9), temperature=1.0)
    upd.step(copy.deepcopy(seqs))
    handle.remove()
    for name, param in model.named_parameters():
        assert torch.allclose(param.grad, expected[name], atol=1e-6, rtol=1e-4), name
    assert passes[0] == 40 and max(passes[1:]) < 40  # the prompt first and once; later passes carry only the rest


def episode_with(*masks):
    """An episode whose token segments carry these loss masks (ids do not matter to the estimators)."""
    from sead.dialogue.chat_tokens import TokenSegment
    from sead.dialogue.episode import Episode
    from sead.scenario import Profile

    segments = [TokenSegment(list(range(len(m))), list(m), [0.0] * len(m)) for m in masks]
    return Episode(Profile.make({"cooperation": 2, "emotion": 1, "trust": 2}, []), [], "turn_limit", segments=segments)


def test_grpo_estimator_gives_every_segment_its_episodes_group_advantage_and_drops_flat_groups():
    from sead.trainer.estimators import ESTIMATORS

    # the rewards of test_grpo_advantages_by_hand; episode 0 spans two segments, episode 1 has one without agent tokens
    episodes = [
        episode_with([0, 1, 1], [0, 1]),
        episode_with([0, 0], [1, 1]),
        *(episode_with([0, 1]) for _ in range(5)),
    ]
    rewards, groups = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0], [0, 0, 0, 0, 1, 1, 2]
    seqs, counts = ESTIMATORS["grpo"](UpdateConfig(), None).sequences(episodes, rewards, groups)
    assert [s.episode for s in seqs] == [0, 0, 1, 2, 3, 4, 5, 6]
    assert [s.advantage for s in seqs] == pytest.approx([0.5, 0.5, -1.5, 0.5, 0.5, 0.0, 0.0, 0.0], abs=1e-5)
    assert [s.mask.tolist() for s in seqs[:3]] == [[0, 1, 1], [0, 1], [1, 1]]
    assert counts == {"groups": 3, "groups_dropped": 0, "played_tokens": 10}  # every agent token, kept or not
    # dynamic sampling: group 1 (equal rewards) and the lone rollout of group 2 carry no gradient
    seqs, counts = ESTIMATORS["grpo"](UpdateConfig(dynamic_sampling=True), None).sequences(episodes, rewards, groups)
    assert [s.episode for s in seqs] == [0, 0, 1, 2, 3]
    assert counts == {"groups": 3, "groups_dropped": 2, "played_tokens": 10}


def test_ppo_estimator_keeps_every_group_and_sets_per_token_advantages_from_its_critic(tiny):
    from sead.trainer.estimators import ESTIMATORS

    model, _ = tiny
    ppo = ESTIMATORS["ppo"](UpdateConfig(estimator="ppo", dynamic_sampling=True, lam=0.5), model)
    episodes = [episode_with([0, 1, 1]), episode_with([0, 1, 1, 1])]
    seqs, counts = ppo.sequences(episodes, [1.0, 1.0], [0, 0])  # one flat group: GRPO would drop it
    assert counts == {"groups": 1, "groups_dropped": 0, "played_tokens": 5} and len(seqs) == 2
    hidden = torch.zeros(3, model.config.hidden_size)  # a zero critic on zero states: every value 0
    for s in seqs:
        ppo.observe(s, hidden[: int(s.mask.sum())])
    ppo.advantages(seqs)
    # values 0, reward 1 on each episode's last agent token, gamma 1, lambda .5: GAE .5, 1 and .25, .5, 1 ...
    raw = torch.tensor([0.5, 1.0, 0.25, 0.5, 1.0])
    whitened = (raw - raw.mean()) / (raw.std() + 1e-6)  # ... whitened over the batch
    assert torch.allclose(torch.cat([s.advantage for s in seqs]), whitened, atol=1e-6)
    assert [s.returns.tolist() for s in seqs] == [[0.5, 1.0], [0.25, 0.5, 1.0]]
