"""benchmarks/learning_curve.py: the paired statistics against hand-computed values, and the whole pipeline in its
--quick mode on the tiny model (one saved warm-up that every arm starts from, step budgets, the report). The tiny
model completes nothing, so no learning is asserted: only that the experiment is the one it claims to be."""

import asyncio
import json
import shutil
from pathlib import Path

import pytest
import torch
from benchmark_scripts import load_benchmark
from omegaconf import OmegaConf
from safetensors.torch import load_file
from scripted_play import StubTokenizer, converse

from sead.config import build_scenario, build_usersim, load_config
from sead.dialogue import Episode, read_rollouts
from sead.dialogue.seeds import validation_episode_seed
from sead.metrics import concerns_by_kind
from sead.policy.scripted import ReferenceAgent
from sead.run.fixed_profiles import fixed_profiles
from sead.run.layout import RunLayout
from sead.run.paired import held_out_outcomes, paired_comparison
from sead.scenario.tags import AGENT_READING_VERSION
from sead.stats import mcnemar_exact, wilson_interval
from sead.usersim.rules import READING_VERSION

QUICK_STEPS, QUICK_DIALOGUES = 2, 3 * 2  # --quick: 2 GRPO steps, 3 held-out profiles x 2 trials


@pytest.fixture(scope="module")
def script():
    return load_benchmark("learning_curve")


@pytest.fixture(scope="module")
def quick(script, tmp_path_factory):
    """One --quick run, read (never written) by the tests below, except the last, which only re-reads it."""
    out = tmp_path_factory.mktemp("learning_curve") / "out"
    script.main(["--quick", "--out", str(out)])
    return out, json.loads((out / "learning_curve.json").read_text())


# -- statistics -------------------------------------------------------------------------------------------------
def test_mcnemar_exact_is_the_two_sided_binomial_tail_of_the_discordant_pairs():
    assert mcnemar_exact(10, 0) == mcnemar_exact(0, 10) == 2 * 0.5**10
    assert mcnemar_exact(3, 1) == 2 * (1 + 4) / 2**4 == 0.625
    assert mcnemar_exact(12, 2) == 2 * (1 + 14 + 91) / 2**14
    assert mcnemar_exact(0, 0) == mcnemar_exact(5, 5) == 1.0  # capped: the two tails overlap at the middle
    # 1,200 discordant pairs: 0.5**1200 is 0.0 in floats, the exact tail is not (normal approximation: 0.0039)
    assert 0.0040 < mcnemar_exact(650, 550) < 0.0045
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)


