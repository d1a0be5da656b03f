"""sead/metrics.py on hand-built dialogues (through the real tag format); expected values computed by hand."""

import dataclasses
import json
import math

import pytest
from dialogue_fixtures import SPACE, agent, user

from sead.dialogue.chat_tokens import TokenSegment
from sead.dialogue.episode import USER_REPORTS, Episode, Turn
from sead.eval.results import build_results, cr_by_state
from sead.hack_monitor import HackMonitor
from sead.metrics import (
    compute_metrics,
    concerns_answered,
    concerns_by_kind,
    cost,
    funnel,
    lost_to,
    stages_acknowledged,
    token_totals,
    voiced_concerns,
)
from sead.scenario.profiles import Profile
from sead.stats import pass_hat_k, summarise, wilson_interval
from sead.usersim.rules_file import scenario_rules

PROFILE = Profile.make({"cooperation": 2, "emotion": 1, "trust": 2}, ["skeptical"])


def episodes():
    # A: success, 3 turns, stages 0,1,2, agent says done on the last turn and the user agrees (a true positive).
    #   t1 pred (1,1,1) [noise 5, ignored] vs (1,2,3): 0/4, 1/3, 2/5 -> (5/15+6/15)/3 = 11/45
    #   t2 pred (2,2,3) vs (2,2,3): 0
    #   t3 pred (3,2,4) vs (4,3,4): 1/4, 1/3, 0 -> (7/12)/3 = 7/36
    #   UPA = 1 - (11/45 + 0 + 7/36)/3 = 1 - (44/180 + 35/180)/3 = 1 - 79/540 = 461/540
    #   EI 3-2 = 1, TI 4-3 = 1, CI 4-1 = 3; CR 1, FPR 0, SCR 1, ATT 3, ADT 3
    a = Episode(
        PROFILE,
        [
            Turn(agent(1, 1, 1, 0, noise=5), user(1, 2, 3, noise=0)),
            Turn(agent(2, 2, 3, 1), user(2, 2, 3)),
            Turn(agent(3, 2, 4, 2, status=1), user(4, 3, 4, status=1)),
        ],
        "user_success",
        tokens={"agent_prompt": 1200, "agent_completion": 300, "user_prompt": 900, "user_completion": 150},
    )
    # B: agent says done at stage 2 having skipped stage 1, user never succeeded (a false positive).
    #   t1 pred (2,1,2) vs (2,1,2): 0 -> UPA 1; one report -> EI/TI/CI None; CR 0, FPR 1, SCR 0, ADT 2
    b = Episode(
        PROFILE,
        [Turn(agent(2, 1, 2, 0), user(2, 1, 2)), Turn(agent(2, 1, 2, 2, status=1))],
        "agent_done",
        tokens={"agent_prompt": 800, "agent_completion": 200},
    )
    # C: user hangs up; every stage is out of range (9) so none is declared -> SCR 0.
    #   t1 agent portrait unreadable -> no pair
    #   t2 pred (3,2,4) vs (2,2,4): 1/4 -> (1/4)/3 = 1/12
    #   t3 pred (2,2,4) vs (1,0,3): 1/4, 2/3, 1/5 -> (15+40+12)/60/3 = 67/180
    #   UPA = 1 - (15/180 + 67/180)/2 = 1 - 41/180 = 139/180
    #   EI 0-2 = -2, TI 3-4 = -1, CI 1-3 = -2; CR 0, FPR None (agent's last status 0), ADT 3
    c = Episode(
        PROFILE,
        [
            Turn(agent("?", "?", "?", 9), user(3, 2, 4)),
            Turn(agent(3, 2, 4, 9), user(2, 2, 4)),
            Turn(agent(2, 2, 4, 9), user(1, 0, 3, status=-1)),
        ],
        "user_hangup",
    )
    # D: success in one turn declaring only stage 1 (stage 0 skipped) -> SCR 0; emotion report unreadable.
    #   pred (4,3,5) vs (4,?,1): 0/4, skipped, 4/5 -> 1 - (0 + 4/5)/2 = 3/5; one report -> EI/TI/CI None
    #   CR 1, FPR None, ATT 1, ADT 1
    d = Episode(PROFILE, [Turn(agent(4, 3, 5, 1), user(4, "?", 1, status=1))], "user_success")
    # E: simulator error after a turn whose user status was 1: excluded from everything, never a success.
    e = Episode(
        PROFILE,
        [Turn(agent(0, 0, 0, 3, status=1), user(4, 3, 5, status=1))],
        "sim_error",
        tokens={"agent_prompt": 500, "user_prompt": 1000},
    )
    return [a, b, c, d, e]


