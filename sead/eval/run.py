"""Evaluate one model on a test set: k dialogues per profile through the batch runner, resumable.

Every finished dialogue is appended to `dialogues.jsonl` at once. Running the same command again after an
interruption keeps those and plays only the missing ones; the settings that define the evaluation (test-set
hash, seed, trials, decoding, agent, simulator, dialogue limits) are frozen in `settings.json` and a rerun with
different settings is refused rather than mixed into the same results.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, replace
from pathlib import Path

from rich.console import Console

from sead import compute
from sead.dialogue import Episode, EpisodeJob, RolloutLog, RunnerConfig, read_rollouts, run_batch
from sead.dialogue.seeds import eval_episode_seed
from sead.errors import SEADInputError, parse_json, read_user_text
from sead.eval.agents import EvalAgent
from sead.eval.model_spec import ModelSpec
from sead.eval.settings import EvalConfig
from sead.eval.testset import TestSet
from sead.progress import progress_bar
from sead.run.atomic import write_text_atomic
from sead.scenario import Scenario
from sead.usersim.base import UserSimulator, environment_identity

console = Console()
OUTPUTS = ("dialogues.jsonl", "settings.json", "results.json", "report.html")


EVAL_ID = re.compile(r"p(\d+)-t(\d+)")  # what `episode_id` writes: the profile's index in the test set, the trial


def episode_id(profile_index: int, trial: int) -> str:
    return f"p{profile_index:05d}-t{trial}"


def frozen_settings(
    ec: EvalConfig,
    spec: ModelSpec,
    agent: EvalAgent,
    user: UserSimulator,
    testset: TestSet,
    runner: RunnerConfig,
    scenario: Scenario,
) -> dict:
    dialogue = {k: v for k, v in asdict(runner).items() if k != "concurrency"}  # concurrency changes no result
    settings = {
        "scenario": scenario.name,
        "testset": {
            "hash": testset.hash,
            "path": str(testset.path),
            "size": len(testset),
            "evaluated": min(len(testset), ec.limit or len(testset)),
        },
        "seed": ec.seed,
        "trials": ec.trials,
        "agent": {**spec.to_dict(), **agent.policy.identity()},
        "agent_spec": spec.spec,
        "user_simulator": environment_identity(user),
        "dialogue": dialogue,
    }
    return json.loads(json.dumps(settings))  # as it reads back from settings.json (lists, not tuples)


def prepare_folder(out: Path, settings: dict, fresh: bool) -> dict[str, dict]:
    """Finished dialogues of an earlier run of the same evaluation, by id; refuses a different evaluation.

    A dialogue that ended as `sim_error` is not finished: the simulator, not the agent, failed it. Its record is
    dropped from the log here, so the rerun plays it again and the new record is the only one for its id.
    """
    out.mkdir(parents=True, exist_ok=True)
    settings_file, log_file = out / "settings.json", out / "dialogues.jsonl"
    if fresh:
        for name in OUTPUTS:
            (out / name).unlink(missing_ok=True)
    if settings_file.exists():
        earlier = _read_settings(settings_file)
        if earlier != settings:
            changed = sorted(k for k in set(earlier) | set(settings) if earlier.get(k) != settings.get(k))
            raise SEADInputError(
                f"{out} holds an evaluation with other settings ({', '.join(changed)} differ); "
                "pass eval.fresh=true to replace it or set eval.out_dir",
                path=settings_file,
            )
    write_text_atomic(settings_file, json.dumps(settings, indent=2))
    if not log_file.exists():
        return {}
    try:
        records = {r["meta"]["episode_id"]: r for r in read_rollouts(log_file)}  # a torn last line is dropped
    except (ValueError, KeyError, TypeError) as e:
        raise SEADInputError(
            f"unreadable dialogue log ({e}); pass eval.fresh=true to start over", path=log_file
        ) from None
    done = {k: r for k, r in records.items() if r.get("end_reason") != "sim_error"}
    # Rewrite without the torn line and the simulator failures, so new records start on a line of their own.
    write_text_atomic(log_file, "".join(json.dumps(r) + "\n" for r in done.values()))
    return done


def _read_settings(path: Path) -> dict:
    try:
        return parse_json(read_user_text(path, "evaluation settings"))
    except json.JSONDecodeError as e:
        raise SEADInputError(
            f"corrupt settings ({e.msg}); pass eval.fresh=true to start over", path=path, line=e.lineno
        ) from None


def eval_folder(ec: EvalConfig, spec: ModelSpec) -> Path:
    """Where one model's evaluation is written: eval.out_dir/<the model's name>."""
    return Path(ec.out_dir).expanduser().absolute() / spec.name


def evaluate(
    ec: EvalConfig,
    spec: ModelSpec,
    agent: EvalAgent,
    user: UserSimulator,
    testset: TestSet,
    scenario: Scenario,
    runner: RunnerConfig,
) -> tuple[Path, list[Episode], dict]:
    """(output folder, episodes in test-set order, run info)."""
    runner = replace(runner, max_new_tokens=ec.max_new_tokens, max_turns=ec.max_turns or runner.max_turns)
    out = eval_folder(ec, spec)
    settings = frozen_settings(ec, spec, agent, user, testset, runner, scenario)
    done = prepare_folder(out, settings, ec.fresh)
    profiles = testset.profiles[: ec.limit or None]
    jobs = [
        EpisodeJob(p, seed=eval_episode_seed(ec.seed, i, k), episode_id=episode_id(i, k), group=i)
        for i, p in enumerate(profiles)
        for k in range(ec.trials)
    ]
    todo = [j for j in jobs if j.episode_id not in done]
    t0 = time.perf_counter()
    if todo:
        if done:
            console.print(f"resuming {spec.name}: {len(done)} of {len(jobs)} dialogues already done")
        compute.serve(_play(todo, len(jobs), len(done), spec, agent, user, scenario, runner, out))
    finished = {r["meta"]["episode_id"]: r for r in read_rollouts(out / "dialogues.jsonl")} if jobs else {}
    episodes = [Episode.from_dict(finished[j.episode_id]) for j in jobs]
    info = {
        "wall_time_s": time.perf_counter() - t0,
        "dialogues_played": len(todo),
        "dialogues_resumed": len(jobs) - len(todo),
        "profile_index": [j.group for j in jobs],
        "settings": settings,
    }
    return out, episodes, info


async def _play(todo, total, already, spec, agent, user, scenario, runner, out: Path) -> None:
    with progress_bar(console) as progress, RolloutLog(out / "dialogues.jsonl") as log:
        task = progress.add_task(f"eval {spec.name}", total=total, completed=already)
        try:
            await run_batch(
                todo,
                scenario=scenario,
                agent=agent.policy,
                user=user,
                tokenizer=agent.tokenizer,
                cfg=runner,
                log=log,
                on_done=lambda ep: progress.advance(task),
            )
        except Exception as e:
            saved = int(progress.tasks[0].completed)
            raise RuntimeError(
                f"evaluation of {spec.name} stopped: {type(e).__name__}: {e}. {saved} of {total} "
                f"dialogues are saved in {out / 'dialogues.jsonl'}; run the same command again "
                "to finish the rest"
            ) from e
        finally:  # HTTP sessions are bound to this event loop: close them in it
            await user.aclose()
            closer = getattr(agent.policy, "aclose", None)
            if closer is not None:
                await closer()
