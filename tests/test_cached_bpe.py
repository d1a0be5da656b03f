"""cached_bpe gives exactly the ids `tokenizers` gives, for every tokenizer it accepts, and declines the others."""

import json
import random

import pytest
from tokenizers import Tokenizer, normalizers

from sead.dialogue import cached_bpe
from sead.dialogue.cached_bpe import CachedByteLevelBPE, CachedByteLevelDecode
from sead.dialogue.chat_tokens import plain_ids, plain_text
from sead.scenario import Profile

# Llama-3's and Qwen2's word regex, which those tokenizers run as a Split before a ByteLevel without its own regex.
LLAMA3_WORDS = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PIECES = [
    " ",
    "  ",
    "   ",
    "\n",
    "\n\n",
    "\r\n",
    "\t",
    "'s",
    "'S",
    "'",
    "ll",
    "'ve",
    "a",
    "Z",
    "é",
    "e\u0301",
    "中",
    "😀",
    "👍🏽",
    "1",
    "23",
    "4567",
    "½",
    ".",
    ",",
    "!?",
    "<",
    ">",
    "</",
    "_",
    "-",
    "--",
    "$",
    "\\",
    '"',
    "\u00a0",
    "\u2003",
    "\u200b",
    "\x0b",
    "\x1c",
    "\x85",
    "<user_reply>",
    "hello",
    "Hello",
    "DON'T",
    "<|im_start",
    "|>",
]


def fuzz_texts(added: list[str], n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    alphabet = PIECES + added
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def ascii_fuzz_texts(added: list[str], n: int, seed: int = 0) -> list[str]:
    """Texts of ASCII only: every character, the ASCII pieces and the added tokens."""
    rng = random.Random(seed)
    alphabet = [chr(c) for c in range(128)] + [p for p in PIECES if p.isascii()] + added
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(n)]
    assert all(t.isascii() for t in texts)
    return texts


def assert_same_ids(backend, encoder, texts):
    wrong = [t for t in texts if encoder.encode(t) != backend.encode(t, add_special_tokens=False).ids]
    assert not wrong, f"{len(wrong)} texts encoded differently, e.g. {wrong[:3]!r}"


def with_pre_tokenizer(backend, pre: dict) -> Tokenizer:
    spec = json.loads(backend.to_str())
    spec["pre_tokenizer"] = pre
    return Tokenizer.from_str(json.dumps(spec))


def test_smollm2_ids_equal_tokenizers_on_every_character_and_fuzzed_texts(smollm_tokenizer, restaurant):
    backend = smollm_tokenizer.backend_tokenizer
    encoder = CachedByteLevelBPE.for_tokenizer(backend)
    assert encoder is not None
    # Every code point up to the supplementary ideographs, alone, doubled and between spaces, words and digits.
    chars = [chr(c) for c in range(0x2FFFF) if not 0xD800 <= c < 0xE000]
    texts = [f"a{c} b{c}{c}x\n{c} 1{c}" for c in chars]
    texts += fuzz_texts(["<|im_start|>", "<|im_end|>", "<|endoftext|>"], 5000)
    texts += ascii_fuzz_texts(["<|im_start|>", "<|im_end|>", "<|endoftext|>"], 5000)  # split by the ASCII pattern
    profile = Profile.make({"cooperation": 1, "emotion": 2, "trust": 0}, [])
    texts += [restaurant.agent_system_prompt(), restaurant.user_system_prompt(profile)]
    assert_same_ids(backend, encoder, texts)


