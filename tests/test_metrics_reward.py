"""Metrics and reward on hand-built transcripts, checked against values computed by hand."""

import math

import pytest

from sead.dialogue import Episode, Turn
from sead.metrics import compute_metrics, cost, pass_hat_k, summarise
from sead.reward import RewardWeights, compute_reward
from sead.scenario import Profile, TagSchema

PROFILE = Profile.make({"cooperation": 2, "emotion": 1, "trust": 2}, [])


@pytest.fixture
def schema(restaurant):
    return TagSchema(restaurant.space, 4)


def turn(schema, pred, stage, agent_status=0, user_state=None, user_status=0):
    agent = schema.parse_agent(schema.format_agent("hi", {**pred, "noise": 0}, stage, agent_status))
    user = None
    if user_state is not None:
        user = schema.parse_user(schema.format_user("ok", {**user_state, "noise": 1}, user_status))
    return Turn(agent, user)


def s(c, e, t):
    return {"cooperation": c, "emotion": e, "trust": t}


@pytest.fixture
def episodes(schema):
    # A: success in 3 turns, stages 0,1,2 declared in order; predictions vs reports:
    #    t1 pred (2,1,2) vs rep (2,1,3): |0|/4,|0|/3,|1|/5 -> mean .2/3 = .0667
    #    t2 pred (3,2,3) vs rep (3,1,3): 0, 1/3, 0 -> .1111
    #    t3 pred (3,2,4) vs rep (4,2,4): 1/4, 0, 0 -> .0833  => UPA = 1 - mean(.0667,.1111,.0833) = .9130
    #    EI = 2-1 = 1, TI = 4-3 = 1, CI = 4-2 = 2
    a = Episode(PROFILE, [turn(schema, s(2, 1, 2), 0, user_state=s(2, 1, 3)),
                          turn(schema, s(3, 2, 3), 1, user_state=s(3, 1, 3)),
                          turn(schema, s(3, 2, 4), 2, user_state=s(4, 2, 4), user_status=1)], "user_success",
                tokens={"agent_prompt": 1000, "agent_completion": 100, "user_prompt": 2000, "user_completion": 50})
    # B: agent says done (status 1) at stage 3 having skipped stage 1: a false positive, stage-incomplete.
    #    one user report only -> EI/TI/CI undefined; UPA from one pair: pred (1,1,1) vs (1,1,1) -> 1.0
    b = Episode(PROFILE, [turn(schema, s(1, 1, 1), 0, user_state=s(1, 1, 1)),
                          turn(schema, s(1, 1, 1), 3, agent_status=1)], "agent_done")
    # C: user hangs up on turn 2; stages 0,0: SCR 1 (last stage 0 needs nothing before it)
    #    UPA pairs: (2,1,2)v(2,1,2) -> 0 ; (2,1,2)v(1,0,2) -> (1/4 + 1/3)/3 = .1944 => 1 - .0972 = .9028
    #    EI = 0-1 = -1, TI = 0, CI = 1-2 = -1
    c = Episode(PROFILE, [turn(schema, s(2, 1, 2), 0, user_state=s(2, 1, 2)),
                          turn(schema, s(2, 1, 2), 0, user_state=s(1, 0, 2), user_status=-1)], "user_hangup")
    # D: simulator error after a reported success-looking status: excluded everywhere
    d = Episode(PROFILE, [turn(schema, s(2, 1, 2), 0, user_state=s(2, 1, 2), user_status=1)], "sim_error")
    return [a, b, c, d]


def test_metrics_by_hand(restaurant, episodes):
    m = compute_metrics(episodes, restaurant.space, seed=3)
    assert m["counts"] == {"dialogues": 4, "evaluated": 3, "completed": 1, "failed": 2, "sim_error": 1}
    mm = m["metrics"]
    assert mm["CR"]["mean"] == pytest.approx(1 / 3) and mm["CR"]["n"] == 3
    assert mm["CR"]["std"] == pytest.approx(math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2))
    assert mm["FPR"]["mean"] == 1.0 and mm["FPR"]["n"] == 1  # only B declared done, without success
    assert mm["SCR"]["mean"] == pytest.approx(2 / 3)          # A 1, B 0 (skipped stage 1), C 1
    assert mm["ATT"]["mean"] == 3.0 and mm["ATT"]["n"] == 1
    assert mm["ADT"]["mean"] == pytest.approx((3 + 2 + 2) / 3)
    upa_a = 1 - ((1 / 5) / 3 + (1 / 3) / 3 + (1 / 4) / 3) / 3
    upa_c = 1 - (0 + (1 / 4 + 1 / 3) / 3) / 2
    assert mm["UPA"]["mean"] == pytest.approx((upa_a + 1.0 + upa_c) / 3)
    assert mm["EI"]["mean"] == pytest.approx(0.0) and mm["EI"]["n"] == 2   # (1 + -1) / 2
    assert mm["TI"]["mean"] == pytest.approx(0.5) and mm["CI"]["mean"] == pytest.approx(0.5)
    assert m["end_reasons"] == {"agent_done": 1, "sim_error": 1, "user_hangup": 1, "user_success": 1}
    assert m["tokens"]["agent_completion"] == 100


