"""`sead config show [GROUP]` (the config in effect, each key with its comment) and `sead docs` (the generated
configuration and CLI references)."""

from __future__ import annotations

import sys
import textwrap

from omegaconf import DictConfig, OmegaConf

from sead.cli.registry import command, console
from sead.config import config_dir
from sead.config_docs import scenario_section, schema_keys, show_value, unknown_key_hint, yaml_keys
from sead.errors import SEADInputError

WIDTH = 120


def key_comments(cfg: DictConfig) -> dict[str, str]:
    """Every key's comment: the schemas', the chosen user simulator's file's and the scenario keys'."""
    comments = {k: doc.comment for k, doc in schema_keys().items()}
    simulator = config_dir() / "usersim" / f"{(cfg.get('usersim') or {}).get('name', 'scripted')}.yaml"
    if simulator.is_file():
        comments.update({k.key: k.comment for k in yaml_keys(simulator, "usersim")})
    comments.update({k.key: k.comment for k in scenario_section().keys})
    return comments


def annotated(node, prefix: str, comments: dict[str, str], indent: str = "") -> list[str]:
    """`node` as YAML lines, each key followed by its comment; a key the schema declares as a whole (a dict or list
    value) is shown on one line."""
    lines = []
    for name, value in node.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        if isinstance(value, dict) and key not in comments:
            lines += [f"{indent}{name}:", *annotated(value, key, comments, indent + "  ")]
            continue
        line = f"{indent}{name}: {show_value(value)}"
        if comments.get(key):  # wrapped, so a long comment reads in a terminal; its lines stay YAML comments
            width = max(40, WIDTH - len(line) - 4)
            first, *rest = textwrap.wrap(comments[key], width, break_on_hyphens=False)
            line += f"  # {first}"
            lines += [line, *(f"{' ' * len(line.split('#')[0])}# {more}" for more in rest)]
            continue
        lines.append(line)
    return lines


@command(
    "config",
    "show",
    help="print the config in effect (after presets and overrides), each key with what it does",
    args={"[GROUP]": "only this group or key, e.g. trainer or trainer.update.lr"},
)
def config_show(cfg: DictConfig, args: list[str]) -> int:
    if len(args) > 1:
        raise SEADInputError("give at most one group or key: sead config show [GROUP]")
    node = OmegaConf.to_container(cfg)
    if args:  # the one group or key, under the sections it is in
        absent = object()  # a key set to null (usersim.api_key) is there
        value = OmegaConf.select(cfg, args[0], default=absent)
        if value is absent and args[0] not in schema_keys():
            raise SEADInputError(f"no such group or key{unknown_key_hint(args[0], config_dir())}", field=args[0])
        if value is absent:  # a schema's key no config file sets
            value = None
        node = OmegaConf.to_container(value) if isinstance(value, DictConfig) else value
        for name in reversed(args[0].split(".")):
            node = {name: node}
    print("\n".join(annotated(node, "", key_comments(cfg))))
    return 0


@command(
    "docs",
    help="write docs/reference/config.md and cli.md from the config schemas and this command table",
    args={"[--check]": "write nothing; exit 1 if either file is out of date"},
)
def docs_cmd(cfg: DictConfig, args: list[str]) -> int:
    from sead.cli import reference

    if "--check" in args:
        stale = reference.stale()
        for path in stale:
            print(f"out of date: {path} (run: sead docs)", file=sys.stderr)
        return 1 if stale else 0
    for path in reference.write():
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)
    return 0
