"""benchmarks/before_after.py on the tiny model: both arms (here the committed tree as "before" and this checkout
as "after") play the same evaluation task and one GRPO step from the same warm-up, and the figures of every pass
are kept. No timing is asserted (tests are not timers)."""

import json
import shutil

import pytest
from benchmark_scripts import load_benchmark

TINY = ["model=tiny", "dialogue.max_turns=2", "dialogue.max_new_tokens=8", "eval.max_new_tokens=8"]


def warmup_folder(tiny_model_dir, tmp_path):
    warmup = tmp_path / "warmup"
    shutil.copytree(tiny_model_dir, warmup / "model")
    summary = {"imitated": 1, "dialogues": 1, "reference_CR": 1.0, "nll_first": 1.0, "nll_last": 0.5, "minutes": 0.1}
    (warmup / "summary.json").write_text(json.dumps(summary))
    return warmup


def test_both_arms_play_the_same_evaluation_and_one_step_from_the_same_warm_up(tiny_model_dir, tmp_path):
    module = load_benchmark("before_after")
    out = tmp_path / "before_after.json"
    argv = [str(warmup_folder(tiny_model_dir, tmp_path)), "--before", "HEAD", "--profiles", "2", "--batch", "2"]
    argv += ["--rollouts", "2", "--repeats", "1", "--work", str(tmp_path / "work"), "--out", str(out), *TINY]
    result = module.main(argv)
    assert json.loads(out.read_text()) == result and result["overrides"] == TINY
    assert (tmp_path / "work" / "code_before" / "sead" / "__init__.py").exists()
    for arm in ("before", "after"):
        (ev,), (step,) = result["eval"][arm], result["step"][arm]
        assert ev["s"] > 0 and ev["agent_tokens"] > 0 and 1 <= ev["turns"] <= 2
        assert step["s"] == pytest.approx(step["rollout_s"] + step["update_s"]) and step["trained_tokens"] > 0
    # the same task: both arms played the same test profiles, and the same profiles in the step
    work = tmp_path / "work"
    for played in ("eval/*/dialogues.jsonl", "run/rollouts/step_000001.jsonl"):
        kind = "eval" if played.startswith("eval") else "step"
        seen = {arm: episodes(work / f"{arm}_{kind}_0", played) for arm in ("before", "after")}
        assert seen["before"] == seen["after"] and seen["after"]


def episodes(folder, pattern):
    return sorted(
        (rec["meta"]["episode_id"], json.dumps(rec["profile"], sort_keys=True))
        for path in folder.glob(pattern)
        for rec in map(json.loads, path.open())
    )


def test_a_revision_that_does_not_exist_is_named(tiny_model_dir, tmp_path):
    module = load_benchmark("before_after")
    warmup = warmup_folder(tiny_model_dir, tmp_path)
    with pytest.raises(SystemExit, match="git archive no-such-rev failed"):
        module.main([str(warmup), "--before", "no-such-rev", "--work", str(tmp_path / "work")])


def test_a_folder_that_is_not_a_warm_up_is_refused(tmp_path, capsys):
    module = load_benchmark("before_after")
    with pytest.raises(SystemExit):
        module.main([str(tmp_path)])
    assert "is not a warm-up folder" in capsys.readouterr().err


def test_the_step_alone(tiny_model_dir, tmp_path, capsys):
    """`--no-eval`: only the GRPO step is played, by both arms; the report leaves the evaluation out."""
    module = load_benchmark("before_after")
    argv = [str(warmup_folder(tiny_model_dir, tmp_path)), "--before", "HEAD", "--no-eval", "--rollouts", "2"]
    argv += ["--repeats", "1", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out.json"), *TINY]
    result = module.main(argv)
    assert result["eval"] == {"before": [], "after": []}
    assert all(len(result["step"][arm]) == 1 and result["step"][arm][0]["trained_tokens"] > 0 for arm in result["step"])
    with pytest.raises(SystemExit):
        module.main([*argv, "--no-step"])
    assert "leave nothing to measure" in capsys.readouterr().err
