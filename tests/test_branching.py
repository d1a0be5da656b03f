"""Branched GRPO groups (trainer.branch): a replayed prefix is the source dialogue and stays untrained, branches
sample apart from one another while the user answers as in the source, and the loop trains on them without
showing them to the controller."""

import asyncio
import json
import random

import pytest
from dialogue_fixtures import agent, user

from sead.config import build_usersim, load_config
from sead.dialogue.batch import run_batch
from sead.dialogue.episode import USER_REPORTS, Episode, Turn
from sead.dialogue.mask_audit import spans
from sead.dialogue.runner import RunnerConfig, run_episode
from sead.dialogue.seeds import train_episode_seed
from sead.eval.testset import sample_testset
from sead.policy.scripted import ReferenceAgent
from sead.reward import RewardWeights, compute_reward
from sead.run.layout import RunLayout
from sead.scenario.profiles import Profile
from sead.testing.adversarial_agents import EchoAgent, GuessingAgent
from sead.trainer.branching import branch_jobs, branch_points, concern_turns, setbacks, unanswered_turns
from sead.trainer.loop import rollout_jobs, train
from sead.trainer.schema import BranchConfig
from sead.usersim.visible_text import normalise


def play(scenario, policy, profile, tok, seed, **kw):
    cfg = RunnerConfig(max_turns=10, max_new_tokens=300, max_context_tokens=8192)
    sim = build_usersim(load_config([]), scenario)
    return asyncio.run(
        run_episode(profile, scenario=scenario, agent=policy, user=sim, tokenizer=tok, cfg=cfg, seed=seed, **kw)
    )


def trained_texts(ep: Episode, tok) -> list[str]:
    """The decoded runs of mask-1 tokens: one per sampled agent turn."""
    runs = [ids for seg in ep.segments for trained, ids in spans(seg.ids, seg.mask) if trained]
    return [tok.decode(r, skip_special_tokens=True) for r in runs]


@pytest.fixture(scope="module")
def source(restaurant, smollm_tokenizer):
    """A reference-agent dialogue of at least four turns."""
    for i, profile in enumerate(sample_testset(restaurant, 40, 5)):
        ep = play(restaurant, ReferenceAgent(restaurant, smollm_tokenizer), profile, smollm_tokenizer, seed=1000 + i)
        if ep.num_turns >= 4:
            return ep
    raise AssertionError("no reference dialogue of four turns among 40 profiles")


def test_a_replayed_prefix_is_the_source_dialogue_and_only_what_follows_is_trained(
    restaurant, smollm_tokenizer, source
):
    kept = 2
    prefix = tuple(t.agent.text for t in source.turns[:kept])
    # another agent continues: its turns, and only its turns, are trained
    other = EchoAgent(restaurant, smollm_tokenizer)
    seed = source.meta["seed"]
    branch = play(restaurant, other, source.profile, smollm_tokenizer, seed, prefix=prefix, agent_seed=-5)
    assert [t.agent.text for t in branch.turns[:kept]] == list(prefix)
    assert [t.user.text for t in branch.turns[:kept]] == [t.user.text for t in source.turns[:kept]]
    assert branch.meta["prefix_turns"] == kept
    trained = trained_texts(branch, smollm_tokenizer)
    assert trained == [t.agent.text for t in branch.turns[kept:]] and trained
    assert branch.tokens["agent_completion"] == sum(sum(s.mask) for s in branch.segments)
    # the same (deterministic) agent from the same prefix plays the source dialogue to its end again
    again = play(
        restaurant, ReferenceAgent(restaurant, smollm_tokenizer), source.profile, smollm_tokenizer, seed, prefix=prefix
    )
    assert [(t.agent.text, t.user and t.user.text) for t in again.turns] == [
        (t.agent.text, t.user and t.user.text) for t in source.turns
    ]
    assert again.end_reason == source.end_reason