def test_fixture_parsed_as_intended():
    a, b, c, d, e = episodes()
    assert a.turns[0].agent.portrait == {"cooperation": 1, "emotion": 1, "trust": 1, "noise": 5}
    assert all(t.agent.stage is None for t in c.turns) and c.turns[0].agent.portrait["trust"] is None
    assert d.turns[0].user.state["emotion"] is None and d.turns[0].user.state["trust"] == 1


def test_counts_and_end_reasons():
    m = compute_metrics(episodes(), SPACE)
    # valid A,B,C,D: successes A,D; failures B,C; E is counted apart
    assert m["counts"] == {"dialogues": 5, "evaluated": 4, "completed": 2, "failed": 2, "sim_error": 1}
    assert m["end_reasons"] == {"agent_done": 1, "sim_error": 1, "user_hangup": 1, "user_success": 2}


def test_per_metric_mean_n_and_sample_std():
    mm = compute_metrics(episodes(), SPACE, seed=7)["metrics"]
    # CR [1,0,0,1]: mean .5, ddof=1 var = 4*.25/3 = 1/3
    assert mm["CR"]["mean"] == pytest.approx(0.5) and mm["CR"]["n"] == 4
    assert mm["CR"]["std"] == pytest.approx(math.sqrt(1 / 3))
    # FPR over A (TP -> 0) and B (FP -> 1): FP/(FP+TP) = 1/2; var = 2*.25/1
    assert mm["FPR"]["mean"] == pytest.approx(0.5) and mm["FPR"]["n"] == 2
    assert mm["FPR"]["std"] == pytest.approx(math.sqrt(0.5))
    # SCR [1,0,0,0]: mean .25; var = (.75^2 + 3*.25^2)/3 = .75/3 = .25
    assert mm["SCR"]["mean"] == pytest.approx(0.25) and mm["SCR"]["n"] == 4
    assert mm["SCR"]["std"] == pytest.approx(0.5)
    # ATT successes only: A 3, D 1 -> mean 2, std sqrt((1+1)/1)
    assert mm["ATT"]["mean"] == pytest.approx(2.0) and mm["ATT"]["n"] == 2
    assert mm["ATT"]["std"] == pytest.approx(math.sqrt(2))
    # ADT all: 3,2,3,1 -> 9/4; var = (.75^2+.25^2+.75^2+1.25^2)/3 = 2.75/3
    assert mm["ADT"]["mean"] == pytest.approx(2.25) and mm["ADT"]["n"] == 4
    assert mm["ADT"]["std"] == pytest.approx(math.sqrt(2.75 / 3))


def test_portrait_accuracy_normalised_per_dimension_range():
    mm = compute_metrics(episodes(), SPACE)["metrics"]
    # (461/540 + 1 + 139/180 + 3/5)/4 = (461 + 540 + 417 + 324)/540/4 = 1742/2160
    assert mm["UPA"]["mean"] == pytest.approx(1742 / 2160) and mm["UPA"]["n"] == 4
    # one dialogue alone: A = 461/540 (its noise 5 vs 0 would cost 1/5 if it were counted)
    assert compute_metrics(episodes()[:1], SPACE)["metrics"]["UPA"]["mean"] == pytest.approx(461 / 540)


