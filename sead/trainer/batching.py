"""How an update splits its sequences: the prompt all of them share (run once), micro-batches of similar length
(a branched group's members kept together where that saves tokens), and mini-batches of whole dialogues."""

from __future__ import annotations

from sead.policy.hf import common_prefix_length
from sead.trainer.estimators import Sequence

MIN_SHARED_PREFIX = 16  # below this, a separate prefix pass costs more than it saves


def first_agent_position(s: Sequence) -> int:
    return int(s.mask.nonzero()[0, 0]) if s.mask.any() else len(s.ids)


def shared_prompt_length(seqs: list[Sequence], min_prefix: int = MIN_SHARED_PREFIX) -> int:
    """Leading tokens every sequence shares (the SOP prompt; a branched group's replayed context), stopping
    before the position that predicts the first agent token of any of them, so every trained prediction is computed
    in the rows' own pass. 0 when short."""
    first_agent = min(first_agent_position(s) for s in seqs)
    k = common_prefix_length([s.ids for s in seqs], first_agent - 1)
    return k if k >= min_prefix else 0


def micro_batches(seqs: list[Sequence], size: int) -> list[list[Sequence]]:
    """Micro-batches of at most `size` sequences of similar length (little padding). Sequences with one context
    up to their first agent token (the members of a branched group) stay together where running that context
    once for all of them (`masked_logprobs`) saves more tokens than padding them to one length costs; a group of
    whole dialogues, which share only an opening, goes by length."""
    if not seqs:
        return []
    anyway = shared_prompt_length(seqs, min_prefix=0)  # what every micro-batch shares (the SOP prompt)
    families: dict[bytes, list[Sequence]] = {}
    for s in sorted(seqs, key=lambda s: len(s.ids)):
        families.setdefault(s.ids[: first_agent_position(s)].numpy().tobytes(), []).append(s)
    together, loose = [], []
    for family in families.values():
        context = first_agent_position(family[0]) - anyway
        for chunk in (family[i : i + size] for i in range(0, len(family), size)):
            padding = sum(len(chunk[-1].ids) - len(s.ids) for s in chunk)  # sorted: the last is the longest
            if padding < (len(chunk) - 1) * context:
                together.append(chunk)
            else:
                loose += chunk
    loose.sort(key=lambda s: len(s.ids))
    return together + [loose[i : i + size] for i in range(0, len(loose), size)]


def mini_batches(seqs: list[Sequence], parts: int) -> list[list[Sequence]]:
    """`seqs` in up to `parts` consecutive parts of about equal tokens, each dialogue's segments (one `episode`)
    in one part, so that each optimiser step sees whole dialogues and branched groups (consecutive) stay
    mostly together."""
    episodes: dict[int, list[Sequence]] = {}
    for s in seqs:
        episodes.setdefault(s.episode, []).append(s)
    total = sum(len(s.ids) for s in seqs)
    out: list[list[Sequence]] = [[]]
    done = 0
    for segments in episodes.values():
        size = sum(len(s.ids) for s in segments)
        if out[-1] and len(out) < parts and done + size / 2 > total * len(out) / parts:  # nearer the next part
            out.append([])
        out[-1] += segments
        done += size
    return out
