"""sead/reward.py on hand-built dialogues (through the real tag format); expected values computed by hand."""

import pytest
from dialogue_fixtures import SCHEMA, SPACE, agent, user

from sead.dialogue.episode import USER_REPORTS, Episode, Turn
from sead.reward import Reward, RewardWeights, compute_reward, stage_progress
from sead.scenario.profiles import Profile

PROFILE = Profile.make({"cooperation": 1, "emotion": 2, "trust": 3}, [])
COMPONENTS = {
    "completion",
    "format",
    "stage_progress",
    "concerns_answered",
    "portrait_accuracy",
    "agent_hangup",
    "user_hangup",
    "turn_efficiency",
}
MAX_TURNS = 10


def success_ep():
    # 3 turns, stages 0,1,3 declared, user succeeds; the agent does not say done.
    #   format: t2's noise score 7 is out of range (0-5) -> 2 of 3 turns clean -> 2/3
    #   stage_progress: the user reports stage 1 done at most -> 2/4 = 0.5 (the declared 3 counts for nothing)
    #   portrait (noise excluded even though unreadable):
    #     t1 pred (2,1,2) vs (2,1,3): 1/5 -> (1/5)/3 = 1/15
    #     t2 pred (3,1,3) vs (3,2,3): 1/3 -> 1/9
    #     t3 pred (3,2,3) vs (4,2,3): 1/4 -> 1/12
    #     1 - (1/15 + 1/9 + 1/12)/3 = 1 - (12 + 20 + 15)/180/3 = 1 - 47/540 = 493/540
    #   agent_hangup 0 (agent never said done); turn_efficiency 1 - 3/10 = 0.7; completion 1
    return Episode(
        PROFILE,
        [
            Turn(agent(2, 1, 2, 0), user(2, 1, 3)),
            Turn(agent(3, 1, 3, 1, noise=7), user(3, 2, 3)),
            Turn(agent(3, 2, 3, 3), user(4, 2, 3, status=1)),
        ],
        "user_success",
        meta={USER_REPORTS: acknowledged(0, 1, 1)},
    )


def hangup_ep():
    # Agent says done on turn 2 without user success.
    #   format 2/2 = 1; the user reports stage 1 done -> 2/4 = 0.5
    #   portrait t1 pred (2,2,3) vs (1,2,3): 1/4 -> 1 - (1/4)/3 = 11/12
    #   agent_hangup -1; turn_efficiency 0 (not a success); completion 0
    return Episode(
        PROFILE,
        [Turn(agent(2, 2, 3, 0), user(1, 2, 3)), Turn(agent(2, 2, 3, 1, status=1))],
        "agent_done",
        meta={USER_REPORTS: acknowledged(1)},
    )


def acknowledged(*stages):
    """The scripted simulator's report per user turn: the last stage it has taken as done (-1: none yet)."""
    return [{"stage_done": s, "active_concern": None} for s in stages]


def reward(ep, max_turns=MAX_TURNS, **weights):
    return compute_reward(ep, RewardWeights(**weights), SPACE, num_stages=4, max_turns=max_turns)


def only(name, w=1.0):
    """Weights with every term off except `name`."""
    return {"completion": 0.0, name: w}


def test_fixture_parsed_as_intended():
    ep = success_ep()
    assert [bool(t.agent.problems) for t in ep.turns] == [False, True, False]
    assert ep.turns[1].agent.portrait["noise"] is None and ep.success and not ep.agent_declared_done


def test_default_weights_give_exactly_completion():
    w = RewardWeights()
    assert vars(w) == {name: 1.0 if name == "completion" else 0.0 for name in COMPONENTS}
    r_ok, r_bad = reward(success_ep()), reward(hangup_ep())
    assert isinstance(r_ok, Reward)
    assert r_ok.total == 1.0 and r_bad.total == 0.0  # other components are non-zero but weigh nothing
    assert r_bad.components["agent_hangup"] == -1.0 and r_ok.components["format"] < 1.0


def test_components_always_all_present_by_hand():
    comps = reward(success_ep()).components
    assert set(comps) == COMPONENTS
    assert comps == pytest.approx(
        {
            "completion": 1.0,
            "format": 2 / 3,
            "stage_progress": 0.5,
            "concerns_answered": 0.0,
            "portrait_accuracy": 493 / 540,
            "agent_hangup": 0.0,
            "user_hangup": 0.0,
            "turn_efficiency": 0.7,
        }
    )
    comps = reward(hangup_ep(), agent_hangup=1.0).components
    assert comps == pytest.approx(
        {
            "completion": 0.0,
            "format": 1.0,
            "stage_progress": 0.5,
            "concerns_answered": 0.0,
            "portrait_accuracy": 11 / 12,
            "agent_hangup": -1.0,
            "user_hangup": 0.0,
            "turn_efficiency": 0.0,
        }
    )


