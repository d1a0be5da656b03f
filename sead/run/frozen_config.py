"""The settings that define a run are frozen once it has a checkpoint: a resume with other values (a new lr, another
model, another scenario) would continue from weights and controller state made under the old ones, and the
config on file would no longer say what produced the results. So a resume compares its resolved config with the
one in effect at the checkpoint and refuses any difference in a run-defining key, naming the keys, unless
`resume_allow_changes=true`; then the new config is kept beside the old one and the change is logged. What the
checkpoint's state is shaped by (SHAPED_BY: LoRA settings, the estimator, the model preset, the backend) cannot
change at all.

config.yaml is always the config the run started with; config.resume_NNNNNN.yaml is the one a resume from step
NNNNNN ran with, written whenever it differs, so each step's settings stay on record.

The user simulator a run is judged by (`environment_identity`: its rules and dynamics, how agent turns are read) is
held to the same rule: usersim.json at the start, usersim.resume_NNNNNN.json where a resume differs. Code that reads
replies another way (a new READING_VERSION or AGENT_READING_VERSION) changes it without any setting changing, so
the refusal names it under `user_simulator.`."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sead.config import RETIRED
from sead.errors import SEADInputError, parse_json
from sead.run.atomic import write_text_atomic
from sead.run.layout import RunLayout, resume_records
from sead.run.lock import run_dir_path
from sead.usersim.base import comparable_environment

log = logging.getLogger(__name__)

# How this invocation finds and continues the run, not what the run is: never compared, never recorded.
INVOCATION = ("resume", "resume_allow_changes", "run_dir")
# May change on resume without changing what the run trains: how far it goes (more iterations extend it, the
# time budget), how often it saves, where numbers are logged, and sections `sead train` does not read. Changes
# are recorded in config.resume_NNNNNN.yaml but need no permission.
MAY_CHANGE = ("trainer.iterations", "trainer.max_minutes", "trainer.save_every", "trainer.logging", "eval", "profiles")
# What the checkpoint's own state is shaped by (the model it was made from, LoRA adapters, the optimiser's state and
# PPO's value head, which backend wrote it): no resume can change these, resume_allow_changes or not. (model.path
# may change with permission: a base model moved to another folder.)
SHAPED_BY = ("backend", "model.preset", "trainer.lora", "trainer.update.estimator")
SHOWN = 12  # differing keys named in the refusal; a forgotten preset changes dozens


def write_start_config(run_dir: Path, cfg: DictConfig, environment: dict) -> Path:
    """A run starting at step 0: its config becomes config.yaml and its user simulator usersim.json; resume records
    of an earlier start go."""
    layout = RunLayout(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for path in [*layout.resume_configs().values(), *layout.resume_usersims().values()]:
        path.unlink()
    write_text_atomic(layout.config, OmegaConf.to_yaml(cfg))
    write_text_atomic(layout.usersim, json.dumps(environment, indent=2))
    return layout.config


def in_effect(original: Path, step: int) -> Path:
    """The file of a run (config.yaml, usersim.json) in effect at `step`: its newest resume record at or before it,
    else the one the run started with."""
    earlier = {s: p for s, p in resume_records(original).items() if s <= step}
    return earlier[max(earlier)] if earlier else original


def config_in_effect(run_dir: Path, step: int) -> Path:
    return in_effect(RunLayout(run_dir).config, step)


def read_saved_config(path: Path) -> DictConfig:
    """A run's config file, less the keys SEAD now derives (`sead.config.RETIRED`): a run saved before a key was
    retired resumes, with the value now derived from the keys it still has."""
    try:
        saved = OmegaConf.load(path)
        if not isinstance(saved, DictConfig):
            raise ValueError("not a mapping of settings")
    except (OSError, ValueError, OmegaConfBaseException, yaml.YAMLError) as e:
        problem = " ".join(str(e).split())
        raise SEADInputError(
            f"cannot read the run's config ({problem}); restore it, or start a new run", path=path
        ) from None
    for key in RETIRED:
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(saved, parent, default=None)
        if isinstance(node, DictConfig) and leaf in node:
            log.warning("%s in %s is no longer a setting (%s); resuming without it", key, path.name, RETIRED[key])
            del node[leaf]
    return saved


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, dict) or not node:
        return {prefix: node}
    out = {}
    for k, v in node.items():
        out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def under(key: str, prefixes: tuple[str, ...]) -> bool:
    """`key` is one of the dotted `prefixes` or lies below one."""
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def changed_settings(before: dict, after: dict, ignore: tuple[str, ...] = ()) -> dict[str, tuple[Any, Any]]:
    """Every leaf key whose value differs, including keys only one side has, as key -> (before, after); keys under
    INVOCATION or `ignore` (dotted prefixes) are left out."""
    a, b = _flatten(before), _flatten(after)
    absent = "(absent)"
    skip = INVOCATION + ignore
    return {
        k: (a.get(k, absent), b.get(k, absent))
        for k in sorted(a.keys() | b.keys())
        if a.get(k, absent) != b.get(k, absent) and not under(k, skip)
    }


def describe_changes(changes: dict[str, tuple[Any, Any]]) -> str:
    shown = [f"{k} {old!r} -> {new!r}" for k, (old, new) in list(changes.items())[:SHOWN]]
    more = len(changes) - SHOWN
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def with_saved_settings(cfg: DictConfig, defaults: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """resume=true continues a run under its own settings: every key the command line leaves alone comes from
    the run's newest config file, so `run_dir=R resume=true` is enough. A key counts as set when the command
    line names it or when it differs from `defaults` (a config group such as `preset=cpu` sets many); those
    keep the command line's value, for `resume_config` to accept or refuse."""
    run_dir = run_dir_path(cfg.run_dir)
    saved_path = config_in_effect(run_dir, step=2**62)
    if not saved_path.is_file():
        return cfg  # no run here: start_or_resume says so
    saved = read_saved_config(saved_path)
    if missing := [k for k in defaults if k not in saved]:  # emptied, cut short or edited by hand
        raise SEADInputError(
            f"the run's config lacks {', '.join(missing)}; restore it, or start a new run", path=saved_path
        )
    new = OmegaConf.to_container(cfg)
    named = [o.lstrip("+~").split("=", 1)[0] for o in overrides]
    flat_new = _flatten(new)
    set_keys = set(changed_settings(OmegaConf.to_container(defaults), new)) | set(INVOCATION)
    set_keys |= {k for k in flat_new if under(k, tuple(named))}
    for key in sorted(set_keys):
        if key in flat_new:
            OmegaConf.update(saved, key, flat_new[key], force_add=True)
    return saved


