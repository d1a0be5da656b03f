"""`sead <command> [args] [key=value ...]`: every key=value is a Hydra override of configs/sead.yaml.

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
COMMANDS: dict[tuple[str, ...], tuple[Callable, str]] = {}


def command(*words: str, help: str):
    """Register a subcommand of one word (`sead audit-mask`) or two (`sead profiles sample`)."""
    def deco(fn):
        COMMANDS[words] = (fn, help)
        return fn
    return deco


def usage() -> str:
    lines = ["usage: sead <command> [args] [key=value ...]   (key=value: Hydra overrides of configs/sead.yaml)", ""]
    lines += [f"  sead {' '.join(w):<18} {h}" for w, (_, h) in sorted(COMMANDS.items())]
    return "\n".join(lines)


def find_command(argv: list[str]) -> tuple[tuple[str, ...] | None, list[str]]:
    for n in (2, 1):
        if tuple(argv[:n]) in COMMANDS:
            return tuple(argv[:n]), argv[n:]
    return None, argv


def main(argv: list[str] | None = None) -> int:
    from sead.cli import commands, eval_commands  # noqa: F401  (registers the subcommands)
    from sead.config import load_config

    argv = list(sys.argv[1:] if argv is None else argv)
    words, rest = find_command(argv)
    if words is None:
        wants_help = argv[:1] in (["-h"], ["--help"])
        print(usage(), file=sys.stdout if wants_help else sys.stderr)
        return 0 if wants_help else 2
    fn, _ = COMMANDS[words]
    overrides = [a for a in rest if "=" in a and not a.startswith("-")]
    positional = [a for a in rest if a not in overrides]
    try:
        return fn(load_config(overrides), positional) or 0
    except SEADInputError as e:
        console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
