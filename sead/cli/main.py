"""`sead <group> <command> [key=value ...]`: every key=value is a Hydra override of configs/sead.yaml.

Subcommands are small functions registered in COMMANDS; each receives the composed config and the
positional arguments that were not overrides.
"""

from __future__ import annotations

import sys
from typing import Callable

from rich.console import Console
from rich.markup import escape

from sead.errors import SEADInputError

console = Console()
COMMANDS: dict[tuple[str, str], tuple[Callable, str]] = {}


def command(group: str, name: str, help: str):
    def deco(fn):
        COMMANDS[(group, name)] = (fn, help)
        return fn
    return deco


def usage() -> str:
    lines = ["usage: sead <group> <command> [key=value ...]   (key=value: Hydra overrides of configs/sead.yaml)", ""]
    lines += [f"  sead {g} {n:<8} {h}" for (g, n), (_, h) in sorted(COMMANDS.items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from sead.cli import commands  # noqa: F401  (registers the subcommands)
    from sead.config import load_config

    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2 or argv[0] in ("-h", "--help") or (argv[0], argv[1]) not in COMMANDS:
        print(usage(), file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    fn, _ = COMMANDS[(argv[0], argv[1])]
    rest = argv[2:]
    overrides = [a for a in rest if "=" in a and not a.startswith("-")]
    positional = [a for a in rest if a not in overrides]
    try:
        return fn(load_config(overrides), positional) or 0
    except SEADInputError as e:
        console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
