"""Reading and writing the XML-like tags of agent and user turns.

Parsing never raises: whatever a model writes becomes a structured turn, with every missing, unclosed or
out-of-range tag listed in `problems` (and summed up in `malformed`). An agent turn has a response only when it
holds exactly one `<response>` block: one opening, one closing. Tag names follow the scenario's dimensions: the agent
predicts `<{dim}_score>`, the user reports `<user_{dim}>`.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property

from sead.scenario.profile_space import ProfileSpace

# The version of how an agent turn's tags are read (which turns are malformed, what the user hears). It travels with
# the user simulator's identity (`sead.usersim.base.environment_identity`): raise it whenever some agent turn would
# read differently, so runs and evaluations read otherwise are never reused or compared as the same environment.
AGENT_READING_VERSION = 2  # 1: a second <response> makes a turn malformed (2026-11-27); 2: a second </response>
# (2026-11-28)

STATUS_VALUES = (-1, 0, 1)
_STATUS_TEXTS = {str(v): v for v in STATUS_VALUES}
_INT = re.compile(r"-?\d+")


class _Parsed:
    """What agent and user turns share: the raw text and the list of problems found while parsing it."""

    problems: list[str]

    @property
    def malformed(self) -> str | None:
        return "; ".join(self.problems) or None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class AgentTurn(_Parsed):
    text: str
    response: str | None
    portrait: dict[str, int | None]
    stage: int | None
    status: int
    think: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def has_response(self) -> bool:
        return self.response is not None


@dataclass
class UserTurn(_Parsed):
    text: str
    reply: str | None
    state: dict[str, int | None]
    status: int
    think: str | None = None
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TagSchema:
    """Tag names and value ranges for one scenario."""

    space: ProfileSpace
    num_stages: int

    def agent_tags(self) -> list[str]:
        return ["think", "response", *(f"{d.name}_score" for d in self.space.dimensions), "stage", "status"]

    def user_tags(self) -> list[str]:
        return ["user_think", "user_reply", *(f"user_{d.name}" for d in self.space.dimensions), "user_status"]

    # Every turn of every dialogue is parsed, hundreds in flight per process: the tag strings are made once.
    @cached_property
    def _agent_marks(self) -> tuple[_Mark, ...]:
        return _marks(self.agent_tags())

    @cached_property
    def _user_marks(self) -> tuple[_Mark, ...]:
        return _marks(self.user_tags())

    @cached_property
    def user_reminder(self) -> str:
        """The line that ends every request to a model simulator, naming the tags its answer must have."""
        tags = ", ".join(f"<{t}>" for t in self.user_tags())
        return f"(The caller's words are inside <response>. Answer this turn with exactly these tags: {tags}.)"

    @cached_property
    def _scores(self) -> tuple[tuple[str, str, str, int, int], ...]:
        """(dimension, agent tag, user tag, low, high) per dimension."""
        return tuple((d.name, f"{d.name}_score", f"user_{d.name}", d.low, d.high) for d in self.space.dimensions)

    def parse_agent(self, text: str) -> AgentTurn:
        found = _find_tags(text, self._agent_marks)
        problems = found.problems
        response = found.get("response")
        if response is None:
            problems.append("missing <response>")
        elif text.count("<response>") > 1 or text.count("</response>") > 1:
            # Two answers in one turn: the caller could hear either, so the turn is as unusable as one with none.
            # Read as the first, it let RL drift into turns of several answers with the other tags dropped, which
            # the small format reward did not stop: first as several `<response>` blocks (2026-11-27), later as
            # one opening and answers closed by `</response>` inside the score tags (2026-11-28).
            problems.append("more than one <response>")
            response = None
        portrait = {name: _read_int(found, tag, low, high, problems) for name, tag, _, low, high in self._scores}
        stage = _read_int(found, "stage", 0, self.num_stages - 1, problems)
        status = _read_status(found, "status", problems)
        return AgentTurn(text, response, portrait, stage, status, found.get("think"), problems)

    def parse_user(self, text: str) -> UserTurn:
        found = _find_tags(text, self._user_marks)
        problems = found.problems
        reply = found.get("user_reply")
        if reply is None:
            problems.append("missing <user_reply>")
        state = {name: _read_int(found, tag, low, high, problems) for name, _, tag, low, high in self._scores}
        status = _read_status(found, "user_status", problems)
        return UserTurn(text, reply, state, status, found.get("user_think"), problems)

    def format_agent(self, response: str, portrait: Mapping[str, int], stage: int, status: int) -> str:
        lines = [f"<response>{response}</response>"]
        lines += [f"<{d.name}_score>{portrait[d.name]}</{d.name}_score>" for d in self.space.dimensions]
        lines += [f"<stage>{stage}</stage>", f"<status>{status}</status>"]
        return "\n".join(lines)

    def format_user(self, reply: str, state: Mapping[str, int], status: int, think: str | None = None) -> str:
        lines = [f"<user_think>{think}</user_think>"] if think is not None else []
        lines.append(f"<user_reply>{reply}</user_reply>")
        lines += [f"<user_{d.name}>{state[d.name]}</user_{d.name}>" for d in self.space.dimensions]
        lines.append(f"<user_status>{status}</user_status>")
        return "\n".join(lines)


class _Found(dict):
    problems: list[str]


_Mark = tuple[str, str, str]  # a tag's name, its opening and its closing


def _marks(names: list[str]) -> tuple[_Mark, ...]:
    return tuple((n, f"<{n}>", f"</{n}>") for n in names)


def _find_tags(text: str, marks: tuple[_Mark, ...]) -> _Found:
    """Content of the first occurrence of each tag. An unclosed tag runs to the next known tag or the end."""
    found = _Found()
    found.problems = []
    opens = [(text.find(opening), name, opening, closing) for name, opening, closing in marks]
    starts = sorted([pos for pos, _, _, _ in opens if pos >= 0])  # not `pos, *_`: that builds a list per tag
    for pos, name, opening, closing in opens:
        if pos < 0:
            continue
        begin = pos + len(opening)
        later = bisect_right(starts, pos)
        nxt = starts[later] if later < len(starts) else len(text)
        # The closing tag counts only where it starts before the next known tag opens.
        end = text.find(closing, begin, nxt + len(closing))
        if end < 0:
            found.problems.append(f"unclosed <{name}> repaired")
            end = nxt
        found[name] = text[begin:end].strip()
    return found


def _read_int(found: _Found, tag: str, low: int, high: int, problems: list[str]) -> int | None:
    raw = found.get(tag)
    if raw is None:
        problems.append(f"missing <{tag}>")
        return None
    if raw.isdecimal():  # the usual case, a bare number: the same value as the search below, without the regex
        value = int(raw)
        if low <= value <= high:
            return value
    m = _INT.search(raw)
    if m is None:
        problems.append(f"<{tag}> is not a number: {raw[:20]!r}")
        return None
    value = int(m.group(0))
    if not low <= value <= high:
        problems.append(f"<{tag}> {value} out of range {low}-{high}")
        return None
    return value


def _read_status(found: _Found, tag: str, problems: list[str]) -> int:
    """A missing or unreadable status means 'go on' (0), as the original; -1 is read as -1, not 0."""
    raw = found.get(tag)
    if raw is None:
        problems.append(f"missing <{tag}>")
        return 0
    if raw in _STATUS_TEXTS:  # the usual case, without the regex
        return _STATUS_TEXTS[raw]
    m = _INT.search(raw)
    if m is None or int(m.group(0)) not in STATUS_VALUES:
        problems.append(f"<{tag}> must be one of -1, 0, 1, got {raw[:20]!r}")
        return 0
    return int(m.group(0))
