"""What a reader sees of a text, as plain text, and the words every check of the scripted user reads in it.

`normalise` is the one view of a reply that every phrase, word and repeat check is made on: what is shown on
screen, lowercased, with placeholder brackets dropped. The helpers below read words, sentences and letters of that
view.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache

_SPACES = re.compile(r"\s+")
# Quote marks and apostrophe look-alikes (a backtick, a modifier letter, a prime) read as the plain ones.
_FOLD = str.maketrans(
    {c: "'" for c in "\u2018\u2019`\u00b4\u02bc\u2032"} | {"\u201c": '"', "\u201d": '"', "[": "", "]": ""}
)

# The words of a normalised text: letters, digits and apostrophes ("it's" is one word).
WORD = re.compile(r"[a-z0-9']+")
# Words this short or this common say nothing about what a user is asking.
_STOPWORDS = frozenset(
    "that this with what your about will have from they them their just there does then "
    "when where which would could should".split()
)

# Sounds a speaker makes between words: the repeat and echo checks compare what is said without them, so a line
# said again with "um, ... like, ..." slipped in is still the line said again.
FILLERS = frozenset("um uh er erm hmm ah oh like well so yeah okay ok basically actually literally".split())


# Combining marks drawn through the letter they sit on (strokes and slashes: canonical combining class 1).
_OVERLAYS = "".join(chr(i) for i in range(0x0300, 0x1D250) if unicodedata.combining(chr(i)) == 1)
# a struck span: struck characters and the spaces between them, so its words and phrases read as they are
_STRUCK = re.compile(f"[^\\s{_OVERLAYS}][{_OVERLAYS}]+(?:\\s*[^\\s{_OVERLAYS}][{_OVERLAYS}]+)*")
# A right-to-left override shows what follows it, up to its pop mark or the line's end, in reverse order.
_OVERRIDDEN = re.compile("\u202e([^\u202c\n]*)\u202c?")
# HTML or XML a reader is not shown: a comment (an unclosed one runs to the end) and a tag, attributes and all.
_MARKUP = re.compile(r"<!--.*?(?:-->|$)|<[!?/]?[a-zA-Z][^<>]*>", re.S)
# Characters drawn as nothing: format and control characters (zero-width spaces and joiners, direction marks and
# overrides, the invisible tag letters) and variation selectors; a joiner or selector beside a symbol builds an emoji.
_VARIATION_SELECTORS = frozenset(map(chr, [*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)]))
_EMOJI_GLUE = frozenset("\u200d\ufe0e\ufe0f")
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # all but tabs and line breaks


def normalise(text: str) -> str:
    """What a reader sees, as plain text: no markup (HTML comments and tags are not shown; what a tag encloses is), a
    right-to-left override's span reversed as it is displayed, letters struck through with combining strokes written
    as ~~struck~~ (which reads as struck out), compatibility-folded (NFKC), accented Latin letters as their plain ones
    ("nöt" is "not" to a reader), without invisible format characters (zero-width spaces and joiners, direction
    marks) or marks left over on their own (an underline combined onto each letter); then lowercase, straight quotes,
    no placeholder brackets, single spaces: the form every match is made on. A word with a zero-width space inside
    looks the same on screen and must read the same."""
    if "<" in text:
        text = _MARKUP.sub(" ", text)
    if not text.isascii():  # ASCII has no format characters and is its own NFKC form: the common case stays cheap
        text = _STRUCK.sub(lambda m: f"~~{m[0]}~~", _OVERRIDDEN.sub(lambda m: m[1][::-1], text))
        kept = (c for c in unicodedata.normalize("NFKC", text) if unicodedata.category(c) not in ("Cf", "Mn"))
        text = "".join(map(_plain_letter, kept))
    return _SPACES.sub(" ", text.translate(_FOLD).lower()).strip()


def hidden_markup(text: str) -> bool:
    """Whether the text holds markup a reader is not shown (an HTML comment, a tag). No reply to a user needs it, and
    a reader cannot tell what it hides or how it shows the rest (a hidden element, struck-through text)."""
    return "<" in text and _MARKUP.search(text) is not None


def unseen(text: str) -> bool:
    """Whether the text carries what a reader is not shown: markup, or characters drawn as nothing (other than the
    joiners and selectors that build an emoji)."""
    if hidden_markup(text):
        return True
    if text.isascii():
        return _ASCII_CONTROL.search(text) is not None
    for i, c in enumerate(text):
        category = unicodedata.category(c)
        if category == "Cc" and not c.isspace():
            return True
        if (category == "Cf" or c in _VARIATION_SELECTORS) and not _builds_emoji(text, i):
            return True
    return False


def _builds_emoji(text: str, i: int) -> bool:
    """Whether text[i] joins or styles a symbol beside it ("👨‍👩", "❤️", the keycap "1️⃣")."""
    beside = text[max(i - 1, 0) : i] + text[i + 1 : i + 2]
    return text[i] in _EMOJI_GLUE and any(
        unicodedata.category(n) in ("So", "Sk", "Me") or n in "#*0123456789" for n in beside
    )


@lru_cache(maxsize=4096)
def _plain_letter(c: str) -> str:
    """An accented Latin letter as its plain one ("ö" -> "o"); any other character as it is (a kana keeps its marks)."""
    base = unicodedata.normalize("NFKD", c)[0]
    return base if c.isalpha() and not c.isascii() and base.isascii() and base.isalpha() else c


@lru_cache(maxsize=4096)  # the phrases of the rules files in use
def phrase_pattern(phrase: str) -> re.Pattern:
    """A phrase as whole words: no letter or digit glued to either end ("legitimate" is not in "illegitimate", nor
    "no deposit" in "casino deposit", nor "pay per click" in "prepay per click")."""
    return re.compile(rf"(?<![a-z0-9]){re.escape(phrase)}(?![a-z0-9])")


def says(normalised_text: str, phrase: str) -> bool:
    """Whether the text holds the (normalised) phrase as whole words."""
    return phrase in normalised_text and phrase_pattern(phrase).search(normalised_text) is not None


def matches_any(normalised_text: str, phrases: Iterable[str]) -> bool:
    return any(says(normalised_text, p) for p in phrases)


_QUESTION_MARKS = frozenset("?\u203d\u2e2e\u2753\u2754")  # ? and the interrobang, reversed and emoji ones
# A sentence ends at a full stop, mark or ellipsis, with whatever closes it (quotes, brackets, emphasis, an emoji),
# before a space: "3.5" stays one number.
_SENTENCE_BREAK = re.compile(r"(?<=[.!\u2026" + "".join(_QUESTION_MARKS) + r"])[^\w\s]*\s+")
_CLOSING = re.compile(r"\W*$")


def stated(normalised_text: str) -> str:
    """The sentences of a text that are not questions: "Is it true that there are no fees?" tells the user nothing
    about fees, nor does "... fees?!", "**... fees?**" or "... fees?..." (a question mark among its closing marks)."""
    return " ".join(
        s for s in _SENTENCE_BREAK.split(normalised_text) if not _QUESTION_MARKS.intersection(_CLOSING.search(s)[0])
    )


def letters_of(normalised_text: str) -> frozenset[str]:
    """The letters of a text that are not plain ASCII letters."""
    return frozenset(c for c in normalised_text if not c.isascii() and c.isalpha())


def disguised(normalised_text: str, known: frozenset[str] = frozenset()) -> bool:
    """Whether the text holds a letter the scenario's own lines never write (`known`: their non-ASCII letters),
    unless it is an accented plain letter ("é"): a Cyrillic "о" inside "nоt", "ΝΟΤ" in Greek capitals, a dotless
    "ı" or a Latin "ɑ" read as the words they look like to a person and as no word to a matcher. A scenario written
    in another script (Chinese) knows its letters."""
    return any(
        c not in known and not unicodedata.normalize("NFKD", c)[0].isascii() for c in letters_of(normalised_text)
    )


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """Word n-grams of a text, filler sounds left out; a text shorter than n words is one gram, so a short reply
    can still repeat."""
    words = [w for w in words_of(text) if w not in FILLERS]
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def words_of(text: str) -> list[str]:
    """The words of a text as every check reads them (normalised; apostrophes kept: "it's" is one word)."""
    return WORD.findall(normalise(text))


def content_words(text: str) -> set[str]:
    return content_of(words_of(text))


def content_of(words: list[str]) -> set[str]:
    return {w for w in words if len(w) >= 4 and w not in _STOPWORDS and not any(c.isdigit() for c in w)}


def share(grams: set, seen: set) -> float:
    """Share of `grams` found in `seen` (0 for an empty text)."""
    return len(grams & seen) / len(grams) if grams else 0.0
