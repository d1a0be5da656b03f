"""Phase 1 and 4: seeded, resumable sampling and the curriculum rules on hand-made statistics."""

import json

import numpy as np
import pytest

from sead.config import build_controller, load_config
from sead.controller import CompletionStats, make_curriculum, write_controller_report
from sead.errors import SEADInputError
from sead.run.fixed_profiles import fixed_profiles
from sead.scenario.profiles import Profile


def controller(restaurant, *overrides):
    return build_controller(load_config(["controller=fixed", *overrides]), restaurant)


def test_same_seed_same_profiles_and_other_seed_differs(restaurant):
    a, b = controller(restaurant).sample(50), controller(restaurant).sample(50)
    c = controller(restaurant, "seed=1").sample(50)
    assert a == b and a != c


@pytest.mark.parametrize("window", [1, 3])
def test_restored_sampler_continues_with_the_same_draws(restaurant, window):
    settings = ("controller=sead_joint", "trainer.steps_per_iteration=2", f"controller.window={window}")
    ref, run = controller(restaurant, *settings), controller(restaurant, *settings)
    for _step in range(5):  # feed both identically, including curriculum updates (and kept windows)
        for ctl in (ref, run):
            for p in ctl.sample(8):
                ctl.observe(p, success=p.values["cooperation"] >= 2)
            ctl.end_step()
    saved = json.loads(json.dumps(run.state_dict()))  # must survive JSON
    restored = controller(restaurant, *settings)
    restored.load_state_dict(saved)
    assert restored.sample(40) == ref.sample(40)
    assert restored.probs == ref.probs and restored.steps == ref.steps
    for ctl in (ref, restored):  # and the next update reads the same kept windows
        ctl.observe(ctl.sample(1)[0], True)
    assert restored.update()["per_state"] == ref.update()["per_state"]


def test_window_pools_the_dialogues_of_earlier_updates(restaurant):
    """With window 3 a state seen once per update reaches min_count 3 at the third update and the rule weighs it;
    its fourth update has forgotten the first window. With window 1 the state never counts."""
    state = (1, 1, 1)
    profile = next(p for p in controller(restaurant).sample(500) if p.key() == state)
    pooled = controller(restaurant, "controller=sead_joint", "controller.window=3", "trainer.steps_per_iteration=1")
    single = controller(restaurant, "controller=sead_joint", "trainer.steps_per_iteration=1")
    label = ",".join(map(str, state))
    for update, success in enumerate([False, False, False, True], start=1):
        reports = []
        for ctl in (pooled, single):
            ctl.observe(profile, success)
            reports.append(ctl.end_step())
        kept, alone = reports
        assert alone["per_state"][label]["n"] == 1 and alone["reason"].startswith("0/24")
        assert kept["windows"] == min(update, 3) and kept["per_state"][label]["n"] == min(update, 3)
        if update < 3:
            assert kept["reason"].startswith("0/24") and kept["new_marginals"] == alone["new_marginals"]
    # update 3: CR 0 over 3 dialogues -> weight 0.5 against 1.0 elsewhere; update 4 reads updates 2-4: 1 of 3
    assert kept["reason"].startswith("1/24") and kept["per_state"][label]["cr"] == pytest.approx(1 / 3)
    p = dict(zip(pooled.states, pooled.probs))
    assert p[state] == pytest.approx((1 - abs(1 / 3 - 0.5)) * p[(2, 2, 2)])


def test_restoring_into_a_different_rule_is_an_error(restaurant):
    saved = controller(restaurant, "controller=sead_joint").state_dict()
    with pytest.raises(SEADInputError, match="does not match"):
        controller(restaurant).load_state_dict(saved)


def test_the_held_out_set_draws_the_profiles_earlier_versions_drew(restaurant):
    """The learning curve's held-out seed (618033) has been measured many times (docs/results.md): a
    change to how behaviours are drawn must leave it as it was (first and last of its 200 users)."""
    drawn = fixed_profiles(restaurant, 200, seed=618033)
    assert drawn[0] == Profile.make(
        {"cooperation": 3, "emotion": 1, "trust": 3},
        [
            "Asks the caller to repeat the whole offer from the start.",
            "Asks whether money will be deducted automatically from their account.",
            "Says they prefer promoting through social media instead.",
        ],
    )
    assert drawn[-1] == Profile.make(
        {"cooperation": 3, "emotion": 2, "trust": 4},
        [
            "Asks for a customer-service phone number to call later.",
            "Asks whether they can click their own ads to use up the credit.",
        ],
    )


