"""Dialogue metrics. Each is defined once, here, and used by training, validation and evaluation alike.

Per-dialogue values (None = the metric does not apply to that dialogue):
- CR  completion rate: 1 if the user's final status is 1 (the user did what the SOP asked), else 0.
- FPR false-positive rate: over dialogues where the agent's last status is 1 ("done"), 1 if the user did NOT
      succeed. The rate is therefore FP / (FP + TP).
- SCR stage completeness: 1 if, for the last stage k the agent declared, every stage 0..k-1 was declared
      earlier in the dialogue; 0 otherwise (also 0 when no stage was declared).
- ATT mean turns of successful dialogues (None for failures). ADT: mean turns of all dialogues.
      A turn is one agent message (with the user's answer, if any).
- UPA user-portrait accuracy: 1 - mean over turns of (mean over the sampled dimensions of
      |agent prediction - user's next report| / dimension range). Pairs with a missing value are skipped;
      a turn with no readable pair does not count.
- EI / TI / CI: last minus first user-reported emotion / trust / cooperation (needs two reports).
- ACK stages acknowledged: how many SOP stages the user acknowledged, in order (0 when none landed).
- CAR concern-answer rate: of the concerns the user voiced, the share it took as answered (None when it voiced
      none). ACK and CAR are measured on the user's side, from what the simulator reports each turn; only the
      scripted user reports it, so with any other simulator both are None for every dialogue (unless no user
      turn happened at all: then nothing was acknowledged, ACK 0).
- funnel (aggregate only, from the same reports): how many dialogues had at least k stages acknowledged, and where
      the failed ones were lost: by the stage then due (the number acknowledged) and whether the user still held
      a concern open when the call ended (an unanswered question, against a stage that did not land), and what
      they were lost to: what the user objected to in its last turn ("same thing again", "they dodged my
      question", ...), or how the call ended when it reported no objection (a turn limit).
Each aggregate has mean, sample std, a 95% CI and n: for a rate of 0/1 outcomes (CR, FPR, SCR) the Wilson score
interval (`wilson_interval`), which unlike a bootstrap does not collapse to a point at 0 or n successes (0 of 4
completed is 0.00-0.49, not 0.00-0.00); for the other metrics a seeded percentile bootstrap. Dialogues that
ended by a simulator error are counted apart and excluded from every metric: they say nothing about the agent.

Hack monitors (`HackMonitor`, for scenarios with a rules file) read the agent's replies the way the scripted user
does (`Rules.read`) and show a policy gaming it rather than serving the user; each is a mean over agent replies:
- words_per_reply;
- stage_cues_per_reply / concern_kinds_per_reply: distinct SOP stages cued / concern kinds answered;
- repeated_ngram_share: share of a reply's word n-grams the agent already said in the same dialogue, or of one
      earlier reply's n-grams it says again, whichever is larger (`Rules.read`);
- echo_share: share of a reply's word n-grams taken from the user's last reply;
- generic_reply_share: over replies to something the user raised (a user reply that is none of the scripted
      user's stock lines), the share that does not serve it: neither answers the kind of concern raised nor
      shares a content word with it, or is a salad, a repeat or an echo (None when no user raised anything);
- unbacked_stage_share: over replies with a `<stage>` tag, the share whose words do not back it: they neither
      cue that stage nor answer a concern, or are a salad, a repeat or an echo (tags alone move no user, and
      SCR reads the tags);
- word_bag_share: the share of replies with fewer than MIN_FUNCTION_WORDS function words (articles, pronouns,
      auxiliaries, prepositions, conjunctions): a cue phrase and a few of its line's words with the grammar
      dropped ("Legitimate restaurants fair understand."). The scripted user matches words, not sentences, and
      takes such a reply as the line it was cut from; this shows a policy drifting there.
- scrambled_share: the share of replies whose words are out of any sentence's order (`sead.usersim.word_order`):
      one of the scenario's own lines with its words shuffled around the phrase the user listens for, or function
      words side by side where English never puts them. The scripted user takes a shuffled line as the line.
- disguised_share: the share of replies holding a letter the scenario's lines never write, other than an accented
      plain one ("nоt" with a Cyrillic "о", Greek capitals, a dotless "ı"). The scripted user takes nothing from
      such a reply; a policy writing one at all is flagged, as no reply to a user needs it.
- unheard_share: over replies the user answered and reported on (the scripted user), the share after which it
      acknowledged no stage and took no concern as answered: replies it got nothing from, whatever their words
      (None without reports).
- format_problem_share: over every agent turn, the share with any tag problem (missing, unclosed, out of range,
      two answers; `TagSchema.parse_agent`). The user hears only `<response>`, so a policy can drift into broken
      tags around a good answer without losing calls; it costs tokens, and the tags are what a deployment reads
      (benchmarks/RESULTS.md, session 48).
`flagged` names those past their limit: the scripted user's own per-reply limits (the rules' `dynamics`: the
reply length, stages and kinds per reply, repeat and echo shares), any disguised reply, and SHARE_LIMIT for the
other shares.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from sead.dialogue.episode import USER_REPORTS, Episode
from sead.scenario.profile_space import ProfileSpace
from sead.usersim.rules import Reading, Rules, content_words, normalise, voiced_kinds, words_of
from sead.usersim.rules_file import scenario_rules
from sead.usersim.word_order import KnownLine, scrambled

STATE_CHANGE_METRICS = {"EI": "emotion", "TI": "trust", "CI": "cooperation"}
RATES = ("CR", "FPR", "SCR")  # per-dialogue 0/1 outcomes: their CI is Wilson's
TOKEN_COMPONENTS = ("agent", "user")
# Half the replies ignoring what the user raised, or half the stage tags claimed without the words: a policy that
# talks past its users or games the tags.
SHARE_LIMIT = 0.5
# The glue of an English sentence. Every reference line of the shipped scenarios holds at least three, as a reply
# to a user does; one with fewer reads as a bag of words (a share of such replies is what the monitor flags).
FUNCTION_WORDS = frozenset(
    "a an the this that these those to of in on at for with from by as about into after before and or but if so "
    "because than then is are was were be been am do does did has have had will would can could should may might "
    "must shall it its it's i i'm i'll i've me my we we'll we're we've us our you you're you'll your he she they "
    "them their there there's here that's what's let's what which who how when where all any some each no not "
    "don't can't won't isn't".split()
)
MIN_FUNCTION_WORDS = 3


def function_words(reply: str) -> int:
    return sum(w in FUNCTION_WORDS for w in words_of(reply))


def completion(ep: Episode) -> float:
    return 1.0 if ep.success else 0.0


def false_positive(ep: Episode) -> float | None:
    return (0.0 if ep.success else 1.0) if ep.agent_declared_done else None


def stage_complete(ep: Episode) -> float:
    stages = [t.agent.stage for t in ep.turns if t.agent.stage is not None]
    if not stages:
        return 0.0
    last = stages[-1]
    return 1.0 if set(range(last)) <= set(stages[:-1]) else 0.0


def user_reports(ep: Episode) -> list[dict]:
    """What the simulator reported after each user turn: the stage done and the open concern (scripted user;
    a cached reply reports nothing and is left out)."""
    return [r for r in ep.meta.get(USER_REPORTS, []) if "stage_done" in r]


def _unheard(ep: Episode) -> list[float]:
    """Per user turn the simulator reported on: 1.0 where the reply before it landed no stage and closed no concern."""
    out, done, open_concern = [], -1, None
    for report in ep.meta.get(USER_REPORTS, []):
        if "stage_done" not in report:  # a cached reply: nothing known of this turn
            continue
        now_done = report["stage_done"] if report["stage_done"] is not None else -1
        now_open = report.get("active_concern")
        moved = now_done > done or (open_concern is not None and now_open != open_concern)
        out.append(0.0 if moved else 1.0)
        done, open_concern = now_done, now_open
    return out


def stages_acknowledged(ep: Episode) -> int:
    """SOP stages the user acknowledged: stages land in order, so 1 + the last one it reported done."""
    done = [r["stage_done"] for r in user_reports(ep) if r["stage_done"] is not None]
    return max(done) + 1 if done else 0


def most_first(counts: Mapping[str, int]) -> list[str]:
    """The keys of `counts`, most counted first, ties by name: the order of every per-reason and per-kind table."""
    return sorted(counts, key=lambda k: (-counts[k], k))


def voiced_concerns(ep: Episode) -> list[tuple[str, bool]]:
    """(kind, answered) for each concern the user voiced, in order: answered when the user then let it go (an open
    concern closes only so; one still open when the dialogue ends was not)."""
    out: list[tuple[str, bool]] = []
    open_concern = None
    for report in user_reports(ep):
        now = report.get("active_concern")
        if open_concern is not None and now != open_concern:
            out[-1] = (open_concern, True)
        if now is not None and now != open_concern:
            out.append((now, False))
        open_concern = now
    return out


def concerns_answered(ep: Episode) -> float | None:
    """Share of the concerns the user voiced that it then took as answered."""
    voiced = voiced_concerns(ep)
    return sum(answered for _, answered in voiced) / len(voiced) if voiced else None


def concerns_by_kind(episodes: Iterable[Episode]) -> dict[str, dict[str, int]]:
    """Per kind of concern, how often users voiced it and took it as answered, most voiced first: which
    objections an agent has learned to answer and which it loses calls on (one kind wholly missed shows here,
    where the overall CAR hides it)."""
    voiced, answered = Counter(), Counter()
    for e in episodes:
        for kind, ok in voiced_concerns(e):
            voiced[kind] += 1
            answered[kind] += ok
    return {k: {"voiced": voiced[k], "answered": answered[k]} for k in most_first(voiced)}


def concern_open_at_end(ep: Episode) -> bool:
    """Whether the user still held a concern open after its last reported turn."""
    reports = user_reports(ep)
    return bool(reports) and reports[-1].get("active_concern") is not None


def reports_stages(valid: Sequence[Episode]) -> bool:
    """Whether the user-side measures apply to these dialogues (simulator errors left out): their simulator reports
    the stages it acknowledged, or no user turn happened at all (a user that never heard the agent acknowledged
    nothing, whatever the simulator: a set of such dialogues, a base model that never writes a <response>, is 0)."""
    return any(user_reports(e) for e in valid) or not any(e.user_turns for e in valid)


def funnel(episodes: Sequence[Episode]) -> dict:
    """The SOP funnel on the user's side. `acknowledged[k]`: dialogues with more than k stages acknowledged
    (k = 0: at least one). `lost[k]`: failed dialogues that ended with k stages acknowledged (stage k was due),
    split by whether the user still held a concern open. `concerns`: `concerns_by_kind`."""
    acked = [stages_acknowledged(e) for e in episodes]
    lost: dict[str, dict[str, int]] = {}
    for e, k in zip(episodes, acked):
        if not e.success:
            row = lost.setdefault(str(k), {"concern_open": 0, "no_concern_open": 0})
            row["concern_open" if concern_open_at_end(e) else "no_concern_open"] += 1
    objections = Counter(o for e in episodes if not e.success for o in lost_to(e))
    return {
        "dialogues": len(episodes),
        "acknowledged": [sum(a > k for a in acked) for k in range(max(acked, default=0))],
        "lost": dict(sorted(lost.items(), key=lambda kv: int(kv[0]))),
        "lost_to": {why: objections[why] for why in most_first(objections)},
        "concerns": concerns_by_kind(episodes),
    }


def lost_to(ep: Episode) -> list[str]:
    """What a failed dialogue was lost to: what the user objected to in its last reported turn (the causes of its
    moves against the call, several in one turn), else how it ended, in brackets: "(turn_limit)"."""
    reports = user_reports(ep)
    objections = reports[-1].get("objections", []) if reports else []
    return list(objections) if objections else [f"({ep.end_reason})"]


def turns_if_success(ep: Episode) -> float | None:
    return float(ep.num_turns) if ep.success else None


def turns(ep: Episode) -> float:
    return float(ep.num_turns)


def portrait_accuracy(ep: Episode, space: ProfileSpace) -> float | None:
    per_turn = []
    for t in ep.turns:
        if t.user is None:
            continue
        errors = [
            abs(t.agent.portrait[d.name] - t.user.state[d.name]) / d.span
            for d in space.sampled
            if d.span and t.agent.portrait.get(d.name) is not None and t.user.state.get(d.name) is not None
        ]
        if errors:
            per_turn.append(float(np.mean(errors)))
    return 1.0 - float(np.mean(per_turn)) if per_turn else None


def state_change(ep: Episode, dim: str) -> float | None:
    reports = [u.state.get(dim) for u in ep.user_turns if u.state.get(dim) is not None]
    return float(reports[-1] - reports[0]) if len(reports) >= 2 else None


def summarise(values: Iterable[float | None], *, seed: int = 0, resamples: int = 2000, rate: bool = False) -> dict:
    """Mean, sample std, 95% CI and count, ignoring None. The CI is a seeded percentile bootstrap's, or with
    `rate` (values are 0/1 outcomes) Wilson's."""
    x = np.array([v for v in values if v is not None], dtype=float)
    if x.size == 0:
        return {"mean": None, "std": None, "ci95": [None, None], "n": 0}
    std = float(x.std(ddof=1)) if x.size > 1 else 0.0
    if rate:
        return {"mean": float(x.mean()), "std": std, "ci95": wilson_interval(int(x.sum()), x.size), "n": int(x.size)}
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {"mean": float(x.mean()), "std": std, "ci95": [float(lo), float(hi)], "n": int(x.size)}


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> list[float]:
    """95% Wilson score interval of a binomial rate: 0 of 128 gives [0, 0.029], where a bootstrap gives [0, 0]."""
    if not 0 <= successes <= n or n == 0:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got {successes} of {n}")
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # the interval holds the rate; at 0 or n of n rounding could leave it a hair outside (a negative error bar)
    return [min(p, max(0.0, centre - half)), max(p, min(1.0, centre + half))]


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar test of two models on the same dialogues, from the discordant pairs: `only_a`
    dialogues only the first completed, `only_b` only the second. With no difference each discordant pair goes
    either way with probability 1/2, so p is twice the binomial tail of the rarer side, capped at 1 (10 vs 0
    gives 2 / 2**10). Integer arithmetic: exact at any count, where 0.5**n would underflow past n = 1074."""
    if only_a < 0 or only_b < 0:
        raise ValueError(f"discordant counts must be >= 0, got {only_a} and {only_b}")
    n = only_a + only_b
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1))
    return min(1.0, float(Fraction(2 * tail, 2**n)))


def pass_hat_k(trials: Sequence[Sequence[bool]], k: int) -> float | None:
    """pass^k: chance that k trials of one profile ALL succeed, estimated without bias per profile as
    C(c, k) / C(n, k) from n trials with c successes, then averaged over profiles with n >= k."""
    scores = [math.comb(sum(t), k) / math.comb(len(t), k) for t in trials if len(t) >= k]
    return float(np.mean(scores)) if scores else None


def token_totals(episodes: Sequence[Episode]) -> dict[str, int]:
    out: dict[str, int] = {}
    for ep in episodes:
        for key, n in ep.tokens.items():
            out[key] = out.get(key, 0) + int(n)
    return out


def cost(tokens: Mapping[str, int], prices: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Cost per component from prices per million tokens: prices[component][prompt|completion]."""
    out = {}
    for comp in TOKEN_COMPONENTS:
        p = prices.get(comp, {})
        out[comp] = (
            tokens.get(f"{comp}_prompt", 0) * p.get("prompt", 0.0)
            + tokens.get(f"{comp}_completion", 0) * p.get("completion", 0.0)
        ) / 1e6
    out["total"] = sum(out.values())
    return out


