"""The behaviour library: what a simulated user does beyond its numeric state (raise a cost worry, test trust, ...).

Two on-disk formats are read, so users of the original system can bring their file unchanged:
- JSON Lines, one behaviour per line: {"category": ..., "behaviour": ..., "utterance": optional};
- one JSON object {"User_Persona_Classification": {category: [behaviour, ...]}} (the original format,
  despite its .jsonl name).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from sead.errors import SEADInputError, jsonl_records, parse_json, read_user_text
from sead.scenario.template import refuse_control_tokens

_ORIGINAL_KEY = "User_Persona_Classification"
# The original prefixed categories with an index ("3. Rule_Understanding"); the index carries no meaning.
_INDEX_PREFIX = re.compile(r"^\s*\d+\.\s*")
_JSONL_KEYS = {"category", "behaviour", "behavior", "utterance"}


@dataclass(frozen=True)
class Behaviour:
    category: str
    text: str
    utterance: str | None = None


class BehaviourLibrary:
    def __init__(self, behaviours: list[Behaviour], source: str = "<memory>"):
        self.behaviours = tuple(behaviours)
        self.source = source
        self._by_text = {b.text: b for b in behaviours}

    def __len__(self) -> int:
        return len(self.behaviours)

    def __contains__(self, text: str) -> bool:
        return text in self._by_text

    def get(self, text: str) -> Behaviour:
        return self._by_text[text]

    @property
    def categories(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for b in self.behaviours:
            counts[b.category] = counts.get(b.category, 0) + 1
        return counts

    @classmethod
    def load(cls, path: str | Path) -> BehaviourLibrary:
        path = Path(path)
        text = read_user_text(path, "behaviour library")
        entries = _parse_original(text, path)
        if entries is None:
            entries = _parse_jsonl(text, path)
        if not entries:
            raise SEADInputError("behaviour library is empty", path=path)
        seen: dict[str, int] = {}
        behaviours = []
        for line, b in entries:
            if b.text in seen:
                raise SEADInputError(
                    f"duplicate behaviour {b.text!r} (first on line {seen[b.text]})",
                    path=path,
                    line=line,
                    field="behaviour",
                )
            seen[b.text] = line
            behaviours.append(b)
        return cls(behaviours, str(path))


def _clean(value, *, path, line, field) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SEADInputError("empty or non-text value", path=path, line=line, field=field)
    refuse_control_tokens(value, path=path, line=line, field=field)
    return " ".join(value.split())


def _parse_original(text: str, path: Path) -> list[tuple[int, Behaviour]] | None:
    """Return entries if the file is the original single-object format, else None."""
    try:
        data = parse_json(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or _ORIGINAL_KEY not in data:
        return None
    groups = data[_ORIGINAL_KEY]
    if not isinstance(groups, dict):
        raise SEADInputError("must map category names to lists of behaviours", path=path, field=_ORIGINAL_KEY)
    entries = []
    for category, items in groups.items():
        field = f"{_ORIGINAL_KEY}.{category}"
        if not isinstance(items, list):
            raise SEADInputError("must be a list of behaviour strings", path=path, field=field)
        cat = _clean(_INDEX_PREFIX.sub("", category), path=path, line=None, field=field)
        for i, item in enumerate(items):
            # No line numbers inside one JSON object; the category and index locate the entry instead.
            entries.append((i, Behaviour(cat, _clean(item, path=path, line=None, field=f"{field}[{i}]"))))
    return entries


def _parse_jsonl(text: str, path: Path) -> list[tuple[int, Behaviour]]:
    entries = []
    for lineno, obj in jsonl_records(text, path):
        if not isinstance(obj, dict):
            raise SEADInputError("each line must be a JSON object", path=path, line=lineno)
        unknown = sorted(set(obj) - _JSONL_KEYS)
        if unknown:  # a misspelt "utterance" would otherwise be dropped without a word
            raise SEADInputError(
                f"unknown field(s) {unknown} (known: {sorted(_JSONL_KEYS)})", path=path, line=lineno, field=unknown[0]
            )
        behaviour = obj.get("behaviour", obj.get("behavior"))
        utterance = obj.get("utterance")
        entries.append(
            (
                lineno,
                Behaviour(
                    category=_clean(obj.get("category"), path=path, line=lineno, field="category"),
                    text=_clean(behaviour, path=path, line=lineno, field="behaviour"),
                    utterance=_clean(utterance, path=path, line=lineno, field="utterance")
                    if utterance is not None
                    else None,
                ),
            )
        )
    return entries