def test_restoring_a_controller_that_drew_behaviours_by_concern_kind_is_an_error(restaurant):
    """A controller saved by a version that weighed behaviours by concern kind would go on drawing other profiles
    than the run's own: refused, not resumed with uniform draws. One saved with that weighing off resumes."""
    saved = controller(restaurant).state_dict()
    off = saved | {"concern_focus": 0.0, "behaviour_probs": None}
    restored = controller(restaurant)
    restored.load_state_dict(off)
    assert restored.sample(20) == controller(restaurant).sample(20)
    weighed = [1 / len(restaurant.library)] * len(restaurant.library)
    for focused in ({"concern_focus": 1.0}, {"concern_focus": 1.0, "behaviour_probs": weighed}):
        with pytest.raises(SEADInputError, match=r"\[controller\].*concern_focus.*start a new run"):
            controller(restaurant).load_state_dict(saved | focused)


def test_fixed_rule_reproduces_the_default_marginals(restaurant):
    ctl = controller(restaurant)
    profiles = ctl.sample(6000)
    coop = np.array([p.values["cooperation"] for p in profiles])
    for value, share in {1: 0.3, 2: 0.4, 3: 0.3}.items():
        assert abs((coop == value).mean() - share) < 0.03
    assert set(p.values["emotion"] for p in profiles) == {1, 2}  # extremes 0 and 3 are off by default
    assert all(1 <= len(p.behaviours) <= 3 and len(set(p.behaviours)) == len(p.behaviours) for p in profiles)
    for p in profiles[:5]:
        ctl.observe(p, True)
    report = ctl.update()
    assert report["new_marginals"] == report["old_marginals"]


def stats_with(space, rates: dict, n=10):
    """Statistics with `rates[state] * n` successes out of n for each listed joint state."""
    s = CompletionStats(space.sampled_names)
    for state, rate in rates.items():
        for i in range(n):
            s.record(state, i < round(rate * n))
    return s


def test_sead_marginal_three_branches(restaurant):
    space = restaurant.space
    rule = make_curriculum("sead_marginal", space, restaurant.default_marginals, target=0.5, band=0.1)
    uniform = [1 / len(rule.states)] * len(rule.states)

    def coop_marginal(probs):
        out = {}
        for state, p in zip(rule.states, probs):
            out[state[0]] = out.get(state[0], 0) + p
        return out

    # Too hard (CR 0.2): coop 3 succeeds most -> gets the most weight. d=-0.3, a=0.6:
    # w(1)=1+0.6*0=1, w(2)=1+0.6*0.2=1.12, w(3)=1+0.6*0.4=1.24 -> normalised 1/3.36, 1.12/3.36, 1.24/3.36
    hard = stats_with(space, {(1, 1, 1): 0.0, (2, 1, 1): 0.2, (3, 1, 1): 0.4})
    probs, reason = rule.update(hard, uniform)
    m = coop_marginal(probs)
    assert "too hard" in reason
    assert m[1] == pytest.approx(1 / 3.36) and m[2] == pytest.approx(1.12 / 3.36) and m[3] == pytest.approx(1.24 / 3.36)
    # Too easy (CR 0.8): coop 1 fails most -> favoured. d=0.3, a=0.6: w(1)=1+0.6*0.4, w(2)=1+0.6*0.2, w(3)=1.
    easy = stats_with(space, {(1, 1, 1): 0.6, (2, 1, 1): 0.8, (3, 1, 1): 1.0})
    probs, reason = rule.update(easy, uniform)
    m = coop_marginal(probs)
    assert "too easy" in reason and m[1] == pytest.approx(1.24 / 3.36) and m[3] == pytest.approx(1 / 3.36)
    # On target (CR 0.5): 1 + 0.1/n; unseen coop 3 counts n=1 -> weight 1.1 vs 1.01 for the two seen values.
    on = stats_with(space, {(1, 1, 1): 0.5, (2, 1, 1): 0.5})
    probs, reason = rule.update(on, uniform)
    m = coop_marginal(probs)
    assert "on target" in reason and m[3] == pytest.approx(1.1 / 3.12) and m[1] == pytest.approx(1.01 / 3.12)
    assert sum(probs) == pytest.approx(1.0)


