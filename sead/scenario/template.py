"""Prompt templates with `${name}` or `{name}` placeholders (both spellings of the original are accepted).

Placeholders are checked when the template is loaded, not when a dialogue starts: an unknown name or a
missing required one is an error that names the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from sead.errors import SEADInputError, read_user_text

# `${name}` or `{name}`; `{{` and `}}` are literal braces. Only identifier-like names count as placeholders.
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")


class PromptTemplate:
    def __init__(self, text: str, source: str, placeholders: dict[str, int]):
        self.text = text
        self.source = source
        self.placeholders = placeholders  # name -> first line it appears on

    @classmethod
    def load(cls, path: str | Path, *, required: Iterable[str] = (), allowed: Iterable[str] = ()) -> PromptTemplate:
        return cls.parse(read_user_text(path, "prompt template"), str(path), required=required, allowed=allowed)

    @classmethod
    def parse(
        cls, text: str, source: str, *, required: Iterable[str] = (), allowed: Iterable[str] = ()
    ) -> PromptTemplate:
        required = set(required)
        known = required | set(allowed)
        if not text.strip():
            raise SEADInputError("prompt template is empty", path=source)
        found: dict[str, int] = {}
        for m in _PLACEHOLDER.finditer(text):
            name = m.group(1) or m.group(2)
            line = text.count("\n", 0, m.start()) + 1
            if name not in known:
                hint = f"known: {', '.join(sorted(known))}" if known else "this template takes no placeholders"
                raise SEADInputError(
                    f"unknown placeholder {m.group(0)} ({hint}; write {{{{ }}}} for a literal brace)",
                    path=source,
                    line=line,
                    field=name,
                )
            found.setdefault(name, line)
        missing = sorted(required - set(found))
        if missing:
            raise SEADInputError(
                f"missing required placeholder(s): {', '.join('${' + m + '}' for m in missing)}", path=source
            )
        return cls(text, source, found)

    def render(self, values: Mapping[str, object]) -> str:
        absent = sorted(set(self.placeholders) - set(values))
        if absent:
            raise SEADInputError(f"no value given for placeholder(s) {', '.join(absent)}", path=self.source)

        def sub(m: re.Match) -> str:
            return str(values[m.group(1) or m.group(2)])

        return _PLACEHOLDER.sub(sub, self.text).replace("{{", "{").replace("}}", "}")
