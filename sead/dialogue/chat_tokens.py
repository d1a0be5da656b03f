"""Token ids and loss mask of a conversation, built turn by turn from the model's own chat template.

Invariants (tested with real tokenizers):
- agent tokens are the ids the agent sampled, appended as they are, with mask 1 (its end-of-turn token too);
- everything else (system prompt, template glue, user turns) comes from rendering the chat template over the
  messages and has mask 0, so the ids spell exactly `apply_chat_template(messages)` (each new message is
  rendered from a short window where a probe shows that gives the same text: see chat_render);
- when the context outgrows its cap, a new segment starts from the system prompt plus the latest turns, all
  with mask 0: each agent token is trained once, under the context it was sampled in, and user text never
  becomes trainable;
- text the agent did not write (the system prompt, user turns) is untrusted: a special token's text in it
  (`<|im_end|>`, `<|im_start|>`, any of the tokenizer's) is encoded as plain text, never as the special token,
  so a user cannot close its turn and forge an assistant turn in the agent's context. Only the template's own
  glue holds special tokens.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field

from sead.dialogue.cached_bpe import cached_decoder, cached_encoder
from sead.dialogue.chat_render import TemplateError, TurnRenderer, render, rendering_mode

RECURRING_KEPT = 64  # texts remembered per tokenizer: opening prompts and the template's closing glue
_recurring: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {text: ids}
_specials: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> (count, pattern or None)


@dataclass
class TokenSegment:
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # sampled log-probs where mask is 1, else 0.0

    def extend(self, ids: list[int], trained: bool, logprobs: list[float] | None = None) -> None:
        self.ids += ids
        self.mask += [int(trained)] * len(ids)
        self.logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)

    def to_dict(self) -> dict:
        return {"ids": self.ids, "mask": self.mask, "logprobs": self.logprobs}


def plain_ids(tok, text: str) -> list[int]:
    """`tok(text, add_special_tokens=False)["input_ids"]`, straight from the Rust tokenizer when transformers would
    call it with these settings anyway (no truncation, padding or special-token splitting left set on it): the
    transformers wrapper costs as much CPU as the encoding of a short turn. Byte-level BPE tokenizers that pass
    cached_bpe's probe are encoded there, a word cache in front of the same model, at about half the CPU."""
    backend = getattr(tok, "backend_tokenizer", None)
    if (
        backend is not None
        and backend.truncation is None
        and backend.padding is None
        and backend.encode_special_tokens == bool(getattr(tok, "split_special_tokens", False))
    ):
        encoder = None if backend.encode_special_tokens else cached_encoder(tok, backend)
        if encoder is not None:
            return encoder.encode(text)
        return backend.encode(text, add_special_tokens=False).ids
    return tok(text, add_special_tokens=False)["input_ids"]


