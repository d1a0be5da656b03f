"""The table of `sead` subcommands. Command modules register into it; `sead.cli.main` reads it and dispatches.

It lives apart from `main` so that registering never imports the module that imports the command modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from omegaconf import DictConfig
from rich.console import Console

console = Console()

OVERRIDES_HELP = ("key=value", "a Hydra override of configs/sead.yaml (e.g. scenario=telecom seed=3), any number")
HELP_FLAGS = ("-h", "--help")


@dataclass(frozen=True)
class Command:
    words: tuple[str, ...]
    run: Callable[[DictConfig, list[str]], int]
    summary: str
    args: dict[str, str]  # each positional argument or flag as the usage line shows it -> what it is
    checks_config: bool  # check every config group before running: the command loads a model

    @property
    def name(self) -> str:
        return "sead " + " ".join(self.words)

    def help(self) -> str:
        rows = [*self.args.items(), OVERRIDES_HELP, (", ".join(HELP_FLAGS), "show this help and exit")]
        width = max(len(a) for a, _ in rows)
        return "\n".join(
            [
                f"usage: {self.name} {' '.join([*self.args, '[key=value ...]'])}",
                "",
                self.summary,
                "",
                *(f"  {a:<{width}}  {text}" for a, text in rows),
            ]
        )


COMMANDS: dict[tuple[str, ...], Command] = {}


def command(*words: str, help: str, args: dict[str, str] | None = None, checks_config: bool = False):
    """Register a subcommand of one word (`sead audit-mask`) or two (`sead profiles sample`)."""

    def deco(fn):
        COMMANDS[words] = Command(words, fn, help, args or {}, checks_config)
        return fn

    return deco
