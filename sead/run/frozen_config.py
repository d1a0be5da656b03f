"""The settings that define a run are frozen once it has a checkpoint: a resume with other values (a new lr, another
model, another scenario) would continue from weights and controller state made under the old ones, and the
config on file would no longer say what produced the results. So a resume compares its resolved config with the
one in effect at the checkpoint and refuses any difference in a run-defining key, naming the keys, unless
`resume_allow_changes=true`; then the new config is kept beside the old one and the change is logged.

config.yaml is always the config the run started with; config.resume_NNNNNN.yaml is the one a resume from step
NNNNNN ran with, written whenever it differs, so each step's settings stay on record."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sead.config import RETIRED
from sead.errors import SEADInputError
from sead.run.atomic import write_text_atomic
from sead.run.layout import RunLayout

log = logging.getLogger(__name__)

# How this invocation finds and continues the run, not what the run is: never compared, never recorded.
INVOCATION = ("resume", "resume_allow_changes", "run_dir")
# May change on resume without changing what the run trains: how far it goes (more iterations extend it, the
# time budget), how often it saves, where numbers are logged, and sections `sead train` does not read. Changes
# are recorded in config.resume_NNNNNN.yaml but need no permission.
MAY_CHANGE = ("trainer.iterations", "trainer.max_minutes", "trainer.save_every", "trainer.logging", "eval", "profiles")
SHOWN = 12  # differing keys named in the refusal; a forgotten preset changes dozens


def write_start_config(run_dir: Path, cfg: DictConfig) -> Path:
    """A run starting at step 0: its config becomes config.yaml; resume records of an earlier start go."""
    layout = RunLayout(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for path in layout.resume_configs().values():
        path.unlink()
    write_text_atomic(layout.config, OmegaConf.to_yaml(cfg))
    return layout.config


def config_in_effect(run_dir: Path, step: int) -> Path:
    """The config file that was in effect at `step`: the newest resume record at or before it, else config.yaml."""
    layout = RunLayout(run_dir)
    earlier = [s for s in layout.resume_configs() if s <= step]
    return layout.resume_config(max(earlier)) if earlier else layout.config


def read_saved_config(path: Path) -> DictConfig:
    """A run's config file, less the keys SEAD now derives (`sead.config.RETIRED`): a run saved before a key was
    retired resumes, with the value now derived from the keys it still has."""
    try:
        saved = OmegaConf.load(path)
    except (OSError, OmegaConfBaseException) as e:
        raise SEADInputError(f"cannot read the run's config ({e}); restore it, or start a new run", path=path) from None
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
    run_dir = Path(str(cfg.run_dir)).resolve()
    saved_path = config_in_effect(run_dir, step=2**62)
    if not saved_path.is_file():
        return cfg  # no run here: start_or_resume says so
    saved = read_saved_config(saved_path)
    new = OmegaConf.to_container(cfg)
    named = [o.lstrip("+~").split("=", 1)[0] for o in overrides]
    flat_new = _flatten(new)
    set_keys = set(changed_settings(OmegaConf.to_container(defaults), new)) | set(INVOCATION)
    set_keys |= {k for k in flat_new if under(k, tuple(named))}
    for key in sorted(set_keys):
        if key in flat_new:
            OmegaConf.update(saved, key, flat_new[key], force_add=True)
    return saved


def resume_config(run_dir: Path, cfg: DictConfig, step: int) -> Path:
    """Check `cfg` against the config in effect at checkpoint `step`; return the config file now in effect."""
    layout = RunLayout(run_dir)
    saved_path = config_in_effect(run_dir, step)
    for later, path in layout.resume_configs().items():
        if later > step:  # describes steps that are about to be replayed
            path.unlink()
    saved = OmegaConf.to_container(read_saved_config(saved_path))
    changes = changed_settings(saved, OmegaConf.to_container(cfg))
    if not changes:
        return saved_path
    defining = {k: v for k, v in changes.items() if not under(k, MAY_CHANGE)}
    if defining and not cfg.get("resume_allow_changes", False):
        raise SEADInputError(
            f"resume=true with settings that define the run changed: {describe_changes(defining)}. Resume with the "
            "run's own settings (the values in this file), or pass resume_allow_changes=true to continue with the new "
            "ones (both configs are kept)",
            path=saved_path,
        )
    in_effect = layout.resume_config(step)
    write_text_atomic(in_effect, OmegaConf.to_yaml(cfg))
    if defining:
        log.warning(
            "resume_allow_changes=true: from step %d the run continues with %s (config: %s; before: %s)",
            step,
            describe_changes(defining),
            in_effect.name,
            saved_path.name,
        )
    return in_effect