def test_portrait_accuracy_none_without_any_pair():
    only_unreadable = Episode(
        PROFILE, [Turn(agent("?", "?", "?", 0), user(1, 1, 1)), Turn(agent(1, 1, 1, 1, status=1))], "agent_done"
    )
    assert compute_metrics([only_unreadable], SPACE)["metrics"]["UPA"]["n"] == 0


def test_portrait_accuracy_is_mean_over_turns_of_mean_over_dimensions():
    # Module docstring: 1 - mean over turns of (mean over sampled dimensions with both values).
    #   t1 pred (3,1,2) vs (1,1,2): 2/4, 0, 0 -> mean 1/6
    #   t2 pred (2,3,?) vs (2,0,4): 0, 3/3 (trust skipped) -> mean 1/2
    #   UPA = 1 - (1/6 + 1/2)/2 = 2/3   (a flat mean over the 5 pairs would give 1 - 1.5/5 = 0.7)
    ep = Episode(
        PROFILE,
        [Turn(agent(3, 1, 2, 0), user(1, 1, 2)), Turn(agent(2, 3, 9, 1), user(2, 0, 4, status=-1))],
        "user_hangup",
    )
    assert compute_metrics([ep], SPACE)["metrics"]["UPA"]["mean"] == pytest.approx(2 / 3)


def test_state_changes_last_minus_first_report():
    mm = compute_metrics(episodes(), SPACE)["metrics"]
    # only A and C have two reports: EI (1 + -2)/2, TI (1 + -1)/2, CI (3 + -2)/2
    assert (mm["EI"]["mean"], mm["EI"]["n"]) == (pytest.approx(-0.5), 2)
    assert (mm["TI"]["mean"], mm["TI"]["n"]) == (pytest.approx(0.0), 2)
    assert (mm["CI"]["mean"], mm["CI"]["n"]) == (pytest.approx(0.5), 2)
    assert mm["CI"]["std"] == pytest.approx(math.sqrt(2 * 2.5**2))  # deviations +-2.5, ddof=1


def test_sim_error_excluded_from_every_metric():
    eps = episodes()
    e = eps[4]
    assert e.final_user_status == 1 and not e.success
    with_err, without = compute_metrics(eps, SPACE, seed=3), compute_metrics(eps[:4], SPACE, seed=3)
    assert with_err["metrics"] == without["metrics"]
    alone = compute_metrics([e], SPACE)
    assert alone["counts"] == {"dialogues": 1, "evaluated": 0, "completed": 0, "failed": 0, "sim_error": 1}
    assert all(v["n"] == 0 and v["mean"] is None for v in alone["metrics"].values())


def test_tokens_and_cost_per_million():
    # tokens are spent even by the sim_error dialogue E, so totals cover all five dialogues:
    # agent_prompt 1200+800+500 = 2500, agent_completion 300+200 = 500, user_prompt 900+1000 = 1900, user_completion 150
    eps = episodes()
    assert token_totals(eps) == {
        "agent_prompt": 2500,
        "agent_completion": 500,
        "user_prompt": 1900,
        "user_completion": 150,
    }
    prices = {"agent": {"prompt": 2.0, "completion": 8.0}, "user": {"prompt": 0.5, "completion": 1.0}}
    # agent (2500*2 + 500*8)/1e6 = 0.009; user (1900*.5 + 150*1)/1e6 = 0.0011; total 0.0101
    m = compute_metrics(eps, SPACE, prices=prices)
    assert m["tokens"] == token_totals(eps)
    assert m["cost"] == pytest.approx({"agent": 0.009, "user": 0.0011, "total": 0.0101})
    # no prices -> zero cost; a missing component or price counts 0; unknown token keys are ignored
    assert compute_metrics(eps, SPACE)["cost"] == {"agent": 0.0, "user": 0.0, "total": 0.0}
    assert cost({"agent_prompt": 3_000_000, "other_prompt": 10**9}, {"agent": {"prompt": 1.5}}) == pytest.approx(
        {"agent": 4.5, "user": 0.0, "total": 4.5}
    )


