"""trainer.fit_minutes: the plan a run makes from a probe of its machine. It cuts the warm-up, then validation,
never RL steps; it leaves a run that fits alone; the probe leaves the model and the policy as it found them."""

import json

import pytest
import torch

from sead.config import group_config, load_config, runner_config
from sead.policy.hf import HFPolicy
from sead.policy.settings import SamplingConfig
from sead.run.layout import RunLayout
from sead.trainer.loop import train
from sead.trainer.plan import VALIDATION_FLOOR, WARMUP_FLOOR, MachineRates, describe, estimate, fit, probe

PROMPT = 860


@pytest.fixture(scope="module")
def demo():
    cfg = load_config(["preset=cpu"])
    return group_config(cfg, "trainer"), runner_config(cfg)


def rates(slowness: float) -> MachineRates:
    """A machine `slowness` times slower than one that runs the CPU demo in about two minutes."""
    return MachineRates(step_s=0.01 * slowness, prefill_s=2e-4 * slowness, train_s=1e-3 * slowness)


def test_a_run_that_fits_is_left_as_set(demo):
    tc, runner = demo
    plan = fit(tc, runner, rates(1), PROMPT, minutes=8)
    assert (plan.warmup_dialogues, plan.validation_profiles, plan.shrunk) == (32, 16, ())
    assert 0 < plan.minutes < 8 and set(plan.phases) == {"warm-up", "RL steps", "validation"}
    assert len(describe(plan, tc, 8)) == 1  # the plan alone: nothing was cut


def test_a_slow_machine_cuts_the_warmup_first_then_validation_never_rl_steps(demo):
    tc, runner = demo
    full = sum(estimate(tc, runner, rates(1), PROMPT, 32, 16).values()) / 60
    # just over: the warm-up alone is cut, as little as fits
    slightly = fit(tc, runner, rates(1), PROMPT, minutes=full * 0.9)
    assert slightly.validation_profiles == 16 and WARMUP_FLOOR <= slightly.warmup_dialogues < 32
    assert slightly.minutes <= full * 0.9
    # far over: both at their floors, the RL steps' estimate untouched, and the plan says it is still over
    slow = fit(tc, runner, rates(50), PROMPT, minutes=8)
    assert (slow.warmup_dialogues, slow.validation_profiles) == (WARMUP_FLOOR, VALIDATION_FLOOR)
    assert slow.phases["RL steps"] == estimate(tc, runner, rates(50), PROMPT, 32, 16)["RL steps"]
    plan_line, cut = describe(slow, tc, 8)
    assert "3 RL steps of 8 dialogues" in plan_line and f"expected {slow.minutes:.0f} min" in plan_line
    assert f"warm-up dialogues {WARMUP_FLOOR} (of 32)" in cut
    assert f"validation profiles {VALIDATION_FLOOR} (of 16)" in cut
    assert "RL steps are never cut" in cut


def test_the_estimate_grows_with_the_work(demo):
    tc, runner = demo
    base = estimate(tc, runner, rates(1), PROMPT, 32, 16)
    assert estimate(tc, runner, rates(1), PROMPT, 16, 16)["warm-up"] < base["warm-up"]
    assert estimate(tc, runner, rates(1), PROMPT, 32, 8)["validation"] < base["validation"]
    assert estimate(tc, runner, rates(2), PROMPT, 32, 16)["RL steps"] == pytest.approx(2 * base["RL steps"])
    assert "warm-up" not in estimate(tc, runner, rates(1), PROMPT, 0, 16)


def test_the_probe_times_both_and_leaves_no_gradient_and_no_cached_dialogue(tiny):
    model, tok = tiny
    policy = HFPolicy(model, tok, SamplingConfig(temperature=1.0), max_batch=8)
    before = {k: t.clone() for k, t in model.state_dict().items()}
    measured = probe(policy, model, list(range(100, 400)))
    assert measured.step_s > 0 and measured.prefill_s >= 0 and measured.train_s > 0
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(t, before[k]) for k, t in model.state_dict().items())
    assert len(policy.turns) == 0
    assert policy.decode_step is None or policy.decode_step._built is None  # packed weights let go


def test_a_released_policy_samples_as_before(tiny):
    """`release` drops only what sampling can make again: greedy replies are the same after it."""
    from sead.dialogue.agent import AgentRequest

    model, tok = tiny
    policy = HFPolicy(model, tok, SamplingConfig(temperature=0.0), max_batch=4)
    reqs = [AgentRequest(list(range(100 + i, 180 + i)), [], 12, seed=i) for i in range(3)]
    first = [o.token_ids for o in policy.sample(reqs)]
    policy.release()
    assert [o.token_ids for o in policy.sample(reqs)] == first


def test_a_run_cut_to_fit_records_what_it_runs(tmp_path):
    """A plan that cuts writes the cut values into the run's config.yaml, so a resume goes on with them."""
    run = train(
        load_config(
            [
                "preset=tiny",
                "trainer.iterations=1",
                "trainer.warmup.dialogues=20",
                "trainer.validation.profiles=12",
                "trainer.fit_minutes=0.0001",  # no machine fits this: both go to their floors
                f"run_dir={tmp_path / 'run'}",
            ]
        )
    )
    saved = load_config([f"run_dir={run}", "resume=true"]).trainer
    assert (saved.warmup.dialogues, saved.validation.profiles) == (WARMUP_FLOOR, VALIDATION_FLOOR)
    summary = json.loads(RunLayout(run).warmup.summary.read_text())
    assert summary["dialogues"] == WARMUP_FLOOR
    assert json.loads(RunLayout(run).validation_metrics(0).read_text())["counts"]["evaluated"] == VALIDATION_FLOOR
