"""Dialogue metrics. Each is defined once, here, and used by training, validation and evaluation alike.

`GLOSSARY` below says what each means (every report prints it); each is a per-dialogue value (None where the metric
does not apply to that dialogue). ACK and CAR are measured on the user's side, from what the simulator reports each
turn; only the scripted user reports it, so with any other simulator both are None for every dialogue (unless no
user turn happened at all: then nothing was acknowledged, ACK 0). The funnel (aggregate only, from the same
reports): how many dialogues had at least k stages acknowledged, and where the failed ones were lost: by the stage
then due (the number acknowledged) and whether the user still held a concern open when the call ended (an
unanswered question, against a stage that did not land), and what they were lost to: what the user objected to in
its last turn ("same thing again", "they dodged my question", ...), or how the call ended when it reported no
objection (a turn limit).
Each aggregate has mean, sample std, a 95% CI and n: for a rate of 0/1 outcomes (CR, FPR, SCR) the Wilson score
interval (`sead.stats.wilson_interval`), which unlike a bootstrap does not collapse to a point at 0 or n successes
(0 of 4 completed is 0.00-0.49, not 0.00-0.00); for the other metrics a seeded percentile bootstrap. Dialogues that
ended by a simulator error are counted apart and excluded from every metric: they say nothing about the agent.
Hack monitors, which read the agent's replies as the scripted user does, are `sead.hack_monitor.HackMonitor`;
the statistics (bootstrap CIs, Wilson intervals, McNemar's test, pass^k) are in `sead.stats`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from sead.dialogue.episode import USER_REPORTS, Episode
from sead.scenario.profile_space import ProfileSpace
from sead.stats import summarise

if TYPE_CHECKING:
    from sead.hack_monitor import HackMonitor

GLOSSARY = {
    "CR": "completion rate: the share of dialogues in which the user did what the SOP asked (its final status is 1)",
    "ACK": "stages acknowledged: how many SOP stages the user acknowledged, in order (0 when none landed); "
    "scripted user only",
    "CAR": "concern-answer rate: of the concerns the user voiced, the share it then took as answered (none voiced: "
    "n/a); scripted user only",
    "FPR": "false-positive rate: of the dialogues the agent declared done (its last status 1), the share in which "
    "the user had not done what was asked: FP / (FP + TP)",
    "SCR": "stage completeness: 1 when, for the last SOP stage the agent declared, it had declared every earlier "
    "stage before; else 0 (also when it declared none)",
    "ATT": "turns of a successful dialogue (lower is better); a turn is one agent message and the user's answer",
    "ADT": "turns of any dialogue",
    "UPA": "user-portrait accuracy: 1 - the mean over turns of |the agent's estimate - the user's next report| / "
    "the dimension's range, over the sampled dimensions",
    "EI": "emotion improvement: the user's last reported emotion minus its first (needs two reports)",
    "TI": "trust improvement: the user's last reported trust minus its first",
    "CI": "cooperation improvement: the user's last reported cooperation minus its first",
    "pass^k": "the chance that k dialogues with one profile all succeed (unbiased per profile, then averaged)",
}
STATE_CHANGE_METRICS = {"EI": "emotion", "TI": "trust", "CI": "cooperation"}
RATES = ("CR", "FPR", "SCR")  # per-dialogue 0/1 outcomes: their CI is Wilson's
TOKEN_COMPONENTS = ("agent", "user")


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