def test_a_branch_with_a_horizon_plays_that_many_turns_and_earns_what_they_earned(restaurant, smollm_tokenizer):
    """trainer.branch.turns: continuations end after that many agent turns past the cut, and their rewards still
    tell an answer to the user's open concern from a reply that ignores it."""
    reference = ReferenceAgent(restaurant, smollm_tokenizer)
    for i, profile in enumerate(sample_testset(restaurant, 60, 8)):
        full = play(restaurant, reference, profile, smollm_tokenizer, seed=2000 + i)
        raised = concern_turns(full)
        if raised and raised[0] < full.num_turns:  # the reference answered a concern at turn `raised[0]`
            break
    else:
        raise AssertionError("no reference dialogue answering a concern among 60 profiles")
    kept, seed = raised[0], full.meta["seed"]
    prefix = tuple(t.agent.text for t in full.turns[:kept])
    answered = play(restaurant, reference, profile, smollm_tokenizer, seed, prefix=prefix, horizon=1)
    assert answered.end_reason == "branch_horizon" or answered.turns[-1].user.status != 0
    assert [t.agent.text for t in answered.turns] == [t.agent.text for t in full.turns[: kept + 1]]
    echoed = play(
        restaurant, EchoAgent(restaurant, smollm_tokenizer), profile, smollm_tokenizer, seed, prefix=prefix, horizon=1
    )
    assert echoed.num_turns == kept + 1 and trained_texts(echoed, smollm_tokenizer) == [echoed.turns[-1].agent.text]
    weights = RewardWeights(completion=1.0, concerns_answered=1.0)

    def score(ep):
        return compute_reward(ep, weights, restaurant.space, num_stages=len(restaurant.stages), max_turns=10).total

    assert score(answered) > score(echoed)
    # branch_jobs passes the horizon on; 0 plays to the dialogue's end
    for turns, horizon in ((2, 2), (0, None)):
        jobs = branch_jobs([full], BranchConfig(groups=1, size=2, turns=turns), run_seed=1, step=1, first_group=0)
        assert jobs and {j.horizon for j in jobs} == {horizon}


def dialogue(n_turns: int, *, won: bool, seed: int, sim_error: bool = False) -> Episode:
    turns = [
        Turn(agent(1, 1, 1, min(i, 3)), user(1, 1, 1, status=int(won and i == n_turns - 1))) for i in range(n_turns)
    ]
    end = "sim_error" if sim_error else ("user_success" if won else "turn_limit")
    profile = Profile.make({"cooperation": 1, "emotion": 1, "trust": 1}, [])
    return Episode(profile, turns, end, meta={"seed": seed, "episode_id": f"src{seed}"})


def test_branches_are_cut_from_failed_dialogues_first_and_sample_apart():
    eps = [
        dialogue(5, won=True, seed=1),
        dialogue(4, won=False, seed=2),
        dialogue(1, won=False, seed=3),  # lost at its opening: cut before it, the opening played afresh
        dialogue(6, won=False, seed=4, sim_error=True),
        dialogue(3, won=False, seed=5),
    ]
    points = branch_points(eps, 3, random.Random(0))
    assert sorted(e.meta["seed"] for e, _ in points) == [2, 3, 5]  # the three usable failures, before the win
    assert {e.meta["seed"]: k for e, k in points}[3] == 0
    assert [e.meta["seed"] for e, _ in branch_points(eps, 9, random.Random(0))][-1] == 1
    jobs = branch_jobs(eps, BranchConfig(groups=3, size=4), run_seed=7, step=3, first_group=10)
    assert len(jobs) == 12 and [j.group for j in jobs] == [g for g in (10, 11, 12) for _ in range(4)]
    for j in jobs:
        src = next(e for e in eps if e.meta["episode_id"] == j.branched_from)
        assert j.seed == src.meta["seed"] and j.profile is src.profile  # the user answers as in the source
        assert (1 if src.num_turns > 1 else 0) <= len(j.prefix) <= src.num_turns - 1
        assert j.prefix == tuple(t.agent.text for t in src.turns[: len(j.prefix)])
    assert len({j.prefix for j in jobs if j.group == 10}) == 1
    agent_seeds = {j.agent_seed for j in jobs}
    full = {train_episode_seed(7, 3, i, k, 4) for i in range(20) for k in range(4)}
    assert len(agent_seeds) == len(jobs) and not agent_seeds & full
    again = branch_jobs(eps, BranchConfig(groups=3, size=4), run_seed=7, step=3, first_group=10)
    assert [(j.prefix, j.agent_seed) for j in again] == [(j.prefix, j.agent_seed) for j in jobs]
    assert branch_jobs(eps, BranchConfig(groups=0), run_seed=7, step=3, first_group=10) == []