def test_a_trained_tokenizer_and_a_split_then_bytelevel_one_are_encoded_the_same(smollm_tokenizer, header_tokenizer):
    trained = header_tokenizer.backend_tokenizer
    encoder = CachedByteLevelBPE.for_tokenizer(trained)
    assert encoder is not None
    assert_same_ids(trained, encoder, fuzz_texts(["<|begin|>", "<|eot|>", "<|header|>"], 3000, seed=1))

    split = with_pre_tokenizer(
        smollm_tokenizer.backend_tokenizer,
        {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": LLAMA3_WORDS}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
    )
    encoder = CachedByteLevelBPE.for_tokenizer(split)
    assert encoder is not None
    assert_same_ids(split, encoder, fuzz_texts(["<|im_start|>", "<|im_end|>"], 3000, seed=2))


def test_tokenizers_of_other_shapes_are_left_to_tokenizers(smollm_tokenizer):
    backend = smollm_tokenizer.backend_tokenizer
    prefixed = with_pre_tokenizer(
        backend, {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    )
    assert CachedByteLevelBPE.for_tokenizer(prefixed) is None
    normalised = Tokenizer.from_str(backend.to_str())
    normalised.normalizer = normalizers.NFKC()
    assert CachedByteLevelBPE.for_tokenizer(normalised) is None
    stripping = Tokenizer.from_str(backend.to_str())
    from tokenizers import AddedToken

    stripping.add_special_tokens([AddedToken("<strip>", lstrip=True)])
    assert CachedByteLevelBPE.for_tokenizer(stripping) is None


@pytest.mark.parametrize("pattern", ["GPT2_WORDS", "GPT2_WORDS_ASCII"])
def test_the_probe_refuses_a_word_split_that_differs(smollm_tokenizer, monkeypatch, pattern):
    """Without the probe, a regex that splits contractions otherwise would give wrong ids silently; for ASCII text
    or for any other."""
    backend = smollm_tokenizer.backend_tokenizer
    assert CachedByteLevelBPE.for_tokenizer(backend) is not None
    monkeypatch.setattr(cached_bpe, pattern, getattr(cached_bpe, pattern).replace("'s|'t|", ""))
    assert CachedByteLevelBPE.for_tokenizer(backend) is None


def test_plain_ids_splits_on_tokens_added_after_the_first_encode(smollm_tokenizer):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm_tokenizer.name_or_path)
    text = "before<sead_new>after <sead_new>"
    first = plain_ids(tok, text)
    assert first == tok(text, add_special_tokens=False)["input_ids"]
    tok.add_tokens(["<sead_new>"])
    ids = plain_ids(tok, text)
    assert ids == tok(text, add_special_tokens=False)["input_ids"] and ids != first
    assert tok.convert_tokens_to_ids("<sead_new>") in ids


def assert_same_text(backend, decoder, id_lists):
    wrong = [ids for ids in id_lists if decoder.decode(ids) != backend.decode(ids, skip_special_tokens=False)]
    assert not wrong, f"{len(wrong)} id lists decoded differently, e.g. {wrong[:3]}"


def test_decoding_by_table_equals_tokenizers_for_every_id_and_random_sequences(smollm_tokenizer, header_tokenizer):
    for tok in (smollm_tokenizer, header_tokenizer):
        backend = tok.backend_tokenizer
        decoder = CachedByteLevelDecode.for_tokenizer(backend)
        assert decoder is not None
        size = backend.get_vocab_size(with_added_tokens=True)
        rng = random.Random(3)
        id_lists = [[i] for i in range(size)]  # tokens that are partial UTF-8 alone become U+FFFD, as in tokenizers
        id_lists += [[rng.randrange(size) for _ in range(rng.randint(2, 40))] for _ in range(5000)]
        assert_same_text(backend, decoder, id_lists)


def test_tokens_outside_the_byte_alphabet_are_decoded_by_tokenizers(smollm_tokenizer):
    """An added token with a space makes SmolLM2's fused ByteLevel step keep the raw text of the whole call; the
    table cannot stand for that, so such calls go to tokenizers, and plain_text still equals tok.decode."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm_tokenizer.name_or_path)
    tok.add_tokens(["two words"])
    spaced = tok.convert_tokens_to_ids("two words")
    ids = [spaced, *tok(" there é", add_special_tokens=False)["input_ids"]]
    decoder = CachedByteLevelDecode.for_tokenizer(tok.backend_tokenizer)
    assert decoder is not None and decoder.decode(ids) is None
    assert plain_text(tok, ids) == tok.decode(ids, skip_special_tokens=False)
    plain = tok("back to plain", add_special_tokens=False)["input_ids"]
    assert plain_text(tok, plain) == "back to plain"


def test_other_decoders_and_a_wrong_byte_table_are_refused(smollm_tokenizer, monkeypatch):
    from tokenizers import decoders

    backend = Tokenizer.from_str(smollm_tokenizer.backend_tokenizer.to_str())
    backend.decoder = decoders.Metaspace()
    assert CachedByteLevelDecode.for_tokenizer(backend) is None
    # A byte table off by one place: both probes notice, so neither path is used.
    table = cached_bpe._byte_chars()
    monkeypatch.setattr(cached_bpe, "_byte_chars", lambda: table[1:] + table[:1])
    original = smollm_tokenizer.backend_tokenizer
    assert CachedByteLevelDecode.for_tokenizer(original) is None
    assert CachedByteLevelBPE.for_tokenizer(original) is None


def test_the_encoder_is_probed_once_per_tokenizer_until_a_token_is_added(smollm_tokenizer, monkeypatch):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm_tokenizer.name_or_path)
    probes = []
    probe = CachedByteLevelBPE.for_tokenizer
    monkeypatch.setattr(CachedByteLevelBPE, "for_tokenizer", lambda backend: probes.append(1) or probe(backend))
    for text in ["one", "two words", "<|im_start|>three"] * 20:
        plain_ids(tok, text)
    assert len(probes) == 1
    tok.add_tokens(["<sead_later>"])
    assert plain_ids(tok, "x<sead_later>") == tok("x<sead_later>", add_special_tokens=False)["input_ids"]
    plain_ids(tok, "again")
    assert len(probes) == 2