def test_format_term():
    assert reward(success_ep(), **only("format", 3.0)).total == pytest.approx(3.0 * 2 / 3)  # 2 of 3 clean
    assert reward(hangup_ep(), **only("format")).total == 1.0
    # a turn without <response> is a problem too: 1 clean of 2
    no_resp = SCHEMA.parse_agent("<stage>0</stage><status>0</status>")
    ep = Episode(
        PROFILE, [Turn(no_resp, feedback="use the tags"), Turn(agent(1, 1, 1, 0), user(1, 1, 1))], "turn_limit"
    )
    assert reward(ep, **only("format")).total == pytest.approx(0.5)


def test_stage_progress_term_counts_what_the_user_acknowledged():
    assert reward(success_ep(), **only("stage_progress", 2.0)).total == pytest.approx(2.0 * 2 / 4)
    counting_tags = [Turn(agent(1, 1, 1, s), user(1, 1, 1)) for s in range(4)]
    # every stage declared in order, none acknowledged -> 0
    unheard = Episode(PROFILE, counting_tags, "turn_limit", meta={USER_REPORTS: acknowledged(-1, -1, -1, -1)})
    assert stage_progress(unheard, 4) == 0.0
    # the user took stages 0 and 1, then nothing more -> 2/4, whatever the tags say
    ep = Episode(PROFILE, counting_tags, "turn_limit", meta={USER_REPORTS: acknowledged(0, 1, 1, 1)})
    assert reward(ep, **only("stage_progress")).total == pytest.approx(0.5)
    # all four acknowledged with no stage tag at all (9 is out of range) -> 4/4
    silent_tags = [Turn(agent(1, 1, 1, 9), user(1, 1, 1)) for _ in range(4)]
    heard = Episode(PROFILE, silent_tags, "user_success", meta={USER_REPORTS: acknowledged(0, 1, 2, 3)})
    assert stage_progress(heard, 4) == 1.0


def test_stage_progress_is_zero_with_a_simulator_that_reports_no_stages():
    # An LLM simulator's reports carry no stage_done (e.g. only the endpoint it used), or there are none at all.
    reports = [{"base_url": "http://sim:8000/v1"}] * 4
    counting_tags = [Turn(agent(1, 1, 1, s), user(1, 1, 1)) for s in range(4)]
    for meta in ({USER_REPORTS: reports}, {}):
        ep = Episode(PROFILE, counting_tags, "turn_limit", meta=meta)
        assert reward(ep, **only("stage_progress")).components["stage_progress"] == 0.0


def test_portrait_accuracy_term():
    assert reward(success_ep(), **only("portrait_accuracy", 0.5)).total == pytest.approx(0.5 * 493 / 540)
    assert reward(hangup_ep(), **only("portrait_accuracy")).total == pytest.approx(11 / 12)
    # no user report at all -> accuracy undefined -> component 0
    silent = Episode(PROFILE, [Turn(agent(1, 1, 1, 0, status=1))], "agent_done")
    r = reward(silent, **only("portrait_accuracy"))
    assert r.total == 0.0 and r.components["portrait_accuracy"] == 0.0


def test_agent_hangup_term():
    assert reward(hangup_ep(), **only("agent_hangup", 2.0)).total == pytest.approx(-2.0)
    assert reward(success_ep(), **only("agent_hangup", 2.0)).total == 0.0  # agent never said done
    # agent says done AND the user succeeded: no penalty
    tp = Episode(PROFILE, [Turn(agent(1, 1, 1, 0, status=1), user(1, 1, 1, status=1))], "user_success")
    assert reward(tp, **only("agent_hangup", 2.0)).total == 0.0
    # user hangs up (agent did not end the call): no penalty either
    uh = Episode(PROFILE, [Turn(agent(1, 1, 1, 0), user(1, 1, 1, status=-1))], "user_hangup")
    assert reward(uh, **only("agent_hangup")).components["agent_hangup"] == 0.0


def test_user_hangup_term():
    uh = Episode(PROFILE, [Turn(agent(1, 1, 1, 0), user(1, 1, 1, status=-1))], "user_hangup")
    assert reward(uh, **only("user_hangup", 0.5)).total == pytest.approx(-0.5)
    # the agent ending the call, a success, a turn limit or a branch's horizon: not the user's hang-up
    for ep in (hangup_ep(), success_ep(), Episode(PROFILE, uh.turns, "turn_limit")):
        assert reward(ep, **only("user_hangup")).components["user_hangup"] == 0.0
    horizon = Episode(PROFILE, [Turn(agent(1, 1, 1, 0), user(1, 1, 1))], "branch_horizon")
    assert reward(horizon, **only("user_hangup")).total == 0.0


def test_turn_efficiency_term():
    assert reward(success_ep(), **only("turn_efficiency", 2.0)).total == pytest.approx(2.0 * (1 - 3 / 10))
    assert reward(success_ep(), max_turns=3, **only("turn_efficiency")).total == 0.0  # 1 - 3/3
    assert reward(success_ep(), max_turns=2, **only("turn_efficiency")).total == 0.0  # 1 - 3/2 clipped at 0
    assert reward(hangup_ep(), **only("turn_efficiency")).total == 0.0  # failures get nothing


