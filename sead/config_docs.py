"""Every config key with its default, its allowed values, the backend that honours it and what it does, read from
where each is defined: the schema dataclasses (a field's comment, above it or beside it, is its documentation),
the user-simulator and preset files of configs/, and the scenario keys. `sead config show` prints it beside the
values in effect; `sead docs` writes it as docs/reference/config.md. A config leaf: it imports no torch."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
import typing
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from sead.backends import backend_of
from sead.config import SCHEMAS, TopLevelConfig, schema_of


@dataclass(frozen=True)
class KeyDoc:
    key: str  # dotted, from the root of configs/sead.yaml
    type: str
    default: Any
    allowed: str  # "" where any value of the type goes
    backend: str  # embedded | verl | both | the command that reads it
    comment: str


@dataclass(frozen=True)
class SectionDoc:
    key: str  # "" for the top level
    doc: str  # the schema class's docstring, or the config file's opening comment
    keys: tuple[KeyDoc, ...]


@cache
def _class_source(cls: type) -> tuple[ast.ClassDef, dict[int, str]]:
    """The class's syntax tree and its comments by line (1-based, relative to the class source)."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments = {
        tok.start[0]: tok.string.lstrip("#").strip()
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    return ast.parse(source).body[0], comments


def _own_comments(cls: type) -> dict[str, str]:
    """Each field defined in `cls`'s body -> the comment block right above it and the comment beside it."""
    node, comments = _class_source(cls)
    lines = textwrap.dedent(inspect.getsource(cls)).splitlines()
    out = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        above, line = [], stmt.lineno - 1
        while line >= 1 and lines[line - 1].strip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        beside = [comments[n] for n in range(stmt.lineno, stmt.end_lineno + 1) if n in comments]
        out[stmt.target.id] = " ".join(above + beside)
    return out


def field_comment(cls: type, name: str) -> str:
    """The comment of field `name`, from the most derived class in `cls`'s lineage that has one."""
    for klass in cls.__mro__:
        if dataclasses.is_dataclass(klass) and (text := _own_comments(klass).get(name)):
            return text
    return ""


def class_doc(cls: type) -> str:
    node, _ = _class_source(cls)
    return " ".join((ast.get_docstring(node) or "").split())


def _type_name(tp) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def _allowed(f: dataclasses.Field) -> str:
    domain = f.metadata.get("domain")
    return domain.describe() if domain else ""


def _walk(obj, prefix: str, skip: tuple[str, ...] = ()) -> list[SectionDoc]:
    """The section of dataclass instance `obj` at `prefix`, then its nested sections; defaults are `obj`'s values,
    so a nested section's defaults are the ones its parent gives it."""
    cls, hints = type(obj), typing.get_type_hints(type(obj))
    keys, nested = [], []
    for f in dataclasses.fields(obj):
        if f.name in skip:
            continue
        key, value = f"{prefix}.{f.name}" if prefix else f.name, getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            nested += _walk(value, key)
            continue
        keys.append(
            KeyDoc(key, _type_name(hints[f.name]), value, _allowed(f), backend_of(key), field_comment(cls, f.name))
        )
    return [SectionDoc(prefix, class_doc(cls), tuple(keys)), *nested]


def schema_sections() -> list[SectionDoc]:
    """The top level (outside the groups) and every group with a dataclass schema, in the order of SCHEMAS."""
    groups = tuple(f.name for f in dataclasses.fields(TopLevelConfig) if f.type == "Any")
    out = _walk(TopLevelConfig(), "", skip=groups)
    for group in SCHEMAS:
        out += _walk(schema_of(group)(), group)
    return out


def schema_keys() -> dict[str, KeyDoc]:
    return {k.key: k for section in schema_sections() for k in section.keys}


# ---- config files without a schema: user simulators (their keys are constructor arguments) and presets ----