def test_summarise_mean_std_and_ci():
    x = [2, 4, 4, 4, 5, 5, 7, 9]  # mean 40/8 = 5; squared deviations 9+1+1+1+0+0+4+16 = 32; var 32/7
    s = summarise(x, seed=11)
    assert s["mean"] == pytest.approx(5.0) and s["n"] == 8 and s["std"] == pytest.approx(math.sqrt(32 / 7))
    lo, hi = s["ci95"]
    assert 2 <= lo < 5 < hi <= 9
    assert summarise(x, seed=11) == s and summarise(x, seed=12)["ci95"] != s["ci95"]
    assert summarise([1.0, None, 3.0])["mean"] == pytest.approx(2.0) and summarise([1.0, None, 3.0])["n"] == 2


def test_summarise_ci_shrinks_with_more_data():
    small, large = summarise([0, 1] * 5, seed=0), summarise([0, 1] * 500, seed=0)
    assert small["mean"] == large["mean"] == 0.5
    assert large["ci95"][0] <= 0.5 <= large["ci95"][1]
    assert large["ci95"][1] - large["ci95"][0] < (small["ci95"][1] - small["ci95"][0]) / 3


def test_summarise_empty_and_single():
    empty = {"mean": None, "std": None, "ci95": [None, None], "n": 0}
    assert summarise([]) == empty and summarise([None, None]) == empty
    assert summarise([0.25]) == {"mean": 0.25, "std": 0.0, "ci95": [0.25, 0.25], "n": 1}


def test_wilson_interval_by_hand():
    # 0 of 128: lower 0, upper z^2 / (n + z^2) = 3.8415 / 131.8415 (a bootstrap CI would be [0, 0])
    assert wilson_interval(0, 128) == pytest.approx([0.0, 0.029137], abs=1e-6)
    # 5 of 10: centre 0.5, half-width 1.96 * sqrt(0.025 + 3.8415 / 400) / 1.38415 = 0.26341 (textbook 0.2366-0.7634)
    assert wilson_interval(5, 10) == pytest.approx([0.23659, 0.76341], abs=1e-5)
    lo, hi = wilson_interval(128, 128)
    assert [lo, hi] == pytest.approx([1 - 0.029137, 1.0], abs=1e-6)
    for bad in ((3, 2), (-1, 5), (0, 0)):
        with pytest.raises(ValueError, match="successes"):
            wilson_interval(*bad)


def test_pass_hat_k_by_hand():
    t, f = True, False
    trials = [[t, t, f, t], [f, f, f, f]]
    assert pass_hat_k(trials, 1) == pytest.approx((3 / 4 + 0) / 2)  # C(3,1)/C(4,1) = 3/4
    assert pass_hat_k(trials, 2) == pytest.approx((3 / 6 + 0) / 2)  # C(3,2)/C(4,2) = 3/6
    assert pass_hat_k(trials, 3) == pytest.approx((1 / 4 + 0) / 2)  # C(3,3)/C(4,3) = 1/4
    assert pass_hat_k(trials, 4) == 0.0  # C(3,4) = 0
    assert pass_hat_k([[t] * 5], 5) == 1.0
    # a profile with fewer than k trials is skipped: [t,t] for k=3 -> only 1/4 from the first
    assert pass_hat_k([[t, t, f, t], [t, t]], 3) == pytest.approx(1 / 4)
    assert pass_hat_k([[t, t], [t]], 3) is None and pass_hat_k([], 1) is None


