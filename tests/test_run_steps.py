"""What both training backends do with a step's dialogues through `sead.run` (the embedded trainer and the verl outer
loop call the same functions; their loop tests check they do): score each dialogue, feed the controller, write the
step's record, the controller's state and the validation metrics."""

import asyncio
import json

import pytest

from sead.config import build_usersim, load_config
from sead.controller import ProfileController, make_curriculum
from sead.dialogue import EpisodeJob, RunnerConfig, run_batch
from sead.dialogue.episode import Episode
from sead.metrics import compute_metrics
from sead.policy.scripted import ReferenceAgent
from sead.reward import compute_reward
from sead.run.fixed_profiles import fixed_profiles
from sead.run.layout import RunLayout
from sead.run.scoring import EpisodeScorer
from sead.run.steps import finish_step, write_controller_state, write_validation_metrics

WEIGHTS = ["reward.format=0.5", "reward.stage_progress=1.0"]  # shaped terms: totals differ from completion alone


@pytest.fixture(scope="module")
def played(restaurant, smollm_tokenizer):
    """Six scored dialogues of the reference agent against the scripted user, and one the simulator broke off."""
    cfg = load_config(WEIGHTS)
    score = EpisodeScorer.for_run(cfg, restaurant)
    jobs = [
        EpisodeJob(p, seed=i, episode_id=f"e{i}", group=i // 2)
        for i, p in enumerate(fixed_profiles(restaurant, 6, seed=3))
    ]
    episodes = asyncio.run(
        run_batch(
            jobs,
            scenario=restaurant,
            agent=ReferenceAgent(restaurant, smollm_tokenizer),
            user=build_usersim(cfg, restaurant),
            tokenizer=smollm_tokenizer,
            cfg=RunnerConfig(max_turns=8, max_new_tokens=200),
            score=score,
        )
    )
    broken = Episode(jobs[0].profile, [], "sim_error", meta={"reward": None})
    return cfg, score, [*episodes, broken]


def test_the_scorer_is_the_reward_under_the_runs_weights(restaurant, played):
    cfg, score, episodes = played
    for ep in episodes[:-1]:
        want = compute_reward(
            ep, score.weights, restaurant.space, num_stages=len(restaurant.stages), max_turns=cfg.dialogue.max_turns
        )
        assert ep.meta["reward"] == score(ep) == {"total": want.total, "components": want.components}
    assert score.weights.stage_progress == 1.0 and score.max_turns == cfg.dialogue.max_turns
    assert score(episodes[-1]) is None  # a simulator error is scored by nobody


def test_finish_step_feeds_the_controller_and_records_the_step(tmp_path, restaurant, played):
    _, _, episodes = played
    layout = RunLayout(tmp_path / "run")
    layout.create()
    rule = make_curriculum("fixed", restaurant.space, restaurant.default_marginals)
    controller = ProfileController(restaurant, rule, seed=0, update_every=1)
    shares = {d: {str(v): p for v, p in m.items()} for d, m in controller.marginals().items()}
    record = finish_step(episodes, controller=controller, space=restaurant.space, layout=layout)

    totals = [ep.meta["reward"]["total"] for ep in episodes[:-1]]
    assert len(set(totals)) > 1  # the dialogues differ, so a mean over the wrong set would show
    assert record.reward == pytest.approx(sum(totals) / len(totals))
    assert record.reward_components["completion"] == pytest.approx(sum(ep.success for ep in episodes) / len(totals))
    metrics = compute_metrics(episodes, restaurant.space)["metrics"]
    assert (record.CR, record.turns, record.UPA) == (
        metrics["CR"]["mean"],
        metrics["ADT"]["mean"],
        metrics["UPA"]["mean"],
    )
    assert (record.sim_errors, record.dialogues, record.controller_marginals) == (1, 7, shares)
    # the controller saw six outcomes and one simulator error, and its update report is in the run directory
    report = json.loads((layout.controller_dir / "controller_update_001.json").read_text())
    assert (report["dialogues"], report["sim_errors"]) == (6, 1)
    assert record.controller_update == report["reason"]

    record.update, record.time = {"kl": 0.5}, {"step_s": 2.0}
    line = record.to_dict()
    assert line["kl"] == 0.5 and line["time"] == {"step_s": 2.0} and "gen_tokens_per_s" not in line
    assert line["controller_update"] == report["reason"] and line["reward"] == record.reward

    write_controller_state(controller, layout, 4)
    assert json.loads(layout.controller_state(4).read_text()) == json.loads(json.dumps(controller.state_dict()))
    m = write_validation_metrics(
        episodes, space=restaurant.space, seed=7, layout=layout, iteration=2, step=4, train_minutes=None
    )
    assert json.loads(layout.validation_metrics(2).read_text()) == m
    assert m["at"] == {"step": 4, "train_minutes": None} and m["counts"]["sim_error"] == 1
    assert m["metrics"]["CR"] == compute_metrics(episodes, restaurant.space, seed=7)["metrics"]["CR"]


def test_the_step_record_carries_the_hack_monitors_when_given(tmp_path, restaurant, played):
    from sead.hack_monitor import HackMonitor

    _, _, episodes = played
    layout = RunLayout(tmp_path / "run")
    layout.create()
    monitor = HackMonitor.for_scenario(restaurant)

    def controller():
        return ProfileController(
            restaurant, make_curriculum("fixed", restaurant.space, restaurant.default_marginals), seed=0
        )

    plain = finish_step(episodes, controller=controller(), space=restaurant.space, layout=layout)
    watched = finish_step(episodes, controller=controller(), space=restaurant.space, layout=layout, monitor=monitor)
    assert "hack_monitors" not in plain.to_dict()
    line = json.loads(json.dumps(watched.to_dict()))
    assert line["hack_monitors"] == json.loads(json.dumps(monitor(episodes)))
    assert line["hack_monitors"]["flagged"] == []  # the reference agent games nothing