def outcomes(successes: list, trials: int = 1) -> dict:
    return {
        (i // trials, i % trials): {"profile": {"cooperation": i // trials}, "success": s}
        for i, s in enumerate(successes)
    }


def test_pairing_counts_each_cell_and_drops_pairs_with_a_simulator_error():
    a = outcomes([True, True, False, False, True, True, None])
    b = outcomes([False, True, False, True, False, None, True])
    c = paired_comparison(a, b)
    assert (c["pairs"], c["sim_errors"]) == (5, 2)
    assert (c["both"], c["only_a"], c["only_b"], c["neither"]) == (1, 2, 1, 1)
    assert c["gain_points"] == 100 * (2 - 1) / 5
    assert c["p_mcnemar"] == mcnemar_exact(2, 1) == 1.0


def test_pairing_refuses_sets_that_are_not_the_same_dialogues():
    a = outcomes([True, False, True, False], trials=2)  # profiles 0, 1 x trials 0, 1
    with pytest.raises(ValueError, match="2 only in the first, 2 only in the second"):
        paired_comparison(a, outcomes([True, False, True, False], trials=1))  # profiles 0-3 x trial 0
    with pytest.raises(ValueError, match="2 only in the first, 0 only in the second"):
        paired_comparison(a, outcomes([True, False], trials=2))
    other_users = {k: {**v, "profile": {"cooperation": 4}} for k, v in a.items()}
    with pytest.raises(ValueError, match="4 dialogues pose different users"):
        paired_comparison(a, other_users)


def test_held_out_outcomes_are_keyed_by_profile_and_trial_from_the_episode_id(tmp_path):
    def record(episode_id: str, success: bool, end_reason: str = "user_success") -> str:
        meta = {"episode_id": episode_id}
        return json.dumps({"profile": {"trust": 1}, "success": success, "end_reason": end_reason, "meta": meta})

    path = tmp_path / "iter_000.jsonl"
    path.write_text("\n".join([record("val12-1", True), record("val3-0", False, "sim_error")]) + "\n")
    got = held_out_outcomes(path)
    assert got == {
        (12, 1): {"profile": {"trust": 1}, "success": True},
        (3, 0): {"profile": {"trust": 1}, "success": None},
    }
    path.write_text(record("s1-p0-r0", True) + "\n")  # a training rollout, not a held-out dialogue
    with pytest.raises(ValueError, match="not a held-out dialogue id"):
        held_out_outcomes(path)
    path.write_text(record("val1-0", True) + "\n" + record("val1-0", False) + "\n")
    with pytest.raises(ValueError, match="appears twice"):
        held_out_outcomes(path)


# -- the held-out set -------------------------------------------------------------------------------------------
def test_every_phase_of_the_full_run_poses_the_fixed_held_out_set_whatever_the_overrides(script, tmp_path):
    assert script.HELD_OUT_SEED != script.DEVELOPMENT_SEED == 4242  # 4242: the default, used in development
    args = script.parse_args(["--out", str(tmp_path), "trainer.validation.seed=4242", "trainer.validation.profiles=9"])
    for phase in script.phases(args):
        val = load_config(script.overrides(args, phase)).trainer.validation
        assert (val.seed, val.profiles, val.trials) == (script.HELD_OUT_SEED, 200, 1)
        assert val.sampling.temperature == 0.0


def test_the_anchors_control_is_grpo_fixed_without_its_policy_gradient_and_runs_only_when_named(script, tmp_path):
    """imitation_only, the control of a grpo_fixed run with trainer.update.imitation_coef: the same settings, steps
    and warm-up but for the policy gradient; a plain run (no anchor) does not include it."""
    from sead.run.frozen_config import changed_settings

    anchored = ["trainer.update.imitation_coef=1.0"]
    args = script.parse_args(["--development", "--out", str(tmp_path), *anchored])
    by_name = {p.name: p for p in script.phases(args)}
    config = {n: OmegaConf.to_container(load_config(script.overrides(args, p))) for n, p in by_name.items()}
    grpo, control = config["grpo_fixed"], config["imitation_only"]
    assert dict(changed_settings(grpo, control)) == {"trainer.update.policy_gradient": (True, False)}
    assert by_name["imitation_only"].steps == by_name["grpo_fixed"].steps == script.FULL["steps"]
    assert "imitation_only" not in [p.name for p in script.chosen_phases(script.parse_args(["--out", str(tmp_path)]))]
    assert ("grpo_fixed", "imitation_only") in [c[:2] for c in script.COMPARISONS]


# -- the quick run ----------------------------------------------------------------------------------------------
def test_every_arm_reports_cr_with_its_wilson_ci_and_the_user_side_measures(quick):
    out, result = quick
    assert (out / "learning_curve.png").stat().st_size > 0
    page = (out / "learning_curve.html").read_text()  # one page: the tables, the figure and a funnel per arm
    assert all(f"SOP funnel: {a['label']}" in page for a in result["arms"].values())
    assert page.count("data:image/png;base64,") == 1 + len(result["arms"]) and "exact McNemar" in page
    assert list(result["arms"]) == ["base", "warmup_only", "grpo_fixed", "grpo_sead_joint"]
    for arm in result["arms"].values():
        assert arm["n"] == QUICK_DIALOGUES and arm["ci95"] == wilson_interval(arm["completed"], arm["n"])
        assert set(arm["CAR"]) == set(arm["ACK"]) == {"mean", "ci95"}
        lost = sum(c["concern_open"] + c["no_concern_open"] for c in arm["funnel"]["lost"].values())
        assert lost == arm["n"] - arm["completed"]  # every failed dialogue is placed in the funnel once
        assert sum(arm["funnel"]["lost_to"].values()) >= lost  # and by what it was lost to, at least once
    assert "what the user objected to in its last turn" in page
    for arm in result["arms"].values():  # the concerns by kind are those of the arm's own dialogues
        episodes = [Episode.from_dict(r) for r in read_rollouts(arm["dialogues"])]
        assert arm["funnel"]["concerns"] == concerns_by_kind(e for e in episodes if not e.sim_error)
    shown = [*result["arms"].values(), result["reference"]]  # the reference agent's funnel is tabled beside them
    voiced = {k for a in shown for k in a["funnel"]["concerns"]}
    assert ("concerns by kind: answered / voiced" in page) == bool(voiced)
    assert all(f"<td>{kind}</td>" in page for kind in voiced)
    assert [a["grpo_steps"] for a in result["arms"].values()] == [0, 0, QUICK_STEPS, QUICK_STEPS]
    assert result["held_out"] == {"profiles": 3, "trials": 2, "seed": 4242}  # --quick never plays the held-out seed


def test_comparisons_are_exact_mcnemar_tests_on_the_arms_own_dialogues(quick):
    _, result = quick
    pairs = {(c["a"], c["b"]): c for c in result["comparisons"]}
    assert list(pairs)[:2] == [("grpo_fixed", "warmup_only"), ("grpo_sead_joint", "grpo_fixed")]
    played = {**result["arms"], "reference": result["reference"]}
    for (a, b), c in pairs.items():
        files = (Path(played[name]["dialogues"]) for name in (a, b))
        assert {k: v for k, v in c.items() if k not in ("a", "b", "measures")} == paired_comparison(
            *map(held_out_outcomes, files)
        )
        assert c["pairs"] == QUICK_DIALOGUES and c["p_mcnemar"] == mcnemar_exact(c["only_a"], c["only_b"])
    claim = pairs["grpo_fixed", "warmup_only"]
    assert result["target"]["gain_points"] == claim["gain_points"] and result["target"]["met"] is False


def test_the_reference_agent_plays_the_arms_own_dialogues_beside_them(quick):
    """What the warm-up imitates, on the same users and simulator draws: each of its dialogues is the one the
    reference agent plays alone with that user and seed, and the report pairs it with warm-up only."""
    out, result = quick
    ref = result["reference"]
    assert ref["n"] == QUICK_DIALOGUES and ref["ci95"] == wilson_interval(ref["completed"], ref["n"])
    room = next(c for c in result["comparisons"] if (c["a"], c["b"]) == ("reference", "warmup_only"))
    assert room["pairs"] == QUICK_DIALOGUES  # paired: the same dialogue ids with the same profiles
    page = (out / "learning_curve.html").read_text()
    assert ref["label"] in page and f"room: the scripted reference agent completes {ref['completed']} / " in page
    cfg = OmegaConf.create(result["config"])
    scenario, held_out = build_scenario(cfg), result["held_out"]
    played = {e.meta["episode_id"]: e for e in map(Episode.from_dict, read_rollouts(ref["dialogues"]))}
    for i, profile in enumerate(fixed_profiles(scenario, held_out["profiles"], held_out["seed"])):
        for trial in range(held_out["trials"]):
            seed = validation_episode_seed(held_out["seed"], i, trial)
            agent, user = ReferenceAgent(scenario, StubTokenizer()), build_usersim(cfg, scenario)
            alone = asyncio.run(converse(scenario, agent, user, profile, seed, max_turns=cfg.dialogue.max_turns))
            here = played[f"val{i}-{trial}"]
            assert [t.agent.response for t in here.turns] == [t.agent.response for t in alone.turns]
            assert (here.success, here.end_reason) == (alone.success, alone.end_reason)


def test_the_room_line_says_how_much_of_the_gap_to_the_reference_the_target_takes(script):
    room = {"a": "reference", "b": "warmup_only", "pairs": 200, "only_a": 32, "only_b": 0}
    result = {"reference": {"completed": 136, "n": 200}, "comparisons": [room]}
    assert script.headroom(result).endswith("the target's +10 points take 20 more won than lost: 62% of those 32")
    room["only_a"] = 20
    assert script.headroom(result).endswith("take 20 more won than lost: 100% of those 20")
    room["only_a"] = 7  # the reference wins fewer than the target needs
    assert script.headroom(result).endswith("take 20 more won than lost: more than the 7 it wins")
    assert script.headroom({**result, "comparisons": []}) is None


def test_the_arms_start_from_the_one_saved_warm_up(quick):
    out, _ = quick
    saved = RunLayout(out / "warmup").warmup
    original = load_file(saved.model / "model.safetensors")
    for name in ("warmup_only", "grpo_fixed", "grpo_sead_joint"):
        warmup = RunLayout(out / name).warmup
        summary = json.loads(warmup.summary.read_text())
        assert summary.pop("reused_from") == str(saved.path)
        assert summary == json.loads(saved.summary.read_text())
        loaded = load_file(warmup.model / "model.safetensors")
        assert loaded.keys() == original.keys() and all(torch.equal(loaded[k], original[k]) for k in original)
    assert not RunLayout(out / "base").warmup.path.exists()


def test_each_rl_arm_takes_its_step_budget_and_is_measured_once_at_the_end(quick):
    out, result = quick
    for name in ("grpo_fixed", "grpo_sead_joint"):
        layout = RunLayout(out / name)
        steps = [json.loads(l)["step"] for l in layout.metrics.read_text().splitlines() if '"reward"' in l]
        assert steps == list(range(1, QUICK_STEPS + 1)) == [s["step"] for s in result["rl_steps"][name]]
        assert layout.validated_iterations() == [QUICK_STEPS]
        # a checkpoint every third of the budget (here every step), so that a killed arm resumes near where it was
        assert [f.name for f in layout.checkpoint_folders()] == [f"step_{s:06d}" for s in range(QUICK_STEPS, 0, -1)]
        assert result["phases"][name]["rl_minutes"] > 0 and result["phases"][name]["cpu"]
    for name in ("base", "warmup_only"):
        assert RunLayout(out / name).validated_iterations() == [0] and not RunLayout(out / name).rollout_files()
    assert result["phases"]["warmup"]["warmup_minutes"] > 0


def test_the_rl_arms_differ_only_in_the_curriculum_which_acts_from_the_second_step(quick):
    out, result = quick
    assert result["config_differences"]["grpo_fixed"] == {}
    assert result["config_differences"]["grpo_sead_joint"] and all(
        key.startswith("controller.") for key in result["config_differences"]["grpo_sead_joint"]
    )

    def first_step_users(name: str) -> list[dict]:
        return [json.loads(l)["profile"] for l in RunLayout(out / name).rollouts(1).read_text().splitlines()]

    def weights(name: str, iteration: int) -> list[float]:
        return json.loads(RunLayout(out / name).controller_state(iteration).read_text())["probs"]

    # same seed, same starting weights: the same users at step 1; the controller update after it then differs
    assert first_step_users("grpo_fixed") == first_step_users("grpo_sead_joint")
    assert weights("grpo_fixed", 1) == weights("grpo_fixed", QUICK_STEPS) != weights("grpo_sead_joint", 1)


def test_checkpoints_fall_every_third_of_an_arms_budget(script):
    assert [script.checkpoint_every(n) for n in (1, 2, 3, 4, 10, 30)] == [1, 1, 1, 2, 4, 10]
    args = script.parse_args(["--steps", "10", "--out", "x"])
    grpo = [p for p in script.phases(args) if p.steps]
    assert grpo and all("trainer.save_every=4" in p.settings for p in grpo)


def test_a_rerun_reuses_finished_phases_and_refuses_one_run_with_other_settings(script, quick):
    out, result = quick
    times = (out / "phase_times.json").read_text()
    # an arm that saved checkpoints on another schedule (an older version of this script) is the same arm
    config = RunLayout(out / "grpo_fixed").config
    config.write_text(
        config.read_text().replace(f"save_every: {script.checkpoint_every(QUICK_STEPS)}", "save_every: 7")
    )
    assert "save_every: 7" in config.read_text()
    script.main(["--quick", "--out", str(out), "--results", str(out / "again")])
    assert (out / "phase_times.json").read_text() == times  # nothing ran again
    assert json.loads((out / "again.json").read_text())["comparisons"] == result["comparisons"]
    with pytest.raises(SystemExit, match=r"base was run with other settings \(reward.format 0.1 -> 0.3"):
        script.main(["--quick", "--out", str(out), "reward.format=0.3"])
    # a phase played against another user simulator (the rules' dynamics changed since) is not reused either,
    # nor one whose agent turns were read by older rules (a second </response> is malformed since 2026-11-28), nor one
    # resumed under older rules on the way (resume_allow_changes)
    base = RunLayout(out / "base")
    saved = base.usersim
    identity = json.loads(saved.read_text())
    assert identity["agent_reading"] == AGENT_READING_VERSION
    older = AGENT_READING_VERSION - 1
    for record, changed, why in (
        (saved, {"dynamics": {**identity["dynamics"], "wrong_answer_cost": 0}}, "wrong_answer_cost 0 -> 1"),
        (saved, {"agent_reading": older}, f"agent_reading {older} -> {AGENT_READING_VERSION}"),
        (base.resume_usersim(1), {"agent_reading": older}, f"agent_reading {older} -> {AGENT_READING_VERSION}"),
    ):
        record.write_text(json.dumps({**identity, **changed}))
        try:
            with pytest.raises(SystemExit, match=rf"base was played against another user simulator .*{why}"):
                script.main(["--quick", "--out", str(out)])
        finally:
            saved.write_text(json.dumps(identity))
            base.resume_usersim(1).unlink(missing_ok=True)


def test_the_development_mode_measures_on_the_development_seed_and_reports_beside_its_runs(script, tmp_path):
    args = script.parse_args(["--development", "--profiles", "50", "--out", str(tmp_path)])
    assert script.held_out_set(args) == {"profiles": 50, "trials": 1, "seed": script.DEVELOPMENT_SEED}
    assert args.results == tmp_path / "learning_curve"  # never over the held-out figures in benchmarks/
    for phase in script.phases(args):
        assert load_config(script.overrides(args, phase)).trainer.validation.seed == script.DEVELOPMENT_SEED


def test_an_arm_can_start_from_another_runs_warm_up_and_run_alone(script, quick, tmp_path):
    """How recipes are compared in development: one warm-up, each candidate arm in its own --out."""
    out, _ = quick
    with pytest.raises(SystemExit):  # argparse's error: a folder without a finished warm-up
        script.parse_args(["--quick", "--warmup-from", str(tmp_path), "--out", str(tmp_path / "x")])
    other = tmp_path / "candidate"
    args = ["--quick", "--warmup-from", str(out / "warmup"), "--phases", "warmup", "grpo_fixed", "--out", str(other)]
    script.main([*args, "trainer.update.lr=3e-5"])
    assert sorted(p.name for p in other.iterdir() if p.is_dir()) == ["grpo_fixed"]  # the warm-up was not run again
    result = json.loads((other / "learning_curve.json").read_text())
    assert list(result["arms"]) == ["grpo_fixed"] and result["config"]["trainer"]["update"]["lr"] == 3e-5
    assert result["warmup"] == json.loads(RunLayout(out / "warmup").warmup.summary.read_text())
    assert json.loads(RunLayout(other / "grpo_fixed").warmup.summary.read_text())["reused_from"] == str(
        RunLayout(out / "warmup").warmup.path
    )


def test_the_arms_can_start_from_a_warm_up_folder_itself_such_as_one_epoch_of_a_longer_warm_up(script, quick):
    """Choosing the warm-up's length: `--warmup-from RUN/warmup/warmup/epoch2` (trainer.warmup.keep_epochs)."""
    out, _ = quick
    folder = RunLayout(out / "warmup").warmup.path
    for given in (out / "warmup", folder):  # a run, or the warm-up folder it holds
        args = script.parse_args(["--quick", "--warmup-from", str(given), "--out", str(out / "unused")])
        only = next(p for p in script.phases(args) if p.name == "warmup_only")
        assert f"trainer.warmup.reuse={folder}" in only.settings


def test_a_run_can_be_finished_elsewhere_from_the_earlier_results(script, quick, tmp_path):
    """A run too long for one session: the arms measured before stand in through their results JSON, and an arm
    measured again is compared with its earlier self dialogue by dialogue."""
    out, result = quick
    earlier, later = out / "learning_curve.json", tmp_path / "later"
    with pytest.raises(SystemExit):  # argparse's error: no such results file
        script.parse_args(["--quick", "--earlier", str(tmp_path / "none.json"), "--out", str(later)])
    args = ["--quick", "--warmup-from", str(out / "warmup"), "--phases", "warmup_only", "--out", str(later)]
    script.main([*args, "--earlier", str(earlier)])
    again = json.loads((later / "learning_curve.json").read_text())
    assert list(again["arms"]) == list(result["arms"])
    assert [a.get("from") for a in again["arms"].values()] == [str(earlier), None, str(earlier), str(earlier)]
    assert again["comparisons"] == result["comparisons"]  # the same pairs, from outcomes kept in the JSON
    assert again["repeated"] == {"warmup_only": {"dialogues": QUICK_DIALOGUES, "ended_otherwise": 0}}
    assert again["rl_steps"] == result["rl_steps"] and again["target"] == result["target"]
    assert again["phases"]["grpo_fixed"]["from"] == str(earlier) and "from" not in again["phases"]["warmup_only"]
    # the reference agent is played again from a run measured here, or, where none is, carried from the results
    assert again["reference"]["outcomes"] == result["reference"]["outcomes"]
    assert script.collect(tmp_path / "nothing here", earlier)["reference"] == result["reference"]

    def altered(change) -> Path:
        data = json.loads(earlier.read_text())
        change(data["arms"]["base"])
        path = tmp_path / "altered.json"
        path.write_text(json.dumps(data))
        return path

    with pytest.raises(SystemExit, match="arms base carry no per-dialogue outcomes"):
        script.collect(later, altered(lambda base: base.pop("outcomes")))
    with pytest.raises(SystemExit, match=r"base and warmup_only pose different tasks .*trainer.validation.seed"):
        script.collect(later, altered(lambda base: base["config"]["trainer"]["validation"].update(seed=7)))
    # an arm measured against another user: other rules, or from before results recorded the simulator at all
    with pytest.raises(SystemExit, match=r"base and warmup_only .*different user simulators .*substance_words 0 -> 3"):
        script.collect(later, altered(lambda base: base["user_simulator"]["dynamics"].update(substance_words=0)))
    with pytest.raises(SystemExit, match=r"different user simulators \(one was measured before"):
        script.collect(later, altered(lambda base: base.pop("user_simulator")))
    # or against the same rules file read by an older reading of replies (2026-11-25's closed holes in code alone)
    older = READING_VERSION - 1
    with pytest.raises(SystemExit, match=rf"different user simulators .*reading {older} -> {READING_VERSION}"):
        script.collect(later, altered(lambda base: base["user_simulator"].update(reading=older)))
    older = AGENT_READING_VERSION - 1  # or whose agent turns were read by older rules
    why = f"agent_reading {older} -> {AGENT_READING_VERSION}"
    with pytest.raises(SystemExit, match=rf"different user simulators .*{why}"):
        script.collect(later, altered(lambda base: base["user_simulator"].update(agent_reading=older)))


def test_the_reference_agent_is_refused_beside_arms_that_met_another_user(script, quick, tmp_path):
    """The reference agent is played again at each report with this checkout's user simulator: beside arms recorded
    under an older reading of replies, a change of the user would pass for room the agent has left."""
    out, _ = quick
    older = READING_VERSION - 1
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    for record in copy.glob("*/usersim.json"):
        record.write_text(json.dumps({**json.loads(record.read_text()), "reading": older}))
    why = "base and reference were measured against different user simulators "
    why += rf"\(.*reading {older} -> {READING_VERSION}"
    with pytest.raises(SystemExit, match=why + r"\); the reference agent is played with this checkout's"):
        script.collect(copy)
    # carried from earlier results (no run here to play it from), it is held to the arms' user all the same
    data = json.loads((out / "learning_curve.json").read_text())
    data["reference"]["user_simulator"]["reading"] = older
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps(data))
    with pytest.raises(SystemExit, match=rf"base and reference .*reading {READING_VERSION} -> {older}\)$"):
        script.collect(tmp_path / "nothing here", earlier)


