"""Windowed chat rendering gives exactly the token ids of full rendering, and is used only where a probe shows it.

The runner renders each new message from a short window (the first message plus the latest few) instead of the
whole conversation. These tests drive long dialogues with context cuts through ChatTokens twice, windowed and
forced to full rendering, and require identical segments; a template whose text depends on more than the window
must fail the probe and be rendered in full.
"""

import copy

import pytest

from sead.dialogue import ChatTokens
from sead.dialogue import chat_tokens as chat_tokens_module
from sead.dialogue.chat_render import TurnRenderer, render, window_is_exact
from sead.dialogue.chat_tokens import plain_ids

TOKENIZERS = ["smollm_tokenizer", "header_tokenizer"]
SOP = "You are Alex from the platform. Follow the SOP: greet, verify, offer, close."
# A template that numbers every message: the text a message adds depends on how many came before it.
NUMBERED_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{{ loop.index }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# A template that marks every odd-numbered message, as templates that check role alternation by index do.
PARITY_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% if loop.index0 % 2 %}~\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def play(tok, rounds: int, cap: int, sop_role: str = "system") -> ChatTokens:
    """Agent and user turns in alternation, with a format-error feedback now and then, under a context cap."""
    chat = ChatTokens(tok, SOP, sop_role)
    for i in range(rounds):
        chat.fit(12, cap)
        said = tok.encode(f"<response>Answer {i}: please open the app.</response><status>0</status>")
        chat.add_agent(said + [tok.eos_token_id], [-0.25] * (len(said) + 1))
        user = "[format error] Use the tags." if i % 5 == 4 else f"<user_reply>Question {i}, why?</user_reply>"
        chat.add_user(user)
    return chat


def segments(chat: ChatTokens) -> list[dict]:
    return [s.to_dict() for s in chat.segments]


@pytest.mark.parametrize("tok_name", TOKENIZERS)
@pytest.mark.parametrize("sop_role", ["system", "user"])
def test_the_probe_accepts_both_test_templates(request, tok_name, sop_role):
    tok = request.getfixturevalue(tok_name)
    assert window_is_exact(tok, {"role": sop_role, "content": SOP})


@pytest.mark.parametrize("tok_name", TOKENIZERS)
@pytest.mark.parametrize("cap", [100_000, 160])
def test_windowed_ids_equal_full_rendering_over_a_long_dialogue(request, monkeypatch, tok_name, cap):
    tok = request.getfixturevalue(tok_name)
    windowed = play(tok, 14, cap)
    assert windowed._renderer.windowed
    assert windowed._renderer._start > 1 or cap < 1000  # in one long segment, the window really slid
    with monkeypatch.context() as m:
        m.setattr(chat_tokens_module, "window_is_exact", lambda tok, first: False)
        full = play(tok, 14, cap)
    assert not full._renderer.windowed
    assert segments(windowed) == segments(full)
    assert (len(windowed.segments) > 2) == (cap < 1000)  # the small cap starts new segments from later turns
    last = render(tok, windowed._segment_messages(), True)
    assert tok.decode(windowed.segments[-1].ids, skip_special_tokens=False) == last
    assert windowed.segments[-1].ids == tok(last, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("cap", [100_000, 160])
def test_a_template_that_depends_on_index_parity_keeps_the_window_and_its_ids(monkeypatch, smollm_tokenizer, cap):
    tok = copy.deepcopy(smollm_tokenizer)
    tok.chat_template = PARITY_TEMPLATE
    assert window_is_exact(tok, {"role": "system", "content": SOP})
    windowed = play(tok, 14, cap)
    monkeypatch.setattr(chat_tokens_module, "window_is_exact", lambda tok, first: False)
    assert windowed._renderer.windowed and segments(windowed) == segments(play(tok, 14, cap))


def test_a_template_that_numbers_messages_fails_the_probe_and_renders_in_full(smollm_tokenizer):
    tok = copy.deepcopy(smollm_tokenizer)
    tok.chat_template = NUMBERED_TEMPLATE
    first = {"role": "system", "content": SOP}
    assert not window_is_exact(tok, first)
    # A window would have numbered the messages wrongly once it slides.
    messages = [first] + [{"role": ("assistant", "user")[i % 2], "content": f"m{i}"} for i in range(12)]
    deltas = {}
    for windowed in (True, False):
        renderer = TurnRenderer(tok, windowed)
        renderer.reset(render(tok, messages[:1], True))
        steps = [renderer.extend(messages[:n], messages[n - 1]["role"] == "user") for n in range(2, len(messages) + 1)]
        deltas[windowed] = [after[len(before) :] for before, after in steps]
    assert deltas[True] != deltas[False]
    chat = play(tok, 8, 100_000)
    assert not chat._renderer.windowed
    expected = render(tok, chat.messages, True)
    assert chat.segments[0].ids == tok(expected, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("tok_name", TOKENIZERS)
def test_plain_ids_equal_the_transformers_call(request, tok_name):
    tok = copy.deepcopy(request.getfixturevalue(tok_name))
    texts = ["", "\n", "<user_reply>Fine, go on.</user_reply>", f"{tok.eos_token}\nHello, who is this?{tok.eos_token}"]
    for text in texts:
        assert plain_ids(tok, text) == tok(text, add_special_tokens=False)["input_ids"]
    # Settings left on the Rust tokenizer by another caller must not leak into the runner's ids.
    tok.backend_tokenizer.enable_truncation(2)
    got = plain_ids(tok, texts[2])
    assert len(got) > 2 and got == tok(texts[2], add_special_tokens=False)["input_ids"]
