"""`sead <command> [args] [key=value ...]`: every key=value is a Hydra override of configs/sead.yaml.

Subcommands are small functions registered in `sead.cli.registry.COMMANDS`; each receives the composed config and
the arguments that were not overrides. `sead <command> --help` shows a command's usage and does nothing else.
"""

from __future__ import annotations

import errno
import re
import sys
from pathlib import Path

from rich.markup import escape

from sead import __version__
from sead.cli import commands, config_commands, eval_commands  # noqa: F401  (importing them registers the subcommands)
from sead.cli.registry import COMMANDS, HELP_FLAGS, Command, console
from sead.config import check_config, config_dir, load_config
from sead.config_docs import first_sentence, presets
from sead.errors import SEADInputError

# Where the machine, not the input, stops a command: a full, read-only or failing disk, a file it may not write.
STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}

# What Hydra takes as a key: a dotted name, after an optional +, ++ or ~. No `/`, so a path is never a key.
_OVERRIDE_KEY = re.compile(r"[+~]{0,2}[A-Za-z_][\w.]*")


def is_override(arg: str) -> bool:
    """key=value with a config key before the first `=`, unless it names an existing file or folder."""
    key, eq, _ = arg.partition("=")
    return bool(eq) and _OVERRIDE_KEY.fullmatch(key) is not None and not Path(arg).exists()


def usage(group: tuple[str, ...] = (), configs: Path | None = None) -> str:
    """The commands (of one group, e.g. `profiles`) with what each does; all of them with the presets of `configs`
    (default: the config folder in use)."""
    shown = sorted(w for w in COMMANDS if w[: len(group)] == group)
    lines = [
        "usage: sead <command> [args] [key=value ...]   (key=value: Hydra overrides of configs/sead.yaml)",
        "       sead <command> --help                  (what a command takes)",
        "       sead --version",
        "",
    ]
    lines += [f"  {COMMANDS[w].name:<23} {COMMANDS[w].summary}" for w in shown]
    if not group:
        lines += ["", "presets (preset=NAME, e.g. sead train preset=cpu):"]
        lines += [f"  {name:<23} {first_sentence(text)}" for name, text in presets(configs or config_dir()).items()]
    return "\n".join(lines)


def find_command(argv: list[str]) -> tuple[Command | None, list[str]]:
    for n in (2, 1):
        if tuple(argv[:n]) in COMMANDS:
            return COMMANDS[tuple(argv[:n])], argv[n:]
    return None, argv


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--version"]:
        print(f"sead {__version__}")
        return 0
    cmd, rest = find_command(argv)
    if cmd is None:
        # `sead`, `sead --help`, `sead profiles --help` list commands; anything else is not one
        group = tuple(argv[:1]) if argv and any(w[0] == argv[0] for w in COMMANDS) else ()
        asked = len(argv) > len(group) and argv[len(group)] in HELP_FLAGS
        if argv and not asked:
            print(f"error: sead {' '.join(argv)} is not a command", file=sys.stderr)
        print(usage(group), file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    if any(a in HELP_FLAGS for a in rest):
        print(cmd.help())
        return 0
    overrides = [a for a in rest if is_override(a)]
    positional = [a for a in rest if a not in overrides]
    try:
        if positional and not cmd.args:
            raise SEADInputError(f"{cmd.name} takes no arguments, got {' '.join(positional)} (see {cmd.name} --help)")
        cfg = load_config(overrides)
        if cmd.checks_config:
            check_config(cfg)
        return cmd.run(cfg, positional) or 0
    except SEADInputError as e:
        console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return 2
    except OSError as e:
        if e.errno not in STORAGE_ERRNOS:
            raise
        where = f"{e.filename}: " if e.filename else ""
        console.print(
            f"[bold red]error:[/] {escape(where + (e.strerror or str(e)))}. Free space or fix the permissions and "
            "run the command again: what was written is whole (a training run continues with resume=true)",
            highlight=False,
            soft_wrap=True,
        )
        return 2


if __name__ == "__main__":  # `python -m sead.cli.main`, as `python -m sead` and the `sead` console script
    sys.exit(main())