def test_sead_joint_moves_mass_toward_states_near_the_target(restaurant):
    space = restaurant.space
    rule = make_curriculum("sead_joint", space, restaurant.default_marginals, target=0.5, eps=0.05, min_count=5)
    stats = stats_with(space, {(1, 1, 1): 0.0, (2, 1, 2): 0.5, (3, 2, 4): 1.0, (2, 2, 2): 0.8})
    stats.record((1, 2, 3), True)  # one dialogue only: below min_count, treated as at the target
    before = rule.initial()
    probs, _ = rule.update(stats, before)
    p = dict(zip(rule.states, probs))
    # raw weights: 0.5 for CR 0 and CR 1, 1.0 at the target and for sparse/unseen states, 0.7 for CR 0.8
    assert p[(2, 1, 2)] == pytest.approx(2 * p[(1, 1, 1)]) == pytest.approx(2 * p[(3, 2, 4)])
    assert p[(2, 2, 2)] == pytest.approx(0.7 * p[(2, 1, 2)])
    assert p[(1, 2, 3)] == pytest.approx(p[(2, 1, 2)])
    assert sum(probs) == pytest.approx(1.0)
    # Mass on the two states far from the target (CR 0 and CR 1) falls: before 0.3*.5*.2 + .3*.5*.2 = 0.06;
    # after (0.5 + 0.5) / (21 * 1.0 + 0.5 + 0.5 + 0.7) = 1 / 22.7.
    b = dict(zip(rule.states, before))
    assert b[(1, 1, 1)] + b[(3, 2, 4)] == pytest.approx(0.06)
    assert p[(1, 1, 1)] + p[(3, 2, 4)] == pytest.approx(1 / 22.7)


def test_sead_joint_eps_floor(restaurant):
    rule = make_curriculum("sead_joint", restaurant.space, restaurant.default_marginals, target=0.0, eps=0.2)
    probs, _ = rule.update(stats_with(restaurant.space, {(1, 1, 1): 1.0}), rule.initial())
    p = dict(zip(rule.states, probs))
    assert p[(1, 1, 1)] == pytest.approx(0.2 * p[(2, 1, 1)])  # 1-|1-0| = 0 is floored at eps


def test_statistics_are_keyed_on_the_sampled_profile_and_skip_sim_errors(restaurant):
    ctl = controller(restaurant, "trainer.steps_per_iteration=2")
    profiles = ctl.sample(3)
    ctl.observe(profiles[0], True)
    ctl.observe(profiles[1], False)
    ctl.observe(profiles[2], None)  # simulator error: counted apart
    assert ctl.end_step() is None
    report = ctl.end_step()
    assert report["dialogues"] == 2 and report["sim_errors"] == 1 and report["completion_rate"] == 0.5
    key = ",".join(map(str, profiles[0].key()))
    assert report["per_state"][key]["n"] >= 1


def test_report_json_and_heatmap_png(tmp_path, restaurant):
    ctl = controller(restaurant, "controller=sead_joint")
    for p in ctl.sample(30):
        ctl.observe(p, p.values["trust"] > 2)
    report = ctl.update()
    json_path, png = write_controller_report(report, restaurant.space, tmp_path)
    saved = json.loads(json_path.read_text())
    assert saved["rule"] == "sead_joint" and len(saved["per_state"]) == 24
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_bad_controller_config_names_the_field(restaurant):
    with pytest.raises(SEADInputError, match=r"controller.marginals.trust.*sum to"):
        controller(restaurant, "controller.marginals={trust: {1: 0.5, 2: 0.1}}")
    with pytest.raises(SEADInputError, match=r"controller.rule.*unknown curriculum 'nope'"):
        controller(restaurant, "controller.rule=nope")
    with pytest.raises(SEADInputError, match=r"trainer.steps_per_iteration"):
        controller(restaurant, "trainer.steps_per_iteration=0")
    with pytest.raises(SEADInputError, match=r"controller.window"):
        controller(restaurant, "controller.window=0")