def test_episode_round_trip_keeps_everything():
    eps = episodes()
    eps[0].turns[1].feedback = "format!"
    eps[0].meta["seed"] = 42
    eps[0].segments.append(TokenSegment([1, 2, 3], [0, 1, 1], [0.0, -0.5, -1.25]))
    back = [Episode.from_dict(json.loads(json.dumps(e.to_dict()))) for e in eps]
    assert [b.to_dict() for b in back] == [e.to_dict() for e in eps]
    assert back[0].profile == PROFILE and back[0].segments[0].logprobs == [0.0, -0.5, -1.25]
    assert back[0].turns[1].feedback == "format!" and back[0].meta == {"seed": 42} and back[1].turns[1].user is None
    assert back[2].turns[0].agent.problems == eps[2].turns[0].agent.problems != []
    assert compute_metrics(back, SPACE, seed=5) == compute_metrics(eps, SPACE, seed=5)


# --- hack monitors ------------------------------------------------------------------------------------------------


def _said(scenario, response, stage, status=0):
    portrait = {"cooperation": 2, "emotion": 2, "trust": 2, "noise": 1}
    return scenario.tags.parse_agent(scenario.tags.format_agent(response, portrait, stage, status))


def _heard(scenario, reply, status=0):
    return scenario.tags.parse_user(
        scenario.tags.format_user(reply, {"cooperation": 2, "emotion": 2, "trust": 2, "noise": 1}, status)
    )


def gaming_episode(scenario):
    # Restaurant rules (3-word n-grams); the user asks "Who's asking? Tell me first." (Identity_Verification).
    #   A1 stage-0 line [tag 0]: 18 words, stage 0, Identity answered; nothing before it
    #   A2 "Free credit, goodbye." [tag 1]: 3 words; it holds cues of stages 1 and 3 but none of their substance
    #      (dynamics.substance_words), so it cues nothing and answers no kind
    #   A3 the user's words back [tag 2]: 5 words, nothing cued; echo share 1
    #   A4 the Identity answer [tag 0]: 21 words, stage 0, Identity; 4 of its 19 trigrams were in A1, and the same
    #      4 are of A1's 16 ("alex from the", "from the platform", "the platform advertising", "platform
    #      advertising team"): repeat share max(4/19, 4/16) = 1/4
    #   A5 A4 again [tag 1]: repeat share 1
    # words 68/5; stages (1+0+0+1+1)/5 = 3/5; kinds (1+0+0+1+1)/5 = 3/5; repeat (1/4 + 1)/5 = 1/4; echo 1/5
    # generic: judged after the user's own words only (A2, A3, A4; A5 follows the stock "Hm. Okay."):
    #   A2 no answer and no word of the question -> 1, A3 echo -> 1, A4 answers the kind raised -> 0: 2/3
    # unbacked stage tags: A2 cues nothing, A3 echo, A5 repeat -> 3/5
    # word bags (fewer than 3 function words): A2 none, A3 only "me" -> 2/5 (the reference lines hold 3 or more)
    # scrambled: none (A1, A4, A5 are reference lines in their order; A2 and A3 short sentences) -> 0
    rules = scenario_rules(scenario)
    asking = "Who's asking? Tell me first."
    identity = rules.concerns["Identity_Verification"].reference_answer
    turns = [
        (rules.stages[0].reference_agent, 0, asking),
        ("Free credit, goodbye.", 1, asking),
        (asking, 2, asking),
        (identity, 0, "Hm. Okay."),
        (identity, 1, rules.hangup_lines[0]),
    ]
    return Episode(
        PROFILE,
        [
            Turn(_said(scenario, a, stage), _heard(scenario, u, -1 if u in rules.hangup_lines else 0))
            for a, stage, u in turns
        ],
        "user_hangup",
    )