def test_sim_error_is_never_a_success(episodes):
    assert not episodes[3].success and episodes[3].final_user_status == 1


def test_summarise_ci_is_seeded_and_brackets_the_mean():
    a = summarise([0, 1, 1, 0, 1, 1, 1, 0], seed=1)
    assert a == summarise([0, 1, 1, 0, 1, 1, 1, 0], seed=1)
    assert a["ci95"][0] <= a["mean"] <= a["ci95"][1]
    wide, narrow = summarise([0, 1] * 5, seed=0), summarise([0, 1] * 200, seed=0)
    assert narrow["ci95"][1] - narrow["ci95"][0] < wide["ci95"][1] - wide["ci95"][0]
    assert summarise([]) == {"mean": None, "std": None, "ci95": [None, None], "n": 0}
    assert summarise([None, 2.0]) == {"mean": 2.0, "std": 0.0, "ci95": [2.0, 2.0], "n": 1}


def test_pass_hat_k_by_hand():
    trials = [[True, True, False, True], [False] * 4, [True]]
    # k=1: (3/4 + 0) / 2 over profiles with >= 1 trial ... the single-trial profile counts too: (.75 + 0 + 1) / 3
    assert pass_hat_k(trials, 1) == pytest.approx((0.75 + 0 + 1) / 3)
    # k=2: C(3,2)/C(4,2) = 3/6 = .5 and 0; the one-trial profile is skipped
    assert pass_hat_k(trials, 2) == pytest.approx(0.25)
    assert pass_hat_k(trials, 4) == pytest.approx(0.0)  # C(3,4) = 0
    assert pass_hat_k([[True]], 2) is None


def test_cost_from_prices_per_million():
    c = cost({"agent_prompt": 2_000_000, "agent_completion": 500_000, "user_completion": 1_000_000},
             {"agent": {"prompt": 1.0, "completion": 4.0}, "user": {"completion": 2.0}})
    assert c == pytest.approx({"agent": 2.0 + 2.0, "user": 2.0, "total": 6.0})


def test_reward_defaults_to_completion_and_returns_every_component(restaurant, episodes):
    a, b, c, d = episodes
    w = RewardWeights()
    ra, rb = [compute_reward(e, w, restaurant.space, num_stages=4, max_turns=15) for e in (a, b)]
    assert ra.total == 1.0 and rb.total == 0.0
    assert set(ra.components) == {"completion", "format", "stage_progress", "portrait_accuracy", "agent_hangup",
                                  "turn_efficiency"}
    assert compute_reward(d, w, restaurant.space, num_stages=4, max_turns=15) is None


def test_each_shaping_term_by_hand(restaurant, episodes):
    a, b, _, _ = episodes
    only = lambda **kw: RewardWeights(completion=0.0, **kw)  # noqa: E731
    r = lambda e, w: compute_reward(e, w, restaurant.space, num_stages=4, max_turns=15).total  # noqa: E731
    assert r(a, only(format=1.0)) == 1.0                      # every agent turn parsed cleanly
    assert r(a, only(stage_progress=1.0)) == pytest.approx(3 / 4)  # stages 0,1,2 reached in order
    assert r(b, only(stage_progress=1.0)) == pytest.approx(1 / 4)  # 0 then 3: only stage 0 counts
    assert r(b, only(agent_hangup=2.0)) == -2.0               # ended the call without user success
    assert r(a, only(agent_hangup=2.0)) == 0.0
    assert r(a, only(turn_efficiency=1.0)) == pytest.approx(1 - 3 / 15)
    assert r(a, only(portrait_accuracy=1.0)) == pytest.approx(1 - ((1 / 5) / 3 + (1 / 3) / 3 + (1 / 4) / 3) / 3)


def test_episode_round_trip_keeps_metrics(restaurant, episodes):
    back = [Episode.from_dict(e.to_dict()) for e in episodes]
    assert compute_metrics(back, restaurant.space) == compute_metrics(episodes, restaurant.space)
