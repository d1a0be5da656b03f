"""Token ids and loss mask of a conversation, built turn by turn from the model's own chat template.

Invariants (tested with real tokenizers):
- agent tokens are the ids the agent sampled, appended as they are, with mask 1 (its end-of-turn token too);
- everything else (system prompt, template glue, user turns) comes from rendering the chat template over the
  messages and has mask 0, so the ids spell exactly `apply_chat_template(messages)`;
- when the context outgrows its cap, a new segment starts from the system prompt plus the latest turns, all
  with mask 0: each agent token is trained once, under the context it was sampled in, and user text never
  becomes trainable.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class TemplateError(ValueError):
    """The chat template rewrites earlier turns, so a conversation cannot be extended token by token."""


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


class ChatTokens:
    def __init__(self, tokenizer, system_prompt: str, sop_role: str = "system"):
        self.tok = tokenizer
        self.messages: list[dict] = [{"role": sop_role, "content": system_prompt}]
        self.segments: list[TokenSegment] = []
        self.text = ""  # rendering of the current segment's messages with the generation prompt
        self._segment_start = 1  # index in self.messages where the current segment's history starts
        self.appended = 0  # tokens added after the first prompt (agent turns, glue, user turns): the budget
        self._new_segment(self.messages)

    # -- rendering helpers ------------------------------------------------------------------------------
    def _render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def _encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"] if text else []

    def _segment_messages(self) -> list[dict]:
        return [self.messages[0], *self.messages[self._segment_start :]]

    def _new_segment(self, messages: list[dict]) -> None:
        self.text = self._render(messages, True)
        seg = TokenSegment()
        seg.extend(self._encode(self.text), trained=False)
        self.segments.append(seg)

    @property
    def prompt_ids(self) -> list[int]:
        """What the agent conditions on for its next turn."""
        return self.segments[-1].ids

    # -- turns ----------------------------------------------------------------------------------------------
    def add_agent(self, sampled: list[int], logprobs: list[float] | None = None) -> str:
        """Append the agent's sampled ids; return the message text (without the end-of-turn token)."""
        eos = self.tok.eos_token_id
        stopped = bool(sampled) and sampled[-1] == eos
        content_ids = sampled[:-1] if stopped else sampled
        content = self.tok.decode(content_ids, skip_special_tokens=False)
        seg = self.segments[-1]
        seg.extend(list(sampled), trained=True, logprobs=logprobs)
        self.messages.append({"role": "assistant", "content": content})
        rendered = self._render(self._segment_messages(), False)
        head = self.text + content
        if not rendered.startswith(head):
            raise TemplateError(
                "the chat template does not render the assistant turn as an append to the "
                "prompt (it rewrites earlier text); this model cannot be trained turn by turn"
            )
        closing = rendered[len(head) :]
        eos_text = self.tok.decode([eos], skip_special_tokens=False)
        if stopped:
            if not closing.startswith(eos_text):
                raise TemplateError(f"the template does not close assistant turns with {eos_text!r}")
            closing = closing[len(eos_text) :]
        closing_ids = self._encode(closing)
        seg.extend(closing_ids, trained=False)
        self.appended += len(sampled) + len(closing_ids)
        self.text = rendered
        return content

    def add_user(self, content: str) -> None:
        self.messages.append({"role": "user", "content": content})
        rendered = self._render(self._segment_messages(), True)
        if not rendered.startswith(self.text):
            raise TemplateError("the chat template rewrites earlier turns when a user turn is added")
        delta = self._encode(rendered[len(self.text) :])
        self.segments[-1].extend(delta, trained=False)
        self.appended += len(delta)
        self.text = rendered

    def fit(self, room: int, cap: int) -> bool:
        """Make sure `room` more tokens fit under `cap`; if not, start a new segment that drops the oldest
        rounds (never the system prompt). Returns True if a new segment was started."""
        if len(self.prompt_ids) + room <= cap:
            return False
        history = self.messages[1:]
        # Drop the oldest messages until the rendered prompt fits; the system prompt and the last message stay.
        for drop in range(self._segment_start, len(history)):
            kept = [self.messages[0], *history[drop:]]
            if len(self._encode(self._render(kept, True))) + room <= cap:
                self._segment_start = drop + 1
                self._new_segment(kept)
                return True
        raise ContextOverflow(f"even the system prompt and the last turn exceed the context cap of {cap} tokens")


class ContextOverflow(RuntimeError):
    pass