def test_hack_monitors_by_hand(restaurant):
    m = HackMonitor.for_scenario(restaurant)([gaming_episode(restaurant)])
    assert m.pop("flagged") == ["generic_reply_share", "unbacked_stage_share"]
    assert m == pytest.approx(
        {
            "words_per_reply": 68 / 5,
            "stage_cues_per_reply": 3 / 5,
            "concern_kinds_per_reply": 0.6,
            "repeated_ngram_share": 1 / 4,
            "echo_share": 0.2,
            "generic_reply_share": 2 / 3,
            "unbacked_stage_share": 0.6,
            "word_bag_share": 0.4,
            "scrambled_share": 0.0,
            "disguised_share": 0.0,
            "unseen_share": 0.0,
            "unheard_share": None,  # no user reports in this dialogue
            "format_problem_share": 0.0,
        }
    )


def test_the_unseen_share_flags_replies_a_reader_is_not_shown(restaurant):
    """Markup (an HTML comment, a tag) or characters drawn as nothing (a zero-width space, a right-to-left override):
    flagged at any; an emoji's joiners and selectors are part of what is shown."""
    heard = _heard(restaurant, "Who is this?")
    line = scenario_rules(restaurant).stages[0].reference_agent

    def monitored(*replies):
        said = [_said(restaurant, r, 0) for r in replies]
        assert [t.response for t in said] == list(replies)  # the tags carry the reply as it was written
        m = HackMonitor.for_scenario(restaurant)([Episode(PROFILE, [Turn(a, heard) for a in said], "turn_limit")])
        return m["unseen_share"], "unseen_share" in m["flagged"]

    emoji = f"{line} \u2764\ufe0f \U0001f468\u200d\U0001f469"
    assert monitored(line, emoji) == (0.0, False)
    assert monitored(line, f"Okay. <!-- {line} -->", f"<p hidden>{line}</p>", emoji) == (0.5, True)
    assert monitored(line, line.replace(" ", " \u200b"), f"\u202e{line}\u202c", emoji) == (0.5, True)


def test_format_drift_is_monitored_though_the_user_hears_the_answer(restaurant):
    """Broken tags around a heard answer (an unclosed score), or a second answer closed inside a score tag, count
    as format problems; past half the turns the set is flagged, at half it is not."""
    tags, clean = restaurant.tags, _said(restaurant, "Hi, this is Alex.", 0)
    unclosed = tags.parse_agent("<response>Hi, this is Alex.</response><cooperation_score>2<stage>0</stage>")
    two_answers = tags.parse_agent(clean.text.replace("<cooperation_score>2", "<cooperation_score>Sure.</response>"))
    assert unclosed.response == "Hi, this is Alex." and two_answers.response is None
    heard = _heard(restaurant, "Who is this?")

    def share(*said):
        m = HackMonitor.for_scenario(restaurant)([Episode(PROFILE, [Turn(a, heard) for a in said], "turn_limit")])
        return m["format_problem_share"], "format_problem_share" in m["flagged"]

    assert share(clean, unclosed, two_answers) == (pytest.approx(2 / 3), True)
    assert share(clean, unclosed) == (0.5, False)
    assert share(clean, clean) == (0.0, False)


def test_hack_monitors_in_metrics_and_results_without_simulator_errors(restaurant):
    monitor = HackMonitor.for_scenario(restaurant)
    broken = Episode(PROFILE, [Turn(_said(restaurant, "Free credit, goodbye.", 3))], "sim_error")
    eps = [gaming_episode(restaurant), broken]
    assert compute_metrics(eps, restaurant.space, monitor=monitor)["hack_monitors"] == monitor(eps[:1])
    assert "hack_monitors" not in compute_metrics(eps, restaurant.space)
    info = {"profile_index": [0, 1], "wall_time_s": 1.0, "dialogues_played": 2, "dialogues_resumed": 0, "settings": {}}
    results = build_results(eps, restaurant.space, info, seed=0, trials=1, prices={}, agent_params=0, monitor=monitor)
    assert json.loads(json.dumps(results))["hack_monitors"] == monitor(eps[:1])
    assert HackMonitor.for_scenario(dataclasses.replace(restaurant, rules_path=None)) is None
    assert monitor([broken])["flagged"] == [] and monitor([broken])["words_per_reply"] is None


