"""Literal and windowed chat rendering give exactly the token ids of full rendering, each used only where a probe
shows it.

The runner takes each new message's text from the template's fixed head and tail (literal) or renders it from a
short window (the first message plus the latest few) instead of the whole conversation. These tests drive long
dialogues with context cuts through ChatTokens in every mode and require identical segments; a template that
rewrites contents must fail the literal probe, and one whose text depends on more than the window must be
rendered in full.
"""

import copy

import pytest

from sead.dialogue import ChatTokens
from sead.dialogue import chat_tokens as chat_tokens_module
from sead.dialogue.chat_render import MODES, TurnRenderer, render, rendering_mode
from sead.dialogue.chat_tokens import plain_ids, plain_text

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
# Llama-3 style: every content trimmed, so a message's text is not its content verbatim.
TRIM_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def play(tok, rounds: int, cap: int, sop_role: str = "system") -> ChatTokens:
    """Agent and user turns in alternation, with a format-error feedback now and then, under a context cap."""
    chat = ChatTokens(tok, SOP, sop_role)
    for i in range(rounds):
        chat.fit(12, cap)
        said = tok.encode(f"<response>Answer {i}: please open the app.</response><status>0</status>")
        chat.add_agent(said + [tok.eos_token_id], [-0.25] * (len(said) + 1))
        user = "[format error] Use the tags." if i % 5 == 4 else f" <user_reply>Question {i}, why?</user_reply>\n"
        chat.add_user(user)
    return chat


def segments(chat: ChatTokens) -> list[dict]:
    return [s.to_dict() for s in chat.segments]


def played_in(monkeypatch, mode: str, tok, rounds: int, cap: int) -> ChatTokens:
    """`play` with every ChatTokens forced to render in `mode`."""
    with monkeypatch.context() as m:
        m.setattr(chat_tokens_module, "rendering_mode", lambda tok, first: mode)
        chat = play(tok, rounds, cap)
    assert chat._renderer.mode == mode
    return chat


def deltas(tok, mode: str, messages: list[dict]) -> list[str]:
    """The text each message after the first adds, rendered in `mode`."""
    renderer = TurnRenderer(tok, mode, messages[0])
    renderer.reset(render(tok, messages[:1], True))
    return [renderer.extend(messages[:n], messages[n - 1]["role"] == "user") for n in range(2, len(messages) + 1)]


@pytest.mark.parametrize("tok_name", TOKENIZERS)
@pytest.mark.parametrize("sop_role", ["system", "user"])
def test_the_probe_picks_literal_rendering_for_both_test_templates(request, tok_name, sop_role):
    tok = request.getfixturevalue(tok_name)
    assert rendering_mode(tok, {"role": sop_role, "content": SOP}) == "literal"


@pytest.mark.parametrize("tok_name", TOKENIZERS)
@pytest.mark.parametrize("cap", [100_000, 160])
def test_every_mode_gives_the_ids_of_full_rendering_over_a_long_dialogue(request, monkeypatch, tok_name, cap):
    tok = request.getfixturevalue(tok_name)
    chats = {mode: played_in(monkeypatch, mode, tok, 14, cap) for mode in MODES}
    assert chats["windowed"]._renderer._start > 1 or cap < 1000  # in one long segment, the window really slid
    assert segments(chats["literal"]) == segments(chats["full"]) == segments(chats["windowed"])
    assert (len(chats["full"].segments) > 2) == (cap < 1000)  # the small cap starts new segments from later turns
    literal = chats["literal"]
    last = render(tok, literal._segment_messages(), True)
    assert tok.decode(literal.segments[-1].ids, skip_special_tokens=False) == last
    assert literal.segments[-1].ids == tok(last, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("cap", [100_000, 160])
def test_a_template_that_depends_on_index_parity_renders_literally_with_the_same_ids(
    monkeypatch, smollm_tokenizer, cap
):
    tok = copy.deepcopy(smollm_tokenizer)
    tok.chat_template = PARITY_TEMPLATE
    assert rendering_mode(tok, {"role": "system", "content": SOP}) == "literal"
    literal = play(tok, 14, cap)
    assert literal._renderer.mode == "literal"
    assert segments(literal) == segments(played_in(monkeypatch, "full", tok, 14, cap))


@pytest.mark.parametrize("cap", [100_000, 160])
def test_a_template_that_trims_contents_fails_the_literal_probe_and_keeps_its_ids(monkeypatch, smollm_tokenizer, cap):
    tok = copy.deepcopy(smollm_tokenizer)
    tok.chat_template = TRIM_TEMPLATE
    first = {"role": "system", "content": SOP}
    assert rendering_mode(tok, first) == "windowed"
    # Literal wrappers would have kept the whitespace the template trims.
    messages = [first] + [{"role": ("assistant", "user")[i % 2], "content": f"  m{i}\n"} for i in range(6)]
    assert deltas(tok, "literal", messages) != deltas(tok, "full", messages)
    windowed = play(tok, 14, cap)
    assert windowed._renderer.mode == "windowed"
    assert segments(windowed) == segments(played_in(monkeypatch, "full", tok, 14, cap))


def test_a_template_that_numbers_messages_fails_both_probes_and_renders_in_full(smollm_tokenizer):
    tok = copy.deepcopy(smollm_tokenizer)
    tok.chat_template = NUMBERED_TEMPLATE
    first = {"role": "system", "content": SOP}
    assert rendering_mode(tok, first) == "full"
    # A window (or fixed wrappers) would have numbered the messages wrongly.
    messages = [first] + [{"role": ("assistant", "user")[i % 2], "content": f"m{i}"} for i in range(12)]
    full = deltas(tok, "full", messages)
    assert deltas(tok, "windowed", messages) != full and deltas(tok, "literal", messages) != full
    chat = play(tok, 8, 100_000)
    assert chat._renderer.mode == "full"
    expected = render(tok, chat.messages, True)
    assert chat.segments[0].ids == tok(expected, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("tok_name", TOKENIZERS)
def test_plain_text_equals_the_transformers_decode(request, tok_name):
    tok = request.getfixturevalue(tok_name)
    texts = ["", "\n", "<response>We offer a free credit.</response> <stage>1</stage>", f"{tok.eos_token} Hello é"]
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert plain_text(tok, ids) == tok.decode(ids, skip_special_tokens=False)
    assert plain_text(tok, [tok.eos_token_id]) == tok.eos_token


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