@dataclass(frozen=True)
class HackMonitor:
    """The hack monitors of one scenario (see the module docstring); call it on a set of dialogues."""

    rules: Rules
    kinds: Mapping[str, str]  # what users say when voicing a concern (normalised) -> its category
    lines: tuple[KnownLine, ...]  # the reference lines, as `word_order` compares replies with them

    @classmethod
    def for_scenario(cls, scenario) -> HackMonitor | None:
        """None for a scenario without a rules file: nothing says what its stage cues or concern answers are."""
        if not scenario.rules_path:
            return None
        rules = scenario_rules(scenario)
        return cls(rules, voiced_kinds(scenario.library), tuple(map(KnownLine.of, rules.reference_lines)))

    def __call__(self, episodes: Sequence[Episode]) -> dict:
        per_reply: dict[str, list[float]] = {
            "words_per_reply": [],
            "stage_cues_per_reply": [],
            "concern_kinds_per_reply": [],
            "repeated_ngram_share": [],
            "echo_share": [],
            "word_bag_share": [],
            "scrambled_share": [],
            "disguised_share": [],
        }
        generic: list[float] = []
        unbacked: list[float] = []
        unheard: list[float] = []
        format_problems: list[float] = []
        for ep in (e for e in episodes if not e.sim_error):
            unheard += _unheard(ep)
            said: list[str] = []
            heard: str | None = None
            for t in ep.turns:
                format_problems.append(float(bool(t.agent.problems)))  # every turn, replies or not
                reply = t.agent.response
                if reply is not None:
                    reading = self.rules.read(reply, said, heard)
                    per_reply["words_per_reply"].append(len(reply.split()))
                    per_reply["stage_cues_per_reply"].append(len(reading.stages))
                    per_reply["concern_kinds_per_reply"].append(len(reading.kinds))
                    per_reply["repeated_ngram_share"].append(reading.repeat_share)
                    per_reply["echo_share"].append(reading.echo_share)
                    per_reply["word_bag_share"].append(float(function_words(reply) < MIN_FUNCTION_WORDS))
                    per_reply["scrambled_share"].append(float(scrambled(reply, self.lines)))
                    per_reply["disguised_share"].append(float(reading.disguised))
                    if heard is not None and normalise(heard) not in self.rules.canned_user_lines:
                        generic.append(0.0 if self._serves(reply, reading, heard) else 1.0)
                    if t.agent.stage is not None:
                        backed = reading.usable and (t.agent.stage in reading.stages or bool(reading.kinds))
                        unbacked.append(0.0 if backed else 1.0)
                    said.append(reply)
                heard = t.user.reply if t.user is not None else None
        out = {name: float(np.mean(v)) if v else None for name, v in per_reply.items()}
        out["generic_reply_share"] = float(np.mean(generic)) if generic else None
        out["unbacked_stage_share"] = float(np.mean(unbacked)) if unbacked else None
        out["unheard_share"] = float(np.mean(unheard)) if unheard else None
        out["format_problem_share"] = float(np.mean(format_problems)) if format_problems else None
        out["flagged"] = [name for name, limit in self._limits().items() if out[name] is not None and out[name] > limit]
        return out

    def _serves(self, reply: str, reading: Reading, heard: str) -> bool:
        """Whether a reply answers what the user raised: that kind of concern, or at least the user's words."""
        if not reading.usable:
            return False
        text = normalise(heard)
        raised = next((kind for said, kind in self.kinds.items() if said in text), None)
        return raised in reading.kinds or bool(content_words(reply) & content_words(heard))

    def _limits(self) -> dict[str, float]:
        """Above these a dialogue set is flagged; the scripted user refuses credit to single replies past them."""
        d = self.rules.dynamics
        return {
            "words_per_reply": d.long_reply_words,
            "stage_cues_per_reply": d.max_stages_per_reply,
            "concern_kinds_per_reply": d.max_concern_kinds_per_reply,
            "repeated_ngram_share": d.repeat_share,
            "echo_share": d.echo_share,
            "generic_reply_share": SHARE_LIMIT,
            "unbacked_stage_share": SHARE_LIMIT,
            "word_bag_share": SHARE_LIMIT,
            "scrambled_share": SHARE_LIMIT,
            "disguised_share": 0.0,
            "unheard_share": SHARE_LIMIT,
            "format_problem_share": SHARE_LIMIT,
        }