def test_branches_spread_over_profiles_and_never_cut_one_state_twice():
    # one user per group and a deterministic agent: four rollouts of profile A are one dialogue, cut at turn 1 only
    same = [dialogue(2, won=False, seed=8) for _ in range(4)]
    other = dialogue(2, won=True, seed=9)
    other.profile = Profile.make({"cooperation": 2, "emotion": 2, "trust": 2}, [])
    points = branch_points([*same, other], 3, random.Random(0))
    assert sorted(e.meta["seed"] for e, _ in points) == [8, 9]  # A once, then B (won, but a profile not yet cut)
    longer = [dialogue(4, won=False, seed=8) for _ in range(6)]
    cuts = [k for _, k in branch_points(longer, 5, random.Random(0))]
    assert len(cuts) == len(set(cuts)) <= 3  # three distinct states at most: cuts 1, 2, 3


def test_setback_cuts_replay_the_turn_after_which_the_user_lost_ground():
    profile = Profile.make({"cooperation": 2, "emotion": 2, "trust": 2}, [])
    # reported after each agent turn: steady, trust falls, steady (noise is not a profile dimension), hang-up
    reports = [user(2, 2, 2), user(2, 2, 1), user(3, 2, 1, noise=3), user(3, 2, 1), user(3, 1, 1, status=-1)]
    ep = Episode(profile, [Turn(agent(2, 2, 2, 0), u) for u in reports], "user_hangup", meta={"seed": 9})
    ep.meta["episode_id"] = "src9"
    assert setbacks(ep) == [1, 4]
    # a hang-up with no drop in what the user reports is still a setback; a turn the user never answered is not
    quiet = Episode(profile, [Turn(agent(2, 2, 2, 0), user(2, 2, 2)), Turn(agent(2, 2, 2, 0))], "agent_done")
    assert setbacks(quiet) == []
    assert setbacks(Episode(profile, [Turn(agent(2, 2, 2, 0), user(2, 2, 2, status=-1))], "user_hangup")) == [0]
    cuts = {k for seed in range(40) for _, k in branch_points([ep], 1, random.Random(seed), at="setback")}
    assert cuts == {1, 4}  # only setbacks after the first turn, each replayed afresh
    assert {k for seed in range(40) for _, k in branch_points([ep], 1, random.Random(seed))} == {1, 2, 3, 4}
    # a failed dialogue without a setback after its first turn falls back to a uniform cut
    flat = dialogue(4, won=False, seed=3)
    uniform = {k for seed in range(40) for _, k in branch_points([flat], 1, random.Random(seed), at="setback")}
    assert uniform == {1, 2, 3}
    jobs = branch_jobs([ep], BranchConfig(groups=1, size=2, at="setback"), run_seed=1, step=1, first_group=0)
    assert {len(j.prefix) for j in jobs} <= {1, 4} and len({j.prefix for j in jobs}) == 1