def read_saved_environment(path: Path) -> dict | None:
    """A run's recorded user simulator; None where the run has none on file."""
    if not path.is_file():
        return None
    try:
        return parse_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SEADInputError(f"cannot read the run's user simulator record ({e}); restore it", path=path) from None


def environment_changes(saved: dict | None, environment: dict) -> dict[str, tuple[Any, Any]]:
    """How the user simulator differs from the one on record, as `user_simulator.<key>` -> (before, after)."""
    if saved is None:
        return {}
    changes = changed_settings(comparable_environment(saved), comparable_environment(environment))
    return {f"user_simulator.{k}": v for k, v in changes.items()}


def resume_config(run_dir: Path, cfg: DictConfig, step: int, environment: dict) -> Path:
    """Check `cfg` and the user simulator (`environment`) against those in effect at checkpoint `step`; return the
    config file now in effect."""
    layout = RunLayout(run_dir)
    saved_path = config_in_effect(run_dir, step)
    saved_environment_path = in_effect(layout.usersim, step)
    saved_environment = read_saved_environment(saved_environment_path)
    saved = OmegaConf.to_container(read_saved_config(saved_path))
    changes = changed_settings(saved, OmegaConf.to_container(cfg))
    user_changes = environment_changes(saved_environment, environment)
    defining = {k: v for k, v in changes.items() if not under(k, MAY_CHANGE)} | user_changes
    shaping = {k: v for k, v in changes.items() if under(k, SHAPED_BY)}
    if shaping:
        raise SEADInputError(
            f"resume=true cannot change {describe_changes(shaping)}, even with resume_allow_changes=true: the "
            "checkpoint's weights, adapters and optimiser state were made under them. Resume with the run's own "
            "values, or start a new run in another run_dir from this one's weights (model.preset=path "
            "model.path=RUN_DIR/checkpoints/step_NNNNNN/model)",
            path=saved_path,
        )
    if defining and not cfg.get("resume_allow_changes", False):
        raise SEADInputError(
            f"resume=true with settings that define the run changed: {describe_changes(defining)}. Resume with the "
            "run's own settings (the values in this file and its user simulator, "
            f"{saved_environment_path.name}), or pass resume_allow_changes=true to continue with the new ones (both "
            "are kept)",
            path=saved_path,
        )
    for later, path in [*layout.resume_configs().items(), *layout.resume_usersims().items()]:
        if later > step:  # describes steps that are about to be replayed
            path.unlink()
    environment_file = saved_environment_path
    if user_changes or saved_environment is None:  # a run from before usersim.json records its simulator from here
        environment_file = layout.resume_usersim(step)
        write_text_atomic(environment_file, json.dumps(environment, indent=2))
    config_file = saved_path
    if changes:
        config_file = layout.resume_config(step)
        write_text_atomic(config_file, OmegaConf.to_yaml(cfg))
    if defining:
        log.warning(
            "resume_allow_changes=true: from step %d the run continues with %s (now in effect: %s, %s)",
            step,
            describe_changes(defining),
            config_file.name,
            environment_file.name,
        )
    return config_file