def leading_comment(path: Path) -> str:
    """The comment a config file opens with (Hydra's `# @package` line left out), as one paragraph."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# @package"):
            lines.append(line.lstrip("#").strip())
    return " ".join(lines)


def yaml_keys(path: Path, prefix: str, domains: dict | None = None) -> list[KeyDoc]:
    """The top-level keys of a flat config file with the comment beside each (its only documentation) and the
    range `domains` gives a key, where it gives one."""
    import yaml

    text = path.read_text(encoding="utf-8")
    values = yaml.safe_load(text) or {}
    comments = {
        line.split(":", 1)[0]: line.split(" #", 1)[1].strip()
        for line in text.splitlines()
        if line[:1].isalpha() and ":" in line and " #" in line
    }
    return [
        KeyDoc(
            f"{prefix}.{name}",
            type(value).__name__ if value is not None else "",
            value,
            "must be set" if value == "???" else domains[name].describe() if name in (domains or {}) else "",
            backend_of(f"{prefix}.{name}"),
            comments.get(name, ""),
        )
        for name, value in values.items()
    ]


def usersim_sections(config_dir: Path) -> list[SectionDoc]:
    from sead.usersim.base import SIMULATOR_SETTINGS

    return [
        SectionDoc(f"usersim={p.stem}", leading_comment(p), tuple(yaml_keys(p, "usersim", SIMULATOR_SETTINGS)))
        for p in sorted((config_dir / "usersim").glob("*.yaml"))
    ]


def scenario_section() -> SectionDoc:
    from sead.scenario.scenario import SCENARIO_KEYS

    keys = (KeyDoc(f"scenario.{k}", "", None, "", "both", text) for k, text in SCENARIO_KEYS.items())
    doc = "A scenario is data: configs/scenario/NAME.yaml names its files; `sead scenario new NAME` writes one to edit."
    return SectionDoc("scenario", doc, tuple(keys))


def presets(config_dir: Path) -> dict[str, str]:
    """Each preset (configs/preset/NAME.yaml) -> what its opening comment says it is for."""
    return {p.stem: leading_comment(p) for p in sorted((config_dir / "preset").glob("*.yaml"))}


def first_sentence(text: str) -> str:
    head = text.split(". ")[0]
    return head if head.endswith(".") else head + "."


def show_value(value) -> str:
    """A value as it is written in a config file (YAML, quoted where YAML would read it as something else)."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"), allow_unicode=True)
    return text.removesuffix("\n").removesuffix("\n...")


def known_keys(config_dir: Path) -> list[str]:
    """Every settable key: the schemas', every user simulator's and the scenario's."""
    keys = list(schema_keys())
    keys += [k.key for s in usersim_sections(config_dir) for k in s.keys]
    return keys + [k.key for k in scenario_section().keys]


def simulators_with(key: str, config_dir: Path) -> list[str]:
    """The user simulators whose settings include `key`, as chosen on a command line: usersim.timeout ->
    [usersim=openai]."""
    return [s.key for s in usersim_sections(config_dir) if any(k.key == key for k in s.keys)]


def unknown_key_hint(key: str, config_dir: Path) -> str:
    """What to add to the error of a key that is not one where it was given: the simulators it is a setting of
    (usersim.timeout under the scripted user), else ` (did you mean X?)` naming the closest known keys and
    sections; "" if none is close. The key itself is never suggested."""
    import difflib

    if simulators := simulators_with(key, config_dir):
        return (
            f" ({key} is a setting of {' and of '.join(simulators)} only, not of the user simulator in use; "
            f"choose one with it, e.g. `{simulators[0]} {key}=...`)"
        )
    known = dict.fromkeys(k for k in known_keys(config_dir) if k != key)  # one of each, in order
    sections = {k.rsplit(".", 1)[0] for k in known if "." in k} - {key}
    close = difflib.get_close_matches(key, [*known, *sections], n=3, cutoff=0.75)
    return f" (did you mean {' or '.join(close)}?)" if close else ""