def test_concern_cuts_replay_the_reply_to_a_concern_the_user_holds_open():
    profile = Profile.make({"cooperation": 2, "emotion": 2, "trust": 2}, [])
    # turn 1 drew a format-error message, not a user turn: the reports (one per user turn) skip it
    turns = [Turn(agent(2, 2, 2, 0), user(2, 2, 2)), Turn(agent(2, 2, 2, 0), feedback="format!")]
    turns += [Turn(agent(2, 2, 2, 1), user(2, 2, 2)), Turn(agent(2, 2, 2, 1), user(2, 2, 2)), Turn(agent(2, 2, 2, 2))]
    reports = [{"active_concern": None}, {"active_concern": "Cost_Concerns"}, {}]
    ep = Episode(profile, turns, "agent_done", meta={"seed": 3, "episode_id": "src3", USER_REPORTS: reports})
    assert concern_turns(ep) == [3]  # the reply to the user turn of agent turn 2
    assert {k for seed in range(40) for _, k in branch_points([ep], 1, random.Random(seed), at="concern")} == {3}
    # no concern voiced (another simulator, or none raised): a uniform cut
    ep.meta[USER_REPORTS] = [{}, {}, {}]
    assert {k for seed in range(40) for _, k in branch_points([ep], 1, random.Random(seed), at="concern")} == {
        1,
        2,
        3,
        4,
    }


def test_the_scripted_user_reports_the_concerns_a_reference_dialogue_answers(restaurant, smollm_tokenizer):
    """On the real simulator a concern cut lies where the reference agent's reply closed the user's concern."""
    reference, cuts = ReferenceAgent(restaurant, smollm_tokenizer), []
    for i, profile in enumerate(sample_testset(restaurant, 30, 9)):
        ep = play(restaurant, reference, profile, smollm_tokenizer, seed=3000 + i)
        reports = ep.meta[USER_REPORTS]
        for k in (k for k in concern_turns(ep) if k < ep.num_turns):
            answered = reference.rules.kinds_answered(normalise(ep.turns[k].agent.response))
            cuts.append(answered == [reports[k - 1]["active_concern"]])
    assert len(cuts) >= 10 and sum(cuts) / len(cuts) > 0.9, cuts


def test_unanswered_cuts_replay_the_reply_that_left_a_concern_open():
    profile = Profile.make({"cooperation": 2, "emotion": 2, "trust": 2}, [])
    turns = [Turn(agent(2, 2, 2, 0), user(2, 2, 2)), Turn(agent(2, 2, 2, 1), user(2, 2, 2))]
    turns += [Turn(agent(2, 2, 2, 1), feedback="format!"), Turn(agent(2, 2, 2, 1), user(2, 2, 2))]
    turns += [Turn(agent(2, 2, 2, 1), user(2, 2, 2)), Turn(agent(2, 2, 2, 1), user(2, 2, 2, status=-1))]
    # Cost raised after turn 1; turn 2 a format error; turn 3 leaves Cost open; turn 4 settles it and Trust is
    # raised; turn 5 leaves Trust open and the user hangs up
    reports = [{"active_concern": None}, {"active_concern": "Cost_Concerns"}, {"active_concern": "Cost_Concerns"}]
    reports += [{"active_concern": "Trust_and_Skepticism"}, {"active_concern": "Trust_and_Skepticism"}]
    ep = Episode(profile, turns, "user_hangup", meta={"seed": 3, "episode_id": "src3", USER_REPORTS: reports})
    assert unanswered_turns(ep) == [3, 5] and concern_turns(ep) == [2, 4, 5, 6]  # 6: after the last turn
    cuts = {k for seed in range(40) for _, k in branch_points([ep], 1, random.Random(seed), at="unanswered")}
    assert cuts == {3, 5}
    # every concern answered at once: the concern turns, as with at="concern"
    ep.meta[USER_REPORTS] = [{"active_concern": None}, {"active_concern": "Cost_Concerns"}, {}, {}, {}]
    assert unanswered_turns(ep) == []
    assert {k for seed in range(40) for _, k in branch_points([ep], 1, random.Random(seed), at="unanswered")} == {2}
    assert BranchConfig(at="unanswered").at == "unanswered"