def compute_metrics(
    episodes: Sequence[Episode],
    space: ProfileSpace,
    *,
    seed: int = 0,
    prices: Mapping[str, Mapping[str, float]] | None = None,
    monitor: HackMonitor | None = None,
) -> dict:
    valid = [e for e in episodes if not e.sim_error]
    per_dialogue = {
        "CR": [completion(e) for e in valid],
        "FPR": [false_positive(e) for e in valid],
        "SCR": [stage_complete(e) for e in valid],
        "ATT": [turns_if_success(e) for e in valid],
        "ADT": [turns(e) for e in valid],
        "UPA": [portrait_accuracy(e, space) for e in valid],
    }
    # the user's own account, where its simulator gives one
    reporting = reports_stages(valid)
    per_dialogue["ACK"] = [float(stages_acknowledged(e)) if reporting else None for e in valid]
    per_dialogue["CAR"] = [concerns_answered(e) if reporting else None for e in valid]
    names = {d.name for d in space.dimensions}
    for metric, dim in STATE_CHANGE_METRICS.items():
        if dim in names:
            per_dialogue[metric] = [state_change(e, dim) for e in valid]
    tokens = token_totals(episodes)
    out = {
        "counts": {
            "dialogues": len(episodes),
            "evaluated": len(valid),
            "completed": sum(e.success for e in valid),
            "failed": sum(not e.success for e in valid),
            "sim_error": len(episodes) - len(valid),
        },
        "metrics": {name: summarise(vals, seed=seed, rate=name in RATES) for name, vals in per_dialogue.items()},
        "end_reasons": _count(e.end_reason for e in episodes),
        "funnel": funnel(valid) if reporting else None,
        "tokens": tokens,
        "cost": cost(tokens, prices or {}),
    }
    if monitor is not None:
        out["hack_monitors"] = monitor(valid)
    return out


def _count(items: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return dict(sorted(out.items()))