def test_several_runs_of_the_script_are_read_as_one_verdict_on_the_recipe(quick, tmp_path):
    """learning_curve_runs.py reads the files this script writes (its own tests use files reduced by hand)."""
    _, result = quick
    paths = []
    for seed in (3, 1):
        path = tmp_path / f"seed{seed}.json"
        path.write_text(json.dumps({**result, "config": {**result["config"], "seed": seed}}))
        paths.append(path)
    report = load_benchmark("learning_curve_runs").collect(paths)
    assert [r["run_seed"] for r in report["runs"]] == [1, 3] and report["held_out"] == result["held_out"]
    assert [r["gain_points"] for r in report["runs"]] == [result["target"]["gain_points"]] * 2
    assert report["summary"]["runs_meeting_target"] == 2 * result["target"]["met"]


def test_the_report_goes_into_a_results_folder_it_creates(script, quick, tmp_path):
    out, result = quick
    target = tmp_path / "not" / "there yet" / "lc"  # created before any phase runs, not found missing at the end
    script.main(["--quick", "--report-only", "--out", str(out), "--results", str(target)])
    assert json.loads(target.with_suffix(".json").read_text())["arms"].keys() == result["arms"].keys()
    assert target.with_suffix(".png").is_file() and target.with_suffix(".html").is_file()