def test_on_the_scripted_user_unanswered_cuts_are_the_wrong_answers(restaurant, smollm_tokenizer):
    """An agent that guesses which concern was raised leaves it open exactly where it guessed wrong (or said a line
    the user had heard); the reference agent, which reads the concern, almost never does."""
    guesser, reference = GuessingAgent(restaurant, smollm_tokenizer), ReferenceAgent(restaurant, smollm_tokenizer)
    wrong, reference_open, reference_concerns = [], 0, 0
    for i, profile in enumerate(sample_testset(restaurant, 30, 9)):
        ep = play(restaurant, guesser, profile, smollm_tokenizer, seed=4000 + i)
        reports = ep.meta[USER_REPORTS]
        for k in unanswered_turns(ep):
            said = ep.turns[k].agent.response
            answered = guesser.rules.kinds_answered(normalise(said))
            again = said in [t.agent.response for t in ep.turns[:k]]  # the right kind's line, heard before
            wrong.append(answered != [reports[k - 1]["active_concern"]] or again)
        ep = play(restaurant, reference, profile, smollm_tokenizer, seed=4000 + i)
        reference_open += len(unanswered_turns(ep))
        reference_concerns += len(concern_turns(ep))
    assert len(wrong) >= 10 and all(wrong), wrong
    assert reference_concerns >= 10 and reference_open <= 0.1 * reference_concerns, (reference_open, reference_concerns)


def test_a_dialogue_gives_several_cuts_at_distinct_turns_when_asked():
    ep = dialogue(5, won=False, seed=4)
    assert len(branch_points([ep], 4, random.Random(0))) == 1  # one cut per dialogue by default
    for seed in range(20):
        cuts = [k for _, k in branch_points([ep], 9, random.Random(seed), per_dialogue=3)]
        assert len(cuts) == 3 == len(set(cuts)) and set(cuts) <= {1, 2, 3, 4}
        assert len(branch_points([ep], 9, random.Random(seed), per_dialogue=9)) == 4  # every turn it can be cut at
    # profiles still take turns: B's dialogue is cut before A's gives its second group
    other = dialogue(5, won=False, seed=6)
    other.profile = Profile.make({"cooperation": 2, "emotion": 2, "trust": 2}, [])
    points = branch_points([ep, other], 4, random.Random(1), per_dialogue=2)
    assert [e.meta["seed"] for e, _ in points][:2] in ([4, 6], [6, 4]) and len(points) == 4
    # with setbacks, the extra cuts are other setbacks, never a turn the user did not lose ground after
    profile = Profile.make({"cooperation": 2, "emotion": 2, "trust": 2}, [])
    reports = [user(2, 2, 2), user(2, 2, 1), user(2, 2, 1), user(2, 1, 1), user(2, 1, 1, status=-1)]
    lost = Episode(profile, [Turn(agent(2, 2, 2, 0), u) for u in reports], "user_hangup", meta={"seed": 9})
    lost.meta["episode_id"] = "src9"
    assert sorted(k for _, k in branch_points([lost], 9, random.Random(0), at="setback", per_dialogue=5)) == [1, 3, 4]
    jobs = branch_jobs(
        [lost], BranchConfig(groups=5, size=2, at="setback", per_dialogue=5), run_seed=1, step=1, first_group=0
    )
    assert sorted({len(j.prefix) for j in jobs}) == [1, 3, 4] and len(jobs) == 6


def by_id(log) -> dict[str, dict]:
    return {(d := json.loads(line))["meta"]["episode_id"]: d for line in log.open()}