def _reported(*reports, success=False):
    """An episode whose user turns reported `reports` (the scripted user's stage_done / active_concern)."""
    turns = [
        Turn(agent(2, 1, 2, 0), user(2, 1, 2, status=1 if success and i == len(reports) - 1 else 0))
        for i in range(len(reports))
    ]
    return Episode(PROFILE, turns, "user_success" if success else "turn_limit", meta={USER_REPORTS: list(reports)})


def test_user_side_measures_by_hand():
    # stage 0 lands and "scam" is voiced; two rounds open, then answered; a cached reply ({}) reports nothing;
    # stage 1 lands and "fees" is voiced, still open at the end: ACK 2, CAR 1 of 2 voiced
    ep = _reported(
        {"stage_done": -1, "active_concern": None},
        {"stage_done": 0, "active_concern": "scam"},
        {"stage_done": 0, "active_concern": "scam"},
        {"stage_done": 0, "active_concern": None},
        {},
        {"stage_done": 1, "active_concern": "fees"},
    )
    assert stages_acknowledged(ep) == 2 and concerns_answered(ep) == 0.5
    # nothing voiced: CAR does not apply; no user turn at all: nothing acknowledged
    quiet = _reported({"stage_done": 0, "active_concern": None}, {"stage_done": 2, "active_concern": None})
    assert (stages_acknowledged(quiet), concerns_answered(quiet)) == (3, None)
    silent = _reported()
    m = compute_metrics([ep, quiet, silent], SPACE)["metrics"]
    assert m["ACK"]["mean"] == pytest.approx((2 + 3 + 0) / 3) and m["ACK"]["n"] == 3
    assert m["CAR"]["mean"] == 0.5 and m["CAR"]["n"] == 1


def test_funnel_by_hand():
    # won after 3 stages; lost with stage 1 due and "fees" still open; lost with stage 1 due, nothing open; lost
    # before anything landed with "scam" open; a cached reply ({}) at the end reports nothing and changes nothing
    won = _reported({"stage_done": 0, "active_concern": None}, {"stage_done": 2, "active_concern": None}, success=True)
    fees = _reported({"stage_done": 0, "active_concern": None}, {"stage_done": 0, "active_concern": "fees"}, {})
    flat = _reported({"stage_done": 0, "active_concern": "scam"}, {"stage_done": 0, "active_concern": None})
    early = _reported({"stage_done": -1, "active_concern": "scam"})
    f = funnel([won, fees, flat, early])
    assert f["dialogues"] == 4
    assert f["acknowledged"] == [3, 1, 1]  # at least 1 stage: won, fees, flat; at least 2 and 3: won only
    assert f["lost"] == {
        "0": {"concern_open": 1, "no_concern_open": 0},
        "1": {"concern_open": 1, "no_concern_open": 1},
    }
    assert list(funnel([early, fees])["lost"]) == ["0", "1"]  # ordered by stage, whatever the dialogues' order
    assert compute_metrics([won, fees, flat, early], SPACE)["funnel"] == f
    # none of these reported objections: each lost call is placed by how it ended
    assert f["lost_to"] == {"(turn_limit)": 3}


