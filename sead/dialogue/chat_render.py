"""What the chat template appends for each new message, rendered from a short window of the conversation.

Rendering the whole conversation on every turn costs O(turns) per turn and O(turns^2) per dialogue, a large
share of the runner's CPU when hundreds of dialogues share one process. In common templates (ChatML as SmolLM2
has it, Llama-3 style headers) the text added for a message depends only on that message, the first message,
its neighbours and the parity of its index. So the renderer keeps a window of the first message plus the
latest few, starting at an odd index so every message keeps its parity, and takes the new message's text as
the difference of two renderings of that window.

Whether a template really behaves so is checked, not assumed: once per (tokenizer, template, first message),
a probe conversation is rendered both ways and every turn's text compared. A template that fails the probe
is rendered in full, as before.
"""

from __future__ import annotations

import weakref

WINDOW_MESSAGES = 8  # messages after the first one the window holds at most; then it restarts from the latest
PROBE_ROUNDS = 8  # rounds of the probe conversation: the window slides on an agent turn, then on a user turn
_verdicts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {(template, role, text): ok}


def render(tok, messages: list[dict], generation_prompt: bool) -> str:
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


class TurnRenderer:
    """Renders one conversation segment as it grows by one message at a time.

    `extend(messages, generation_prompt)` returns (before, after): two renderings of the same messages, the
    second with the newest message, so `after[len(before):]` is exactly what the full rendering of `messages`
    gains from that message. Full rendering: `before` is the whole previous text. Windowed: both cover the
    first message and the latest few only."""

    def __init__(self, tok, windowed: bool):
        self.tok = tok
        self.windowed = windowed
        self._start = 1  # index in the segment's messages where the window's history begins (odd)
        self._text = ""  # rendering of the window (or of everything) as of the last call
        self._generation_prompt = True  # whether that rendering ends with the generation prompt

    def reset(self, text: str) -> None:
        """A new segment, whose messages render as `text` with the generation prompt; the window starts there."""
        self._start, self._text, self._generation_prompt = 1, text, True

    def extend(self, messages: list[dict], generation_prompt: bool) -> tuple[str, str]:
        before = self._text
        if self.windowed:
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
        return before, after

    @staticmethod
    def _window(messages: list[dict], start: int) -> list[dict]:
        return [messages[0], *messages[start:]] if start > 1 else messages


def window_is_exact(tok, first: dict) -> bool:
    """True when windowed rendering gives the same text as full rendering for this template and first message,
    on a probe conversation that slides the window and starts a second segment. Cached per tokenizer."""
    by_template = _verdicts.setdefault(tok, {})
    key = (tok.chat_template, first["role"], first["content"])
    if key not in by_template:
        by_template[key] = _probe(tok, first)
    return by_template[key]


def _probe(tok, first: dict) -> bool:
    messages = [first]
    for i in range(PROBE_ROUNDS):
        messages.append({"role": "assistant", "content": f"<response>Probe answer {i}.</response><status>0</status>"})
        messages.append({"role": "user", "content": f"<user_reply>Probe question {i}?</user_reply>"})
    # A dialogue from its start, then a segment that opens with the first message and three later ones, as a context
    # cap starts one, and so has its user turns at odd indices.
    try:
        for segment, opening in ((messages, 1), ([first, *messages[-11:]], 4)):
            full, window = TurnRenderer(tok, False), TurnRenderer(tok, True)
            full.reset(render(tok, segment[:opening], True))
            window.reset(render(tok, segment[:opening], True))
            for n in range(opening + 1, len(segment) + 1):
                generation_prompt = segment[n - 1]["role"] != "assistant"
                before, after = window.extend(segment[:n], generation_prompt)
                full_before, full_after = full.extend(segment[:n], generation_prompt)
                exact = after.startswith(before) and full_after.startswith(full_before)
                if not exact or after[len(before) :] != full_after[len(full_before) :]:
                    return False
    except Exception:  # a template that refuses the probe's layout is rendered in full, as it always was
        return False
    return True
