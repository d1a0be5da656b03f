"""What the chat template appends for each new message, without rendering the whole conversation every turn.

Rendering the whole conversation on every turn costs O(turns) per turn and O(turns^2) per dialogue, a large
share of the runner's CPU when hundreds of dialogues share one process. Three ways to get the new message's text,
fastest first; each is used only where a probe shows it gives exactly the text of full rendering:

- `literal`: in common templates (ChatML as SmolLM2 has it) a message adds a fixed head, its content verbatim and
  a fixed tail, which depend only on its role, the parity of its index and whether the text before it ended with
  the generation prompt. The head and tail are rendered once per template with a marker as the content; a turn
  is then two string joins, no jinja at all. Templates that trim or split contents (Llama-3's `| trim`, Qwen3's
  reasoning blocks) fail the probe, whose contents carry such whitespace and tags.
- `windowed`: the text a message adds depends only on that message, the first message, its neighbours and the
  parity of its index. The renderer keeps a window of the first message plus the latest few, starting at an odd
  index so every message keeps its parity, and takes the new text as the difference of two renderings of it.
- `full`: the whole segment rendered every time, for templates that fail both probes (e.g. one that numbers
  messages).

The probe runs once per (tokenizer, template, first message): a conversation is rendered every way and every
message's text compared, over a dialogue from its start and over a segment that opens after a context cut.
"""

from __future__ import annotations

import weakref

WINDOW_MESSAGES = 8  # messages after the first one the window holds at most; then it restarts from the latest
PROBE_ROUNDS = 8  # rounds of the probe conversation: the window slides on an agent turn, then on a user turn
MODES = ("literal", "windowed", "full")  # fastest first
MARKER = "\x00sead-content\x00"  # stands for a message's content when its head and tail are rendered
# Contents a template might rewrite (trim, split at reasoning tags, escape) rather than copy: the literal probe
# sends them through every role, so such a template is rendered with jinja instead.
PROBE_CONTENTS = (
    "<response>Probe answer {i}.</response><status>0</status>",
    "  <user_reply>Padded {i}?</user_reply>\n\n",
    "<think>plan {i}</think>\nsaid {i}",
    "{{{{ not jinja {i} }}}} {{% if x %}} {i}",
    "line {i}\n\nnext\tline é ü 中",
    "\n",
)
_verdicts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {(template, role, text): mode}
# tokenizer -> {(template, first role, first text): {(role, parity, before, after): (head, tail)}}, shared by dialogues
_wrappers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class TemplateError(ValueError):
    """The chat template rewrites earlier turns, so a conversation cannot be extended token by token."""


def render(tok, messages: list[dict], generation_prompt: bool) -> str:
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def appended(before: str, after: str, role: str) -> str:
    """What `after` adds to `before`; a template that changes `before` cannot be extended token by token."""
    if not after.startswith(before):
        raise TemplateError(
            f"the chat template rewrites earlier text when a {role} turn is added; "
            "this model cannot be trained turn by turn"
        )
    return after[len(before) :]