def test_weighted_sum_of_all_terms():
    w = dict(
        completion=1.0, format=0.5, stage_progress=0.25, portrait_accuracy=0.2, agent_hangup=1.0, turn_efficiency=0.1
    )
    # success: 1 + .5*(2/3) + .25*.5 + .2*(493/540) + 0 + .1*.7
    expected = 1 + 0.5 * 2 / 3 + 0.125 + 0.2 * 493 / 540 + 0.07
    assert reward(success_ep(), **w).total == pytest.approx(expected)
    # hangup: 0 + .5*1 + .25*.5 + .2*(11/12) - 1 + 0
    assert reward(hangup_ep(), **w).total == pytest.approx(0.5 + 0.125 + 0.2 * 11 / 12 - 1.0)


def test_sim_error_gives_no_reward():
    # last user status 1, but the dialogue ended by simulator error: no reward under any weights
    ep = Episode(PROFILE, [Turn(agent(1, 1, 1, 0), user(1, 1, 1, status=1))], "sim_error")
    assert reward(ep) is None
    assert (
        reward(ep, format=1.0, stage_progress=1.0, portrait_accuracy=1.0, agent_hangup=1.0, turn_efficiency=1.0) is None
    )


def test_the_runner_keeps_the_users_stage_reports_so_real_dialogues_earn_stage_progress(
    tmp_path, restaurant, smollm_tokenizer
):
    """Through `sead eval` and `run_episode` (as training and eval play), not a hand-built episode: the scripted
    user's reports reach Episode.meta, so an agent that moves through the SOP earns progress and the tag-only one
    (an adversary, played by the runner directly: `sead eval` offers no test agents) does not."""
    import asyncio

    from sead.cli.main import main
    from sead.dialogue import RunnerConfig, read_rollouts, run_episode
    from sead.eval.testset import sample_testset
    from sead.testing.adversarial_agents import TagOnlyAgent
    from sead.usersim.scripted import ScriptedUserSimulator

    assert (
        main(["eval", "scripted:reference", f"eval.out_dir={tmp_path}", f"eval.testset_dir={tmp_path}", "eval.limit=6"])
        == 0
    )
    played = {
        "reference": [Episode.from_dict(r) for r in read_rollouts(tmp_path / "scripted-reference" / "dialogues.jsonl")]
    }
    tag_only, user = TagOnlyAgent(restaurant, smollm_tokenizer), ScriptedUserSimulator(restaurant)
    played["tag_only"] = [
        Episode.from_dict(
            asyncio.run(
                run_episode(
                    p,
                    scenario=restaurant,
                    agent=tag_only,
                    user=user,
                    tokenizer=smollm_tokenizer,
                    cfg=RunnerConfig(),
                    seed=i,
                )
            ).to_dict()
        )
        for i, p in enumerate(sample_testset(restaurant, 6, seed=1))
    ]
    progress = {}
    for name, episodes in played.items():
        assert all(len(e.meta[USER_REPORTS]) == sum(t.user is not None for t in e.turns) for e in episodes)
        progress[name] = max(stage_progress(e, len(restaurant.stages)) for e in episodes)
    assert progress["reference"] >= 0.5 and progress["tag_only"] == 0.0
    assert max(max(t.agent.stage for t in e.turns) for e in played["tag_only"]) >= 1  # its tags do count up


def test_stage_progress_with_a_simulator_that_reports_no_stages_is_called_out(caplog):
    from sead.config import load_config, reward_weights

    reward_weights(load_config(["reward.stage_progress=0.5"]))
    assert "no effect" not in caplog.text  # the scripted user reports stages
    reward_weights(load_config(["reward.stage_progress=0.5", "usersim=openai", "usersim.base_urls=[http://x/v1]"]))
    assert "reward.stage_progress=0.5 has no effect with the openai simulator" in caplog.text


def test_concerns_answered_term_counts_what_the_user_took_as_answered():
    # stage 0 lands with a concern voiced; it stays open a round, then is answered; stage 1 lands with a second one,
    # still open at the end: 1 of 2 voiced concerns answered
    reports = [
        {"stage_done": 0, "active_concern": "scam"},
        {"stage_done": 0, "active_concern": "scam"},
        {"stage_done": 0, "active_concern": None},
        {"stage_done": 1, "active_concern": "fees"},
    ]
    turns = [Turn(agent(1, 1, 1, 0), user(1, 1, 1)) for _ in reports]
    ep = Episode(PROFILE, turns, "turn_limit", meta={USER_REPORTS: reports})
    assert reward(ep, **only("concerns_answered", 2.0)).total == pytest.approx(2.0 * 1 / 2)
    # no concern voiced (or no simulator that reports them): nothing answered
    for meta in ({USER_REPORTS: acknowledged(0, 1)}, {}):
        assert reward(Episode(PROFILE, turns[:2], "turn_limit", meta=meta), **only("concerns_answered")).total == 0.0