def plain_text(tok, ids: list[int]) -> str:
    """`tok.decode(ids, skip_special_tokens=False)`, straight from the Rust tokenizer when transformers would not
    change its text (no clean-up of spaces, which transformers skips for BPE models anyway); for byte-level
    tokenizers that pass cached_bpe's probe, from a table of each token's bytes."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None and (
        not getattr(tok, "clean_up_tokenization_spaces", False)
        or (
            type(backend.model).__name__ == "BPE"
            and not getattr(tok, "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", False)
        )
    ):
        decoder = cached_decoder(tok, backend)
        text = decoder.decode(ids) if decoder is not None else None
        return text if text is not None else backend.decode(ids, skip_special_tokens=False)
    return tok.decode(ids, skip_special_tokens=False)


def special_tokens_pattern(tok) -> re.Pattern | None:
    """A pattern matching the text of any of the tokenizer's special tokens (longest first), or None where it has
    none; made again when tokens were added."""
    decoder = getattr(tok, "added_tokens_decoder", {})
    known = _specials.get(tok)
    if known is None or known[0] != len(decoder):
        texts = {t.content for t in decoder.values() if t.special} | set(getattr(tok, "all_special_tokens", []))
        texts = sorted((t for t in texts if t), key=len, reverse=True)
        known = _specials[tok] = len(decoder), re.compile("|".join(map(re.escape, texts))) if texts else None
    return known[1]


def literal_ids(tok, text: str) -> list[int]:
    """The ids of `text` with every special token's text in it encoded as plain text (transformers'
    `split_special_tokens`)."""
    ids = tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None:  # transformers leaves the setting on the tokenizer: put back what plain_ids expects
        backend.encode_special_tokens = bool(getattr(tok, "split_special_tokens", False))
    return ids


def recurring_ids(tok, text: str) -> list[int]:
    """`plain_ids` of a text that recurs in every dialogue (the SOP prompt that opens it, the glue that closes
    each agent turn), encoded once per tokenizer."""
    known = _recurring.setdefault(tok, {})
    if text not in known:
        if len(known) >= RECURRING_KEPT:
            known.clear()
        known[text] = tuple(plain_ids(tok, text))
    return list(known[text])


class ChatTokens:
    def __init__(self, tokenizer, system_prompt: str, sop_role: str = "system"):
        self.tok = tokenizer
        self.messages: list[dict] = [{"role": sop_role, "content": system_prompt}]
        self.segments: list[TokenSegment] = []
        self._renderer = TurnRenderer(tokenizer, rendering_mode(tokenizer, self.messages[0]), self.messages[0])
        self._segment_start = 1  # index in self.messages where the current segment's history starts
        self.appended = 0  # tokens added after the first prompt (agent turns, glue, user turns): the budget
        eos = self._eos = tokenizer.eos_token_id  # transformers looks it up anew on every access
        self._eos_text = plain_text(tokenizer, [eos]) if eos is not None else ""
        self._specials = special_tokens_pattern(tokenizer)
        opening = render(tokenizer, self.messages, True)
        if self._untrusted(self.messages):
            self._new_segment(opening, self._encode(opening, self.messages))
        else:
            self._new_segment(opening, recurring_ids(tokenizer, opening))

    # -- rendering helpers ------------------------------------------------------------------------------
    def _untrusted(self, messages: list[dict]) -> bool:
        """Whether a message the agent did not write holds a special token's text."""
        found = self._specials
        return found is not None and any(m["role"] != "assistant" and found.search(m["content"]) for m in messages)

    def _encode(self, text: str, messages: list[dict] | None = None) -> list[int]:
        """The ids of `text`. With `messages`: `text` is the end of their rendering (with the generation prompt),
        and a special token's text in a message the agent did not write is encoded as plain text."""
        if not text:
            return []
        spans = self._untrusted_spans(messages, len(text)) if messages else []
        if not spans:
            return plain_ids(self.tok, text)
        ids, pos = [], 0
        for start, end in spans:
            ids += plain_ids(self.tok, text[pos:start]) if start > pos else []
            ids += literal_ids(self.tok, text[start:end])
            pos = end
        return ids + (plain_ids(self.tok, text[pos:]) if pos < len(text) else [])

    def _untrusted_spans(self, messages: list[dict], tail: int) -> list[tuple[int, int]]:
        """Where, in the last `tail` characters of `messages`' rendering, the contents lie that the agent did not
        write and that hold a special token's text: found by rendering them again with a marker each in their
        place, so the template's own special tokens around them are never taken for theirs."""
        marked, contents = [], []
        for m in messages:
            if m["role"] != "assistant" and self._specials.search(m["content"]):
                marked.append({**m, "content": f"\x00sead-untrusted-{len(contents)}\x00"})
                contents.append(m["content"])
            else:
                marked.append(m)
        full, rest = render(self.tok, messages, True), render(self.tok, marked, True)
        spans, pos = [], 0
        for i, content in enumerate(contents):
            before, found, rest = rest.partition(f"\x00sead-untrusted-{i}\x00")
            copied = content if full.startswith(before + content, pos) else content.strip()  # a template may trim
            if not found or not full.startswith(before + copied, pos):
                raise TemplateError(
                    "the chat template rewrites a message holding a special token's text, so that text cannot be "
                    "kept from becoming the special token"
                )
            pos += len(before)
            spans.append((pos, pos + len(copied)))
            pos += len(copied)
        offset = len(full) - tail
        return [(max(start - offset, 0), end - offset) for start, end in spans if end > offset]

    def _segment_messages(self) -> list[dict]:
        return [self.messages[0], *self.messages[self._segment_start :]]

    def _new_segment(self, text: str, ids: list[int]) -> None:
        """Start a segment whose messages render (with the generation prompt) as `text`, encoded as `ids`."""
        self._renderer.reset(text)
        seg = TokenSegment()
        seg.extend(ids, trained=False)
        self.segments.append(seg)

    @property
    def prompt_ids(self) -> list[int]:
        """What the agent conditions on for its next turn."""
        return self.segments[-1].ids

    # -- turns ----------------------------------------------------------------------------------------------
    def add_agent(self, sampled: list[int], logprobs: list[float] | None = None, *, trained: bool = True) -> str:
        """Append the agent's sampled ids; return the message text (without the end-of-turn token). `trained=False`:
        an agent turn replayed as context (a branched group's prefix), with mask 0 like the user's turns."""
        eos = self._eos
        stopped = bool(sampled) and sampled[-1] == eos
        content_ids = sampled[:-1] if stopped else sampled
        content = plain_text(self.tok, content_ids)
        seg = self.segments[-1]
        seg.extend(list(sampled), trained=trained, logprobs=logprobs if trained else None)
        self.messages.append({"role": "assistant", "content": content})
        text = self._renderer.extend(self._segment_messages(), False)
        if not text.startswith(content):
            raise TemplateError(
                "the chat template does not render the assistant turn as an append to the "
                "prompt (it rewrites earlier text); this model cannot be trained turn by turn"
            )
        closing = text[len(content) :]
        if stopped:
            eos_text = self._eos_text
            if not closing.startswith(eos_text):
                raise TemplateError(f"the template does not close assistant turns with {eos_text!r}")
            closing = closing[len(eos_text) :]
        closing_ids = recurring_ids(self.tok, closing) if closing else []
        seg.extend(closing_ids, trained=False)
        self.appended += len(sampled) + len(closing_ids)
        return content

    def add_user(self, content: str) -> None:
        self.messages.append({"role": "user", "content": content})
        messages = self._segment_messages()
        text = self._renderer.extend(messages, True)
        delta = self._encode(text, messages if self._untrusted(messages[-1:]) else None)
        self.segments[-1].extend(delta, trained=False)
        self.appended += len(delta)

    def fit(self, room: int, cap: int) -> bool:
        """Make sure `room` more tokens fit under `cap`; if not, start a new segment that drops the oldest
        rounds (never the system prompt). Returns True if a new segment was started."""
        if len(self.prompt_ids) + room <= cap:
            return False
        history = self.messages[1:]
        # Drop the oldest messages until the rendered prompt fits; the system prompt and the last message stay.
        for drop in range(self._segment_start, len(history)):
            kept = [self.messages[0], *history[drop:]]
            text = render(self.tok, kept, True)
            ids = self._encode(text, kept if self._untrusted(kept) else None)
            if len(ids) + room <= cap:
                self._segment_start = drop + 1
                self._new_segment(text, ids)
                return True
        raise ContextOverflow(f"even the system prompt and the last turn exceed the context cap of {cap} tokens")


class ContextOverflow(RuntimeError):
    pass