class TurnRenderer:
    """Renders one conversation segment as it grows by one message at a time.

    `extend(messages, generation_prompt)` returns the text the full rendering of `messages` (the segment so far,
    newest last) gains from the newest message, the generation prompt included when asked for."""

    def __init__(self, tok, mode: str, first: dict):
        if mode not in MODES:
            raise ValueError(f"rendering mode {mode!r} is not one of {MODES}")
        self.tok, self.mode, self.first = tok, mode, first
        self._start = 1  # windowed: index in the segment's messages where the window's history begins (odd)
        self._text = ""  # windowed and full: rendering of the window (or of everything) as of the last call
        self._generation_prompt = True  # whether the text so far ends with the generation prompt
        # literal: (role, parity, before, after) -> head, tail; one table for every dialogue with this opening
        self._wrappers = _wrappers.setdefault(tok, {}).setdefault(_opening(tok, first), {})

    def reset(self, text: str) -> None:
        """A new segment, whose messages render as `text` with the generation prompt; the window starts there."""
        self._start, self._text, self._generation_prompt = 1, text, True

    def extend(self, messages: list[dict], generation_prompt: bool) -> str:
        new = messages[-1]
        if self.mode == "literal":
            key = (new["role"], (len(messages) - 1) % 2, self._generation_prompt, generation_prompt)
            if key not in self._wrappers:
                self._wrappers[key] = self._wrapper(*key)
            head, tail = self._wrappers[key]
            self._generation_prompt = generation_prompt
            return head + new["content"] + tail
        before = self._text
        if self.mode == "windowed":
            start = self._start
            if len(messages) - start > WINDOW_MESSAGES:
                # Slide to the message before the new one (or the one before that): an odd start keeps every
                # message's index parity. Sliding far and seldom saves re-rendering the window's old part.
                start = len(messages) - 3 + len(messages) % 2
            if start != self._start:
                before = render(self.tok, self._window(messages[:-1], start), self._generation_prompt)
                self._start = start
            after = render(self.tok, self._window(messages, start), generation_prompt)
        else:
            after = render(self.tok, messages, generation_prompt)
        self._text, self._generation_prompt = after, generation_prompt
        return appended(before, after, new["role"])

    @staticmethod
    def _window(messages: list[dict], start: int) -> list[dict]:
        return [messages[0], *messages[start:]] if start > 1 else messages

    def _wrapper(self, role: str, parity: int, before: bool, after: bool) -> tuple[str, str]:
        """The head and tail around a `role` message's content at an index of this parity: rendered once, from
        the first message, a filler of the other role where the parity needs one, and the marker as content."""
        other = "user" if role == "assistant" else "assistant"
        filler = [] if parity == 1 else [{"role": other, "content": "filler"}]
        history = [self.first, *filler]
        marked = [*history, {"role": role, "content": MARKER}]
        text = appended(render(self.tok, history, before), render(self.tok, marked, after), role)
        head, found, tail = text.partition(MARKER)
        if not found or MARKER in tail:
            raise TemplateError(f"the chat template does not copy a {role} message's content once")
        return head, tail


def rendering_mode(tok, first: dict) -> str:
    """The fastest of MODES whose text equals full rendering for this template and first message, on the probe
    conversations. Cached per tokenizer."""
    by_template = _verdicts.setdefault(tok, {})
    key = _opening(tok, first)
    if key not in by_template:
        by_template[key] = next(m for m in MODES if m == "full" or _probe(tok, first, m))
    return by_template[key]


def _opening(tok, first: dict) -> tuple[str, str, str]:
    return tok.chat_template, first["role"], first["content"]


def _probe(tok, first: dict, mode: str) -> bool:
    messages = [first]
    for i in range(PROBE_ROUNDS):
        said, heard = PROBE_CONTENTS[i % len(PROBE_CONTENTS)], PROBE_CONTENTS[(i + 3) % len(PROBE_CONTENTS)]
        messages.append({"role": "assistant", "content": said.format(i=i)})
        messages.append({"role": "user", "content": heard.format(i=i)})
    # A dialogue from its start, then a segment that opens with the first message and three later ones, as a context
    # cap starts one, and so has its user turns at odd indices.
    try:
        for segment, opening in ((messages, 1), ([first, *messages[-11:]], 4)):
            full, fast = TurnRenderer(tok, "full", first), TurnRenderer(tok, mode, first)
            for renderer in (full, fast):
                renderer.reset(render(tok, segment[:opening], True))
            for n in range(opening + 1, len(segment) + 1):
                generation_prompt = segment[n - 1]["role"] != "assistant"
                if fast.extend(segment[:n], generation_prompt) != full.extend(segment[:n], generation_prompt):
                    return False
    except Exception:  # a template that refuses the probe's layout is rendered in full, as it always was
        return False
    return True