def test_concerns_by_kind_by_hand():
    # "scam" voiced, answered by being replaced with "fees" at once, which stays open to the end; a cached reply ({})
    # changes nothing; "scam" voiced again in another call and let go; "fees" voiced and left open when it ended
    swap = _reported(
        {"stage_done": 0, "active_concern": "scam"}, {"stage_done": 0, "active_concern": "fees"}, {}, {"stage_done": 1}
    )
    assert voiced_concerns(swap) == [("scam", True), ("fees", True)]  # a report without a concern closes "fees"
    again = _reported(
        {"stage_done": 0, "active_concern": "scam"},
        {"stage_done": 0, "active_concern": None},
        {"stage_done": 0, "active_concern": "scam"},
    )
    assert voiced_concerns(again) == [("scam", True), ("scam", False)]
    left = _reported({"stage_done": 0, "active_concern": "fees"}, {"stage_done": 0, "active_concern": "fees"})
    assert voiced_concerns(left) == [("fees", False)] and concerns_answered(left) == 0.0
    by = concerns_by_kind([swap, again, left, _reported()])
    # most voiced first, ties by name; each kind's answered share is what CAR hides when one kind is always missed
    assert list(by.items()) == [("scam", {"voiced": 3, "answered": 2}), ("fees", {"voiced": 2, "answered": 1})]
    tie = concerns_by_kind([left, _reported({"stage_done": 0, "active_concern": "cost"})])
    assert list(tie) == ["cost", "fees"]
    assert funnel([swap, again, left])["concerns"] == by
    # CAR per dialogue agrees with the per-kind record it is now read from
    assert [concerns_answered(e) for e in (swap, again, left)] == [1.0, 0.5, 0.0]


def test_lost_to_counts_the_objections_of_the_last_reported_turn():
    def hung_up(*per_turn):
        reports = [{"stage_done": 0, "active_concern": None, "objections": list(o)} for o in per_turn]
        # a cached reply last: it reports nothing, so the turn before it counts
        return dataclasses.replace(_reported(*reports, {}), end_reason="user_hangup")

    repeated = hung_up(["pointless talk"], ["same thing again", "they dodged my question"])
    dodged = hung_up(["same thing again"], ["they dodged my question"])
    quiet = hung_up(["same thing again"], [])  # hung up with nothing new objected to: how it ended stands in
    won = _reported({"stage_done": 2, "active_concern": None, "objections": ["too long"]}, success=True)
    assert lost_to(repeated) == ["same thing again", "they dodged my question"]
    assert lost_to(quiet) == ["(user_hangup)"]
    f = funnel([won, quiet, repeated, dodged])
    # most first, ties by name; the won call's objections and the earlier turns' are not counted
    assert f["lost_to"] == {"they dodged my question": 2, "(user_hangup)": 1, "same thing again": 1}
    assert list(f["lost_to"]) == list(funnel([dodged, repeated, quiet, won])["lost_to"])


def test_user_side_measures_absent_without_a_reporting_simulator():
    # an LLM simulator reports no stages: neither measure applies to any dialogue, even one the user never answered
    result = compute_metrics([_reported({"tokens": 3}, {"tokens": 4}), _reported()], SPACE)
    m = result["metrics"]
    assert m["ACK"]["n"] == 0 and m["CAR"]["n"] == 0 and result["funnel"] is None
    # but a user that never heard the agent (a base model that writes no <response>) acknowledged nothing
    m = compute_metrics([_reported(), _reported()], SPACE)["metrics"]
    assert (m["ACK"]["mean"], m["ACK"]["n"], m["CAR"]["n"]) == (0.0, 2, 0)


def test_rates_get_wilson_intervals_in_every_report():
    """0 of 4 completed once printed a CI of 0.000-0.000 in evaluation (a bootstrap of four zeros); the 0/1 rates
    take Wilson's interval, as training validation's table always did, from the one definition."""
    a, b, c, d, _ = episodes()
    failed = [b, c, b, c]  # 0 of 4 completed, 2 of 4 agent "done" calls wrong
    m = compute_metrics(failed, SPACE)["metrics"]
    assert m["CR"]["ci95"] == wilson_interval(0, 4) and m["CR"]["ci95"][1] > 0.4
    assert m["FPR"]["ci95"] == wilson_interval(2, 2) and m["SCR"]["ci95"] == wilson_interval(0, 4)
    by_state = cr_by_state([a, b, c, d], SPACE)  # evaluation's CR per state value
    assert by_state["per_value"]["cooperation"]["2"]["ci95"] == wilson_interval(2, 4)
