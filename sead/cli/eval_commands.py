"""`sead testset make`, `sead eval MODEL [MODEL ...]` and `sead report RUN_DIR`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from omegaconf import DictConfig
from rich.table import Table

from sead.cli.registry import command, console
from sead.config import build_scenario, build_usersim, group_config, runner_config
from sead.errors import SEADInputError


def _testset(ec, scenario, *, make: bool):
    """The configured profile file, or the seeded default set (written on first use: it is deterministic)."""
    from sead.eval.testset import default_testset_path, load_testset, make_testset

    if ec.testset:
        if make:
            return make_testset(scenario, ec.testset_size, ec.testset_seed, ec.testset)
        return load_testset(ec.testset, scenario)
    path = default_testset_path(ec.testset_dir, scenario, ec.testset_size, ec.testset_seed)
    if path.exists() and not make:
        return load_testset(path, scenario)
    return make_testset(scenario, ec.testset_size, ec.testset_seed, path)


@command(
    "testset",
    "make",
    help="write the test set (eval.testset_size profiles drawn with eval.testset_seed, to "
    "eval.testset or eval.testset_dir) and print its content hash",
)
def testset_make(cfg: DictConfig, args: list[str]) -> int:
    ec = group_config(cfg, "eval")
    ts = _testset(ec, build_scenario(cfg), make=True)
    console.print(f"wrote {len(ts)} profiles to {ts.path} (content hash {ts.hash}, seed {ec.testset_seed})")
    return 0


@command(
    "eval",
    help="evaluate models on the test set; several models are also compared side by side",
    args={"MODEL [MODEL ...]": "RUN_DIR | CHECKPOINT | HF_PATH | openai:MODEL@URL | scripted:NAME"},
    checks_config=True,
)
def eval_cmd(cfg: DictConfig, args: list[str]) -> int:
    from sead.eval.compare import write_comparison
    from sead.eval.model_spec import parse_model_spec

    if not args:
        raise SEADInputError("name at least one model: sead eval MODEL [MODEL ...] [key=value ...]")
    ec = group_config(cfg, "eval")
    specs = [parse_model_spec(a) for a in args]  # every spec checked before the first dialogue
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise SEADInputError(
            f"two models would share a results folder ({names}); evaluate them separately with different eval.out_dir"
        )
    scenario = build_scenario(cfg)
    testset = _testset(ec, scenario, make=False)
    runner = runner_config(cfg)
    asyncio.run(build_usersim(cfg, scenario).check_health())
    compared = []
    try:
        for spec in specs:
            compared.append(_evaluate_one(cfg, ec, spec, scenario, testset, runner))
    except KeyboardInterrupt:
        console.print(
            f"interrupted; every finished dialogue is kept in {Path(ec.out_dir).absolute()}/<model>/dialogues.jsonl: "
            "run the same command again to play the rest",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return 130
    if len(compared) > 1:
        md, html = write_comparison(Path(ec.out_dir), compared)
        console.print(f"comparison: {md} and {html}")
    return 0


def _evaluate_one(cfg: DictConfig, ec, spec, scenario, testset, runner) -> tuple[str, dict]:
    """Play, score and report one model's evaluation; (its name, its results)."""
    from sead.eval.agents import build_agent
    from sead.eval.report import write_eval_report
    from sead.eval.results import build_results
    from sead.eval.run import eval_folder, evaluate
    from sead.hack_monitor import HackMonitor
    from sead.run.lock import folder_lock

    agent = build_agent(
        spec,
        scenario,
        sampling=ec.sampling,
        max_new_tokens=ec.max_new_tokens,
        max_batch=ec.max_batch,
        device=ec.device,
        tokenizer_path=ec.tokenizer,
        api_key_env=ec.api_key_env,
        backend=ec.backend,
        cuda_graph=ec.cuda_graph,
    )
    # A simulator per model: its HTTP sessions belong to the event loop of that model's evaluation. One writer per
    # results folder: a second `sead eval` into it would interleave its dialogues with these.
    with folder_lock(eval_folder(ec, spec), what="evaluation folder", setting="eval.out_dir"):
        out, episodes, info = evaluate(ec, spec, agent, build_usersim(cfg, scenario), testset, scenario, runner)
        results = build_results(
            episodes,
            scenario.space,
            info,
            seed=ec.seed,
            trials=ec.trials,
            prices=ec.prices,
            agent_params=agent.params,
            monitor=HackMonitor.for_scenario(scenario),
        )
        (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
        report = write_eval_report(out, spec.name, results, episodes, scenario.space, scenario.stages)
    _print_summary(spec.name, results, out, report)
    return spec.name, results


def _print_summary(name: str, results: dict, out: Path, report: Path) -> None:
    from sead.eval.report import summary_rows

    table = Table(
        title=f"{name}: {results['counts']['evaluated']} dialogues "
        f"({results['counts']['sim_error']} simulator errors excluded)"
    )
    for h in ("metric", "mean", "std", "95% CI", "n"):
        table.add_column(h)
    for row in summary_rows(results):
        table.add_row(*row)
    console.print(table)
    console.print(f"results: {out / 'results.json'}\nreport:  {report}\ndialogues: {out / 'dialogues.jsonl'}")


@command(
    "report",
    help="draw a training run's curves and last validation dialogues into RUN_DIR/report.html",
    args={"RUN_DIR": "the run directory of `sead train`"},
)
def report_cmd(cfg: DictConfig, args: list[str]) -> int:
    from sead.eval.training_report import write_training_report
    from sead.run.lock import run_dir_path

    if len(args) != 1:
        raise SEADInputError("give one run directory: sead report RUN_DIR")
    path = write_training_report(run_dir_path(args[0]))  # an empty one, or a symlink loop, named
    console.print(f"wrote {path}")
    return 0
