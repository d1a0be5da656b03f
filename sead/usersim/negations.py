"""Words, turns of phrase and marks that turn a statement around: a reply holding one that none of its stage's or
concern's own lines use does not say what those lines say (`Rules.read`, `dynamics.negation_check`)."""

from __future__ import annotations

import re

from sead.usersim.visible_text import WORD, normalise

# Words that turn a statement around. A reply holding one that none of its stage's or concern's own lines use
# does not say what those lines say; contractions are listed with and without the apostrophe.
NEGATIONS = frozenset(
    "not no never nobody nothing none neither nor nowhere false untrue lie lies lying wrong nonsense deny denies "
    "myth myths kidding joke joking fake hoax fabrication fabricated rumour rumor pretend reverse opposite "
    "cannot can't cant won't wont don't dont doesn't doesnt didn't didnt isn't isnt aren't arent wasn't wasnt "
    "weren't werent shouldn't shouldnt wouldn't wouldnt couldn't couldnt haven't havent hasn't hasnt "
    "ain't aint mustn't mustnt needn't neednt shan't shant nope nah hardly scarcely unlikely "
    # ... or disown it: the speaker doubts it, reports it as someone else's claim, or calls it made up
    "incorrect inaccurate misleading misstatement doubt doubts doubtful dubious allegedly supposedly reportedly "
    "fiction fictional rubbish scam scams scammer scammers fraud fraudulent "
    # (their other forms: a list of words, not of stems, so each form a speaker may use is written out)
    "lied liar liars denied denying denial falsehood falsehoods falsely fictitious mythical pretended pretending "
    "pretends joked jokes bogus psych sike jk fib fibs fibbing rumours rumors hearsay legend fantasy fairy "
    "baloney hogwash poppycock balderdash untruthful rarely "
    # ... or hedge it into a question the speaker will not answer: a user takes nothing from "maybe ...? who knows"
    "unsure uncertain maybe perhaps wonder "
    # ... or make it a what-if: "suppose ...", "imagine ..." asks the user to picture a line, not to take it;
    # or ask it without a question mark: "tell me whether ..."
    "suppose supposing hypothetically hypothetical imagine theoretically whether "
    # ... or call it a trick in one word ("All a con.", "Prank!")
    "con conned prank pranks pranked pranking bluff bluffs bluffed bluffing troll trolled trolling gotcha "
    "erroneous erroneously "
    # ... or say "not" / "false" / "a lie" in another language written in Latin letters (accents read away)
    "non pas nein nicht falsch faux falso falsa mentira mentiras bugia nao niet".split()
)
# Turns of phrase that do the same with words that are harmless alone (sarcasm, taking a line back); matched as
# whole words with anything but letters between them ("Yeah, right." as much as "yeah right").
NEGATING_PHRASES = (
    "yeah right",
    "as if",
    "in your dreams",
    "dream on",
    "who knows",
    "who can say",
    "scratch that",
    "strike that",
    "some say",
    "some people say",
    "take it back",
    "take that back",
    "take this back",
    "forget i said",
    "april fools",
    "what if",
    "is it true",
    "would you believe",
    "could it be",
    "in theory",
    "made up",
    "so they say",
    "once upon a time",
    "alternate universe",
    "parallel world",
    "make believe",
    "zero chance",
    "fat chance",
    "few would",
    "like to know if",
    "tell me if",
    "let me know if",
)
# ... and marks that do it without words: "/s" after a line (sarcasm), a line struck through as ~~...~~ (or with
# combining strokes, which `normalise` writes as ~~...~~), and the emoji of eye-rolling, lying, winking, joking, a
# clown or crossed fingers, of crosses, thumbs down, "no" signs, hushing, doubt and a cap ("cap": a lie)
_SARCASM_EMOJI = "\U0001f644\U0001f925\U0001f61c\U0001f61d\U0001f61b\U0001f92a\U0001f643"
_SARCASM_EMOJI += "\U0001f60f\U0001f609\U0001f921\U0001f0cf\U0001f91e\U0001f602\U0001f923"
_SARCASM_EMOJI += "\u274c\u274e\u2716\u26d4\U0001f44e\U0001f6ab\U0001f645\U0001f92b\U0001f928\U0001f914\U0001f9e2"
_MARKS = rf"/s\b|~~|[{_SARCASM_EMOJI}]"
_NEGATING = re.compile(r"\b(" + "|".join(r"\W+".join(p.split()) for p in NEGATING_PHRASES) + r")\b|(" + _MARKS + ")")


def negations(text: str) -> frozenset[str]:
    """The negation words and phrases of a text (NEGATIONS, NEGATING_PHRASES), phrases in their listed form."""
    text = normalise(text)
    return negations_in(text, WORD.findall(text))


# Digits written for the letters they look like: "n0t", "l1es", "f4lse", "fa1se" read as the words a person sees.
_DIGITS_AS_LETTERS = (str.maketrans("013457", "oieast"), str.maketrans("013457", "oleast"))


def negations_in(normalised_text: str, words: list[str]) -> frozenset[str]:
    phrases = {" ".join(WORD.findall(said)) or mark for said, mark in _NEGATING.findall(normalised_text)}
    mixed = [w for w in words if not w.isalpha() and any(c.isalpha() for c in w)]  # only words with letters and digits
    read = [*words, *(w.translate(t) for t in _DIGITS_AS_LETTERS for w in mixed)]
    return NEGATIONS.intersection(read).union(phrases)
