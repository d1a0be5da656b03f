"""Subcommands of `sead`. Each is a thin layer over the library: load, call, print."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig
from rich.table import Table

from sead.cli.registry import command, console
from sead.config import (
    SHIPPED_CONFIG_DIR,
    ProfilesConfig,
    build_controller,
    build_scenario,
    needs_rules,
    project_root,
    to_schema,
)
from sead.errors import SEADInputError

TRAINED_NOTHING = 3  # `sead train`'s exit status where a run that planned RL steps changed no weight with them


@command(
    "scenario",
    "check",
    help="validate the selected scenario (prompts, behaviours, profile space, rules file), summarise it",
    args={"[--json]": "print the summary as JSON"},
)
def scenario_check(cfg: DictConfig, args: list[str]) -> int:
    scenario = build_scenario(cfg)  # reads and checks every file the scenario names, the rules file included
    readers = needs_rules(cfg)
    if scenario.rules_path is None and readers:
        raise SEADInputError(
            f"scenario {scenario.name!r} has no rules file, and {' and '.join(readers)} read one: set `rules:` in "
            "its config (sead scenario new NAME writes a scenario with one to copy from)",
            field="scenario.rules",
        )
    controller = build_controller(cfg, scenario)
    example = controller.sample(1)[0]
    scenario.user_system_prompt(example)  # rendering proves every placeholder has a value
    info = scenario.summary()
    if "--json" in args:
        print(json.dumps({**info, "status": "OK"}, indent=2))
        return 0
    table = Table(title=f"scenario {info['name']}: OK", show_header=False)
    table.add_row("SOP stages", ", ".join(f"{i} {s}" for i, s in enumerate(info["stages"])))
    for name, d in info["dimensions"].items():
        kind = f"sampled from {d['allowed']}" if d["sampled"] else "reported only"
        table.add_row(f"dimension {name}", f"{d['range'][0]}-{d['range'][1]}, {kind}")
    table.add_row("joint states", str(info["joint_states"]))
    table.add_row("behaviours", f"{info['behaviours']} in {len(info['categories'])} categories")
    table.add_row("behaviours per profile", "{}-{}".format(*info["behaviours_per_profile"]))
    table.add_row("rules", info["rules"] or "none (needed by the scripted user and the reference agent)")
    table.add_row("agent prompt", f"{info['agent_prompt']['file']} ({info['agent_prompt']['words']} words)")
    table.add_row(
        "user prompt",
        f"{info['user_prompt']['file']} ({info['user_prompt']['words']} words; "
        f"placeholders {', '.join(info['user_prompt']['placeholders'])})",
    )
    marginals = {d: {v: round(p, 3) for v, p in m.items()} for d, m in controller.marginals().items()}
    table.add_row("controller", f"{controller.rule.name}, marginals {marginals}")
    console.print(table)
    return 0


@command(
    "scenario",
    "new",
    help="write a scenario to edit into this project: a renamed copy of a shipped one (config, prompts, "
    "behaviours, rules)",
    args={
        "NAME": "the new scenario's name (lowercase letters, digits, _)",
        "[--from SCENARIO]": "the shipped scenario to copy (default restaurant)",
    },
)
def scenario_new(cfg: DictConfig, args: list[str]) -> int:
    from sead.scenario.scaffold import new_scenario

    opts = _options(args, {"--from": "restaurant"})
    if len(opts["positional"]) != 1:
        raise SEADInputError("give one name: sead scenario new NAME [--from SCENARIO]")
    name, root = opts["positional"][0], project_root()
    written = new_scenario(name, root, SHIPPED_CONFIG_DIR.parent, opts["--from"])
    for path in written:
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)
    console.print(
        f"next: sead scenario check scenario={name}\n"
        f"      sead train scenario={name} preset=tiny scenario.agent_prompt={written[1].relative_to(root)}",
        highlight=False,
        soft_wrap=True,
    )
    return 0


@command(
    "profiles",
    "sample",
    help="draw profiles.n profiles from the controller and write them to profiles.out (.jsonl or .parquet)",
)
def profiles_sample(cfg: DictConfig, args: list[str]) -> int:
    from sead.scenario import write_profiles

    settings = to_schema(ProfilesConfig, cfg.get("profiles"), "profiles")  # n >= 1, declared on the field
    scenario = build_scenario(cfg)
    controller = build_controller(cfg, scenario)
    n = settings.n
    profiles = controller.sample(n)
    out = Path(settings.out)
    path = write_profiles(profiles, out if out.is_absolute() else Path.cwd() / out)
    table = Table(title=f"{n} profiles -> {path}")
    table.add_column("dimension")
    table.add_column("sampled share per value")
    for i, dim in enumerate(scenario.space.sampled_names):
        counts: dict[int, int] = {}
        for p in profiles:
            counts[p.key()[i]] = counts.get(p.key()[i], 0) + 1
        table.add_row(dim, "  ".join(f"{v}: {c / n:.2f}" for v, c in sorted(counts.items())))
    console.print(table)
    return 0


@command(
    "profiles",
    "check",
    help="validate a profile file against the selected scenario",
    args={"FILE": "a profile file, JSONL or parquet"},
)
def profiles_check(cfg: DictConfig, args: list[str]) -> int:
    if len(args) != 1:
        raise SEADInputError("give exactly one profile file: sead profiles check FILE")
    scenario = build_scenario(cfg)
    profiles = scenario.read_profiles(args[0])
    console.print(f"{args[0]}: {len(profiles)} valid profiles for scenario {scenario.name} (root {project_root()})")
    return 0


@command(
    "audit-mask",
    help="show which tokens of a recorded episode are trained (agent-sampled) and which are masked",
    args={
        "RUN_OR_JSONL": "a run directory (its last step's rollouts) or a rollout JSONL file",
        "[--index N]": "which episode of the file (default 0)",
        "[--html OUT]": "write an HTML page to OUT instead of printing to the terminal",
        "[--tokenizer NAME]": "tokenizer to decode with (default: the one the run recorded, else SmolLM2's)",
    },
)
def audit_mask(cfg: DictConfig, args: list[str]) -> int:
    from transformers import AutoTokenizer

    from sead.dialogue.mask_audit import load_record, render_html, render_terminal

    opts = _options(args, {"--html": None, "--index": "0", "--tokenizer": None})
    if len(opts["positional"]) != 1:
        raise SEADInputError("give one run directory or rollout JSONL: sead audit-mask PATH [--html OUT] [--index N]")
    try:
        record = load_record(opts["positional"][0], int(opts["--index"]))
    except (OSError, ValueError, IndexError) as e:
        raise SEADInputError(str(e)) from None
    name = opts["--tokenizer"] or record.get("meta", {}).get("tokenizer")
    if name:
        tokenizer = AutoTokenizer.from_pretrained(name)
    else:
        from sead.models.smollm import load_tokenizer

        tokenizer = load_tokenizer()
    if opts["--html"]:
        out = Path(opts["--html"])
        out.write_text(render_html(record, tokenizer), encoding="utf-8")
        console.print(f"wrote {out}")
    else:
        console.print(render_terminal(record, tokenizer))
    return 0


def _options(args: list[str], defaults: dict) -> dict:
    """Tiny flag parser for the few commands that take paths: `--flag value` pairs plus positional args."""
    out, positional, it = dict(defaults), [], iter(args)
    for a in it:
        if a in defaults:
            out[a] = next(it, None)
            if out[a] is None:
                raise SEADInputError(f"{a} needs a value")
        else:
            positional.append(a)
    out["positional"] = positional
    return out


@command(
    "train",
    help="run the four-phase training loop (what scripts/main.sh runs); backend=verl for multi-GPU",
    checks_config=True,
)
def train_cmd(cfg: DictConfig, args: list[str]) -> int:
    try:
        if cfg.backend == "verl":
            from sead.verl_backend.outer_loop import train_with_verl
            from sead.verl_backend.preflight import preflight

            preflight(cfg)  # GPUs, config, verl install, user-simulator servers: fail before anything starts
            run_dir = train_with_verl(cfg)
        else:
            from sead.trainer.loop import train

            run_dir = train(cfg)
    except KeyboardInterrupt:
        import shlex

        from sead.run.lock import run_dir_path

        # Checkpoints and metrics lines are written whole, and a resume takes the run's own settings.
        again = shlex.join(["sead", "train", f"run_dir={run_dir_path(cfg.run_dir)}", "resume=true"])
        console.print(f"interrupted; resume with: {again}", markup=False, highlight=False, soft_wrap=True)
        return 130
    from sead.run.layout import RunLayout
    from sead.run.metrics_log import training_made

    layout = RunLayout(run_dir)
    planned = int(cfg.trainer.iterations) * int(cfg.trainer.steps_per_iteration)
    steps, updates = training_made(layout)
    if cfg.backend != "verl" and planned and not updates:
        why = (
            "no RL step was made (trainer.max_minutes was spent before the first)"
            if not steps
            else f"its {steps} RL step(s) changed no weight: every group's dialogues scored alike"
        )
        console.print(f"[bold red]trained nothing:[/] {why}. Run directory: {run_dir}", soft_wrap=True)
        return TRAINED_NOTHING
    console.print(
        f"\n[bold green]done.[/] run directory: {run_dir}\n"
        f"  metrics:            {layout.metrics} (TensorBoard: {layout.tensorboard})\n"
        f"  controller reports: {layout.controller_dir}\n"
        f"  validation:         {layout.validation_dir}\n"
        f"  rollouts:           {layout.rollouts_dir}  (inspect: sead audit-mask {run_dir})\n"
        f"  checkpoints:        {layout.checkpoints_dir}"
    )
    return 0
