"""Branched GRPO groups: several continuations of one dialogue prefix, so a group's rewards differ only by what the
agent did after the cut, and its advantages credit those turns alone.

A full-dialogue group spends most of its tokens on openings the policy already handles, and where the policy fails
late, all of its members may fail alike (no gradient). A branched group starts where one of the step's own failed
dialogues went wrong: it replays that dialogue's first k agent turns (context, mask 0; the user answers from the
source dialogue's seed, so with a deterministic simulator the prefix is the same dialogue) and lets the agent
continue `size` times with its own sampling seeds. The controller never sees these dialogues: they do not start
where a user starts.

Where to cut (`at`): `uniform` over the source's turns, or `setback`: at a turn after which the user lost ground
(a state dimension it reports fell, or it hung up), read from the user's own tags, so any simulator that reports
its state serves. A setback cut replays exactly the turn that went wrong, where the continuations' choices differ
the most in what they earn. `concern`: at a turn that replies to a concern the user voiced and still holds open (the
simulator's `active_concern` report): which answer the agent picks there decides what it earns. `unanswered`: at
a turn whose reply left the user's concern open (another kind's answer, or the same line again), the decision a
near-deterministic policy gets wrong; in a dialogue with none, at a concern turn as above.

What to cut (`source`): the step's own dialogues, or (`reference`) the scripted reference agent's dialogues with the
same users and draws. A policy that loses most users early never reaches their later concerns in its own
dialogues; the reference agent's prefixes do, and they are the kind of dialogue a warm-up imitated.
"""

from __future__ import annotations

import random
from collections import Counter

from sead.dialogue.batch import EpisodeJob
from sead.dialogue.episode import USER_REPORTS, Episode
from sead.dialogue.seeds import group_agent_seed
from sead.trainer.schema import BranchConfig


def replayed(source: Episode, kept: int) -> tuple[str, ...]:
    """The agent texts a branch cut after `kept` turns replays: the prefix, and with the source's user, its state."""
    return tuple(t.agent.text for t in source.turns[:kept])


def setbacks(episode: Episode) -> list[int]:
    """Agent turns (0-based) after which the user reported less of a profile dimension than before, or hung up."""
    before, out = episode.profile.values, []
    for k, turn in enumerate(episode.turns):
        if turn.user is None:
            continue
        now = {n: v for n, v in turn.user.state.items() if v is not None and n in before}
        if turn.user.status < 0 or any(v < before[n] for n, v in now.items()):
            out.append(k)
        before = {**before, **now}
    return out


def open_concerns(episode: Episode) -> list[tuple[int, str | None]]:
    """(agent turn, concern the user reported open after its reply) for each turn the user answered: the simulator
    sends one report per user turn, in order, so turns answered by a format-error message have none."""
    reports = iter(episode.meta.get(USER_REPORTS, []))
    answered = [k for k, turn in enumerate(episode.turns) if turn.user is not None]
    return [(k, next(reports, {}).get("active_concern")) for k in answered]


def concern_turns(episode: Episode) -> list[int]:
    """Agent turns (0-based) that reply to a user turn after which the user reported a concern still open."""
    return [k + 1 for k, kind in open_concerns(episode) if kind is not None]


def unanswered_turns(episode: Episode) -> list[int]:
    """Agent turns (0-based) that replied to an open concern and left it open: the user's report after the reply
    still names the concern it named before it (a dodge, another kind's answer, or the same line said again)."""
    reported = open_concerns(episode)
    return [k for (_, before), (k, after) in zip(reported, reported[1:]) if before is not None and after == before]


# branch.at -> the turns it cuts at; `unanswered` falls back to the dialogue's concern turns where it left none open
MARKED_TURNS = {
    "setback": setbacks,
    "concern": concern_turns,
    "unanswered": lambda e: unanswered_turns(e) or concern_turns(e),
}


def branch_points(
    episodes: list[Episode], groups: int, rng: random.Random, at: str = "uniform", per_dialogue: int = 1
) -> list[tuple[Episode, int]]:
    """(source dialogue, agent turns replayed) for up to `groups` groups: failed dialogues first, then won ones, each
    shuffled, spread over the step's profiles (a profile gets a second group only once every other one has had one) and
    never the same state twice. The cut lies after the first turn and up to the last, so at least one of the source's
    turns is replayed and at least its last one is played again: uniform there, or (`at="setback"` / `"concern"` /
    `"unanswered"`) uniform over that range's marked turns, where it has any. A dialogue gives up to `per_dialogue`
    cuts, each at another turn. A dialogue that ended at its first turn is cut before it: its group plays the opening
    afresh. Without that, no group would ever train the opening where groups of whole dialogues are single rollouts, and
    an opening that drifts (a turn of several stacked `<response>` blocks, lost as malformed) spreads unchecked until no
    group differs at all (measured 2026-11-28).

    Why spread: the rollouts of one profile often say the same lines (one user per group, a near-deterministic
    policy), so cutting several of them repeats one state; n groups of one state weigh it n times in the update,
    enough to teach its answer for every question."""
    usable = [e for e in episodes if not e.sim_error and e.num_turns >= 1]
    failed, won = [e for e in usable if not e.success], [e for e in usable if e.success]
    rng.shuffle(failed)
    rng.shuffle(won)

    def candidates(e: Episode) -> list[int]:
        if e.num_turns == 1:
            return [0]
        marked = [k for k in MARKED_TURNS[at](e) if 1 <= k <= e.num_turns - 1] if at in MARKED_TURNS else []
        return marked or list(range(1, e.num_turns))

    pool = failed + won
    left = {id(e): candidates(e) for e in pool}  # turns a source may still be cut at
    chosen, states, uses, tries = [], set(), Counter(), Counter()
    while pool and len(chosen) < groups:
        source = min(pool, key=lambda e: uses[e.profile])  # the first of the least-used profiles
        turns = left[id(source)]
        kept = turns.pop(rng.randrange(len(turns)))
        tries[id(source)] += 1
        if tries[id(source)] == per_dialogue or not turns:
            pool.remove(source)
        state = (source.profile, source.meta["seed"], replayed(source, kept))
        if state not in states:
            states.add(state)
            uses[source.profile] += 1
            chosen.append((source, kept))
    return chosen


def branch_jobs(
    episodes: list[Episode], cfg: BranchConfig, *, run_seed: int, step: int, first_group: int
) -> list[EpisodeJob]:
    """The step's branched dialogues: `cfg.size` continuations of each chosen prefix, one GRPO group per prefix
    (numbered from `first_group`, after the step's full-dialogue groups)."""
    rng = random.Random(f"branch/{run_seed}/{step}")
    jobs = []
    for g, (source, kept) in enumerate(branch_points(episodes, cfg.groups, rng, cfg.at, cfg.per_dialogue)):
        group = first_group + g
        prefix = replayed(source, kept)
        jobs += [
            EpisodeJob(
                source.profile,
                seed=source.meta["seed"],
                episode_id=f"s{step}-b{g}-r{b}",
                group=group,
                prefix=prefix,
                agent_seed=group_agent_seed(run_seed, step, group, b),
                branched_from=source.meta["episode_id"],
                horizon=cfg.turns or None,
            )
            for b in range(cfg.size)
        ]
    return jobs
