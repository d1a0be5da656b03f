"""Byte-level BPE encoding with a cache per word, for the short texts the runner encodes on every turn.

`tokenizers` spends most of an encode call on splitting the text into words (its GPT-2 regex) and on per-call
overhead, not on BPE: about 40 us for a 140-character user turn, a sixth of the runner's CPU per turn with hundreds
of dialogues in flight. Words recur (the tags, the template's glue, common words), so here the split is done by
the `regex` module and each word's ids are looked up, BPE (the tokenizer's own model) running only for new words.

Decoding goes the other way by a table of each token's bytes (`CachedByteLevelDecode`): 2 us for an agent turn
where `tokenizers` takes 13.

Used only for tokenizers of exactly the shape it knows (no normalizer; added tokens matched as they are; a
ByteLevel pre-tokenizer with its GPT-2 regex, or a regex Split followed by ByteLevel; a BPE model without dropout)
and only after a probe shows it gives the tokenizer's own ids on texts chosen to break it. Anything else is
encoded by `tokenizers` as before.
"""

from __future__ import annotations

import json
import random
import re
import weakref

import regex

GPT2_WORDS = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# The same split for ASCII text, where letters, digits and white space are these few characters, in stdlib `re`,
# which runs it 2.4x as fast as `regex` runs the Unicode one: with the words cached, the split is most of an encode
# (measured 2026-11-28).
_WS = "\t\n\x0b\x0c\r "  # Unicode White_Space within ASCII (not the separators \x1c-\x1f that str.isspace takes)
GPT2_WORDS_ASCII = rf"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^{_WS}A-Za-z0-9]+|[{_WS}]+(?![^{_WS}])|[{_WS}]+"
WORDS_KEPT = 100_000  # cached words per tokenizer (a few MB); the cache starts over past this
# Texts the probe encodes both ways: contractions, digits, runs of spaces and newlines before words, tabs, unicode
# letters, marks, emoji, whitespace beyond ASCII, and added tokens next to text; ASCII and other texts, as they are
# split by different patterns.
PROBE_TEXTS = (
    "<|im_start|>user\n<user_reply>Okay, I did that. What now?</user_reply><|im_end|>\n<|im_start|>assistant\n",
    "I'll say it's 12,345.67 -- they've   got    2  spaces\n\n\n  and\ttabs\t\t here ",
    "Ünïcödé naïve café 中文字符 日本語 한국어 Ελληνικά русский العربية עברית हिन्दी",
    "emoji 👍🏽 🇫🇷 e\u0301 \u00a0nbsp \u2003em \u3000ideo \u200bzw \u2028ls \x0bvt \x1cfs \x85nel end",
    "'S 'LL 'Re DON'T can't 's't'",
    "é 'S 'LL 'Re DON'T can't 's't'",  # the same, not ASCII: split by the Unicode pattern
    "<|im_end|><|im_start|>  <|endoftext|>x<|im_start|>\n<|im_end|>",
    "  leading and trailing  \n",
    "1234567890 ½ Ⅻ ٣ 🄀 x²",
)


class CachedByteLevelBPE:
    """`encode(text)` gives the ids of `backend.encode(text, add_special_tokens=False)` for a supported tokenizer."""

    def __init__(self, backend, words: str, added: dict[str, int]):
        self._bpe = backend.model
        self._words = regex.compile(words)
        self._ascii_words = re.compile(GPT2_WORDS_ASCII) if words == GPT2_WORDS else None
        # Added tokens split the text first, longest first where one is a prefix of another (as tokenizers does).
        by_length = sorted(added, key=len, reverse=True)
        self._added = added
        self._split = regex.compile("(" + "|".join(regex.escape(t) for t in by_length) + ")") if added else None
        self._byte_chars = _byte_chars()
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def for_tokenizer(cls, backend) -> CachedByteLevelBPE | None:
        """An encoder for this `tokenizers.Tokenizer`, or None where its shape is not one this class handles or the
        probe finds a text it encodes differently."""
        try:
            # Each part describes itself; the whole tokenizer's JSON (its vocabulary) would take a quarter second.
            pre = json.loads(backend.pre_tokenizer.__getstate__()) if backend.pre_tokenizer is not None else {}
            norm = json.loads(backend.normalizer.__getstate__()) if backend.normalizer is not None else None
            added = backend.get_added_tokens_decoder()
            words = _words_pattern(pre)
            if (
                words is None
                or not _no_normalizer(norm)
                or type(backend.model).__name__ != "BPE"
                or (backend.model.dropout or 0) > 0
                or any(t.lstrip or t.rstrip or t.single_word for t in added.values())
            ):
                return None
            encoder = cls(backend, words, {t.content: i for i, t in added.items()})
            same = all(encoder.encode(t) == backend.encode(t, add_special_tokens=False).ids for t in PROBE_TEXTS)
        except Exception:  # a part that cannot describe itself, a pattern `regex` reads otherwise: not ours
            return None
        return encoder if same else None

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        pieces = self._split.split(text) if self._split is not None else [text]
        for k, piece in enumerate(pieces):
            if k % 2:  # split() puts each added token between the texts around it
                ids.append(self._added[piece])
            elif piece:
                ids += self._encode_words(piece)
        return ids

    def _encode_words(self, text: str) -> list[int]:
        ids: list[int] = []
        cache = self._cache
        words = self._ascii_words if self._ascii_words is not None and text.isascii() else self._words
        for word in words.findall(text):
            known = cache.get(word)
            if known is None:
                if len(cache) >= WORDS_KEPT:
                    cache.clear()
                mapped = "".join(self._byte_chars[b] for b in word.encode("utf-8"))
                known = cache[word] = [t.id for t in self._bpe.tokenize(mapped)]
            ids += known
        return ids


