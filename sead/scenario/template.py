"""Prompt templates with `${name}` or `{name}` placeholders (both spellings of the original are accepted).

Placeholders are checked when the template is loaded, not when a dialogue starts: an unknown name or a
missing required one is an error that names the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from sead.errors import SEADInputError, read_user_text

# The text of chat-template control tokens (ChatML's and Llama-3's `<|...|>`, Llama-2's `<s>` and `[INST]`, Gemma's
# turn markers): in a prompt or a behaviour they would be read as the tokenizer's own, and forge turns. The agent's
# context encodes any special token's text as plain text (sead.dialogue.chat_tokens); a file holding one is refused
# at load, where its author can still see why.
CONTROL_TOKEN = re.compile(
    r"<\|[^\s<>|]{1,64}\|>|</?s>|\[/?INST\]|<</?SYS>>|<(?:start|end)_of_turn>|<(?:bos|eos|pad|unk)>"
)

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
        refuse_control_tokens(text, path=source)
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


def refuse_control_tokens(text: str, *, path, line: int | None = None, field: str | None = None) -> None:
    """Raise SEADInputError naming where `text` (of a prompt or a behaviour) holds a chat control token's text: at
    `line` and `field` where given, else at its line within `text` (a whole file)."""
    m = CONTROL_TOKEN.search(text)
    if m:
        if line is None and field is None:
            line = text.count("\n", 0, m.start()) + 1
        raise SEADInputError(
            f"holds {m.group(0)!r}, a chat template's control token: a model would read it as the start or end of a "
            "turn, not as words; remove it",
            path=path,
            line=line,
            field=field,
        )