@pytest.mark.parametrize("horizon,source", [(0, "own"), (1, "own"), (1, "reference")])
def test_the_loop_trains_on_branches_and_the_controller_sees_whole_dialogues_only(tmp_path, horizon, source):
    cfg = ["preset=tiny", "trainer.iterations=1", "trainer.steps_per_iteration=2", "dialogue.max_turns=3"]
    cfg += ["trainer.branch.groups=2", "trainer.branch.size=3", "trainer.update.entropy_coef=0.05"]
    cfg += [f"trainer.branch.turns={horizon}", f"trainer.branch.source={source}"]
    layout = RunLayout(train(load_config([*cfg, f"run_dir={tmp_path / 'run'}"])))
    steps = [json.loads(line) for line in layout.metrics.read_text().splitlines() if '"reward"' in line]
    full = 2 * 2  # the tiny preset: 2 profiles x 2 rollouts
    for s in steps:
        assert s["dialogues"] == full and s["groups"] == 2 + 2  # full groups, then the branched ones
        assert s["branches"]["dialogues"] == 2 * 3
        assert 0 < s["time"]["branches_s"] < s["time"]["rollout_s"]  # timed apart, inside the rollouts
        branches = [Episode.from_dict(json.loads(line)) for line in layout.branch_rollouts(s["step"]).open()]
        played = {
            json.loads(line)["meta"]["episode_id"]: json.loads(line) for line in layout.rollouts(s["step"]).open()
        }
        sources = played
        if source == "reference":  # the reference agent met the step's users with their draws
            sources = {
                json.loads(line)["meta"]["episode_id"]: json.loads(line)
                for line in layout.branch_sources(s["step"]).open()
            }
            assert sorted(f"{i}-ref" for i in played) == sorted(sources)
            assert all(sources[f"{i}-ref"]["meta"]["seed"] == e["meta"]["seed"] for i, e in played.items())
        assert len(branches) == 6 and len(sources) == full
        for b in branches:
            src = Episode.from_dict(sources[b.meta["branched_from"]])
            kept = b.meta["prefix_turns"]
            assert [t.agent.text for t in b.turns[:kept]] == [t.agent.text for t in src.turns[:kept]]
            assert sum(sum(seg.mask) for seg in b.segments) == b.tokens["agent_completion"] > 0
            if horizon:
                assert b.num_turns <= kept + horizon
    assert layout.rollout_files() == [layout.rollouts(1), layout.rollouts(2)]  # readers of whole dialogues


def test_a_shared_user_group_meets_one_draw_of_the_user_and_samples_the_agent_apart(restaurant, smollm_tokenizer):
    profiles = sample_testset(restaurant, 12, 3)
    shared = rollout_jobs(profiles, run_seed=5, step=2, group_size=3, shared_user=True)
    own = rollout_jobs(profiles, run_seed=5, step=2, group_size=3)
    assert [j.episode_id for j in shared] == [j.episode_id for j in own] and [j.group for j in shared] == [
        j.group for j in own
    ]
    for g in range(len(profiles)):
        members = [j for j in shared if j.group == g]
        assert len({j.seed for j in members}) == 1 and members[0].seed == own[3 * g].seed
        assert len({j.agent_seed for j in members}) == 3
    assert all(j.agent_seed is None for j in own)  # the original seeding, which the verl backend shares

    def transcripts(jobs):
        sim = build_usersim(load_config([]), restaurant)
        eps = asyncio.run(
            run_batch(
                jobs,
                scenario=restaurant,
                agent=ReferenceAgent(restaurant, smollm_tokenizer),
                user=sim,
                tokenizer=smollm_tokenizer,
                cfg=RunnerConfig(max_turns=10, max_new_tokens=300),
            )
        )
        return [[t.user.text if t.user else None for t in e.turns] for e in eps]

    # a deterministic agent: with one draw of the user the members are one dialogue; with their own, not always
    shared_t, own_t = transcripts(shared), transcripts(own)
    assert all(shared_t[3 * g] == shared_t[3 * g + k] for g in range(len(profiles)) for k in (1, 2))
    assert any(own_t[3 * g] != own_t[3 * g + k] for g in range(len(profiles)) for k in (1, 2))