def _words_pattern(pre: dict) -> str | None:
    """The regex that splits text into words, for the pre-tokenizers handled: ByteLevel with its own regex, or a
    Split by a regex (matches kept as words: `Isolated`) followed by a ByteLevel that only maps bytes."""
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    if not steps or any(s.get("type") == "ByteLevel" and s.get("add_prefix_space") for s in steps):
        return None
    if len(steps) == 1 and steps[0].get("type") == "ByteLevel" and steps[0].get("use_regex", True):
        return GPT2_WORDS
    if (
        len(steps) == 2
        and steps[0].get("type") == "Split"
        and "Regex" in (steps[0].get("pattern") or {})
        and steps[0].get("behavior") == "Isolated"
        and not steps[0].get("invert")
        and steps[1].get("type") == "ByteLevel"
        and not steps[1].get("use_regex", True)
    ):
        return steps[0]["pattern"]["Regex"]
    return None


def _no_normalizer(normalizer: dict | None) -> bool:
    return normalizer is None or (normalizer.get("type") == "Sequence" and not normalizer.get("normalizers"))


def _byte_chars() -> list[str]:
    """ByteLevel's printable stand-in for each byte (GPT-2's table): printable Latin-1 bytes stand for themselves,
    the others for the characters from U+0100 on, in order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


DECODE_STEPS = {"ByteFallback", "Fuse", "Replace", "ByteLevel"}  # decoder steps the table reproduces (see below)
BYTE_TOKEN = regex.compile(r"<0x[0-9A-Fa-f]{2}>")  # what ByteFallback turns into a byte
PROBE_SINGLE_IDS, PROBE_SEQUENCES = 2000, 300  # random ids alone, and random id sequences, the decode probe compares


class CachedByteLevelDecode:
    """`decode(ids)` gives `backend.decode(ids, skip_special_tokens=False)` for a byte-level tokenizer: each token
    stands for fixed bytes, joined and read as UTF-8 with U+FFFD for broken sequences, as ByteLevel does.

    Tokens the table cannot stand for (a character outside ByteLevel's alphabet, which makes the fused text fall
    back to its raw characters; a `<0xHH>` byte token) send the whole call to `tokenizers`."""

    def __init__(self, table: list[bytes | None]):
        self._table = table

    @classmethod
    def for_tokenizer(cls, backend) -> CachedByteLevelDecode | None:
        try:
            spec = json.loads(backend.decoder.__getstate__()) if backend.decoder is not None else {}
            steps = spec.get("decoders") if spec.get("type") == "Sequence" else [spec]
            if not steps or steps[-1].get("type") != "ByteLevel" or {s.get("type") for s in steps} - DECODE_STEPS:
                return None
            chars = _byte_chars()
            alphabet = regex.compile("[" + regex.escape("".join(chars)) + "]*")
            to_latin1 = str.maketrans({c: chr(b) for b, c in enumerate(chars)})
            vocab = backend.get_vocab(with_added_tokens=True)
            table: list[bytes | None] = [None] * (max(vocab.values(), default=-1) + 1)
            for token, i in vocab.items():
                if alphabet.fullmatch(token) and not BYTE_TOKEN.fullmatch(token):
                    table[i] = token.translate(to_latin1).encode("latin-1")
            decoder = cls(table)
            rng = random.Random(0)
            size = len(table)
            probes = [[i] for i in backend.get_added_tokens_decoder()]
            probes += [[rng.randrange(size)] for _ in range(PROBE_SINGLE_IDS)]
            probes += [[rng.randrange(size) for _ in range(rng.randint(2, 24))] for _ in range(PROBE_SEQUENCES)]
            same = all(decoder.decode(p) in (None, backend.decode(p, skip_special_tokens=False)) for p in probes)
        except Exception:  # a decoder that cannot describe itself, ids it refuses: not ours
            return None
        return decoder if same else None

    def decode(self, ids: list[int]) -> str | None:
        """The text, or None where a token is not in the table (the caller asks `tokenizers`)."""
        try:
            parts = [self._table[i] for i in ids]
            return b"".join(parts).decode("utf-8", "replace")
        except (TypeError, IndexError):  # a None entry, or an id past the vocabulary
            return None


# transformers tokenizer -> (the first id past its vocabulary, encoder or None), and -> decoder or None; the backend
# itself cannot be weakly referenced. A token added after the probe takes that id, which the encoder would not split
# on, so the encoder is made again: one id lookup per call (counting the added tokens costs 2-400 us, the vocabulary's
# size 7 ms). Not seen: an existing token re-registered as an added one after the first encode. The decoder needs no
# such check: ids added later are past its table, and their calls go to `tokenizers`.
_encoders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_decoders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def cached_encoder(tok, backend) -> CachedByteLevelBPE | None:
    """The encoder for `backend` (`tok.backend_tokenizer`), made and probed once per tokenizer and again after
    tokens are added to it; None where `tokenizers` must do the encoding."""
    try:
        next_id, encoder = _encoders[tok]
    except KeyError:
        next_id = None
    except TypeError:  # not weakly referenceable: probing on every call would cost more than it saves
        return None
    if next_id is None or backend.id_to_token(next_id) is not None:
        encoder = CachedByteLevelBPE.for_tokenizer(backend)
        _encoders[tok] = max(backend.get_vocab(with_added_tokens=True).values(), default=-1) + 1, encoder
    return encoder


def cached_decoder(tok, backend) -> CachedByteLevelDecode | None:
    """The decoder for `backend`, made and probed once per tokenizer; None where `tokenizers` must decode."""
    try:
        return _decoders[tok]
    except KeyError:
        decoder = _decoders[tok] = CachedByteLevelDecode.for_tokenizer(backend)
        return decoder
    except TypeError:
        return None
