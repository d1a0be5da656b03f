"""A rule-based simulated user: cheap, deterministic and with difficulty that follows the profile.

The user tracks cooperation, emotion and trust (from the profile) and noise. Every rule is driven by the
scenario's rules file (`sead.usersim.rules`): the agent's reply is matched against stage cues, concern
answers and contradiction phrases, and the state moves accordingly. A few moves are chances; each chance of
a good move grows with trust and each of a bad one shrinks, and every rule favours the higher state, so a
lower initial state does not make success more likely (tests/test_scripted.py measures this).

The user is served one thing at a time, in the agent's own words: a stage lands only when it is the next one
and no concern of the user is open; an open concern is settled only by an answer to that kind of concern; and a
reply that cues several stages or answers several kinds at once (a salad), that mostly repeats the agent, or that
mostly echoes the user earns nothing (`Rules.read`; tests/test_adversarial.py plays the agents of
`sead.testing.adversarial_agents` that try each).

The simulator keeps no state between calls. Each call replays the dialogue from the profile's initial values;
the numbers a past turn drew by chance are taken from what the simulator reported in that turn (its raw
text is in the history), so the replay agrees with what the agent saw, under retries and concurrency alike.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

from sead.errors import SEADInputError
from sead.scenario.behaviours import Behaviour
from sead.scenario.profiles import Profile
from sead.scenario.scenario import Scenario
from sead.usersim.base import Exchange, UserReply, UserSimulator
from sead.usersim.rules import READING_VERSION, Rules
from sead.usersim.rules_file import scenario_rules
from sead.usersim.visible_text import matches_any, normalise

STATE_DIMENSIONS = ("cooperation", "emotion", "trust")


@dataclass
class _State:
    values: dict[str, int]
    pending: list[Behaviour]  # behaviours not voiced yet, in profile order
    stage_done: int = -1  # last SOP stage that landed, in order
    active: Behaviour | None = None  # the concern voiced and not yet answered
    open_rounds: int = 0  # rounds the active concern has gone unanswered
    said: list[str] = field(default_factory=list)  # the agent's earlier replies
    heard: str | None = None  # the user's own last reply


@dataclass
class _Outcome:
    reply: str
    status: int
    think: str
    objections: tuple[str, ...] = ()  # what turned the user against the call this turn ("same thing again", ...)


class ScriptedUserSimulator(UserSimulator):
    name = "scripted"

    def __init__(self, scenario: Scenario, rules: Rules | None = None):
        super().__init__(scenario)
        rules = rules or scenario_rules(scenario)
        names = {d.name for d in scenario.space.dimensions}
        missing = [n for n in STATE_DIMENSIONS if n not in names]
        if missing:
            raise SEADInputError(f"the scripted simulator needs dimensions {missing}", field="scenario.dimensions")
        self.rules = rules
        d, space = rules.dynamics, scenario.space
        self.floor = {
            "cooperation": space["cooperation"].low if d.hangup_cooperation is None else d.hangup_cooperation,
            "emotion": space["emotion"].low if d.hangup_emotion is None else d.hangup_emotion,
        }

    def identity(self) -> dict:
        return {
            "name": self.name,
            "rules": self.rules.source,
            "reading": READING_VERSION,
            "dynamics": asdict(self.rules.dynamics),
        }

    async def respond(self, profile: Profile, history: list[Exchange], agent_response: str, *, seed: int) -> UserReply:
        st = self._initial(profile)
        for k, past in enumerate(history):
            reported = self.scenario.tags.parse_user(past.user_text).state if past.user_text is not None else {}
            self._step(
                st,
                past.agent_response,
                random.Random(f"{seed}/{k}"),
                {n: v for n, v in reported.items() if v is not None},
            )
        out = self._step(st, agent_response, random.Random(f"{seed}/{len(history)}"), {})
        text = self.scenario.tags.format_user(out.reply, st.values, out.status, think=out.think)
        meta = {"stage_done": st.stage_done, "active_concern": st.active.category if st.active else None}
        return UserReply(text, meta={**meta, "objections": list(out.objections)})

    def _initial(self, profile: Profile) -> _State:
        values = {}
        for dim in self.scenario.space.dimensions:
            start = self.rules.dynamics.noise_base if dim.name == "noise" else dim.low
            values[dim.name] = min(dim.high, max(dim.low, profile.values.get(dim.name, start)))
        library = self.scenario.library
        unknown = [b for b in profile.behaviours if b not in library]
        if unknown:
            raise SEADInputError(f"behaviours not in {library.source}: {unknown}", field="behaviours")
        return _State(values, [library.get(b) for b in profile.behaviours])

    def _step(self, st: _State, agent_text: str, rng: random.Random, reported: dict[str, int]) -> _Outcome:
        """Apply one agent reply to the state and decide the user's answer. `reported`: the values this turn
        ended with when it was first played; they replace the replayed chance moves before anything is decided."""
        # Drawn up front, always the same number, so two profiles with one seed see the same chances.
        draws = [rng.random() for _ in range(6)]
        notes: list[str] = []
        objections: list[str] = []
        progressed, resolved, gave_up = self._react(st, agent_text, draws, notes, objections)
        st.values.update(reported)
        outcome = self._answer(st, progressed, resolved, gave_up, draws[-1], notes)
        outcome.objections = tuple(dict.fromkeys(objections))
        return outcome

    def _react(
        self, st: _State, agent_text: str, draws: list[float], notes: list[str], objections: list[str]
    ) -> tuple[bool, bool, bool]:
        """Move the state; return whether the expected stage landed, the open concern was answered, and whether
        the user has waited too long for an answer. `objections`: the causes of every move against the call."""
        rules, d, v = self.rules, self.rules.dynamics, st.values
        u_gain, u_off, u_impatient, u_drag_c, u_drag_e = draws[:5]
        # Every chance of a good move rises with trust, of a bad one falls: the source of monotone difficulty.
        willing = v["trust"] / self.scenario.space["trust"].high
        text = normalise(agent_text)
        reading = rules.read(agent_text, st.said, st.heard)
        st.said.append(agent_text)

        def move(dim: str, delta: int, why: str):
            dim_range = self.scenario.space[dim]
            new = min(dim_range.high, max(dim_range.low, v[dim] + delta))
            if new != v[dim]:
                notes.append(f"{why}: {dim} {'+' if new > v[dim] else ''}{new - v[dim]}")
                if new < v[dim]:
                    objections.append(why)
                v[dim] = new

        if matches_any(text, rules.contradictions):
            move("trust", -d.contradiction_trust_drop, "that contradicts what they said")
        if reading.repeated:
            move("emotion", -1, "same thing again")
        if reading.echoed:
            move("emotion", -1, "that's just what I said")
        if len(agent_text.split()) > d.long_reply_words:
            move("emotion", -1, "too long")
        cued, answered = (reading.stages, reading.kinds) if reading.usable else ((), ())
        if reading.salad:
            notes.append("word salad")
            objections.append("word salad")

        resolved = gave_up = progressed = False
        if st.active is not None:
            # An open concern holds the SOP: nothing moves on until this kind of concern is answered.
            if st.active.category in answered:
                resolved, st.active, st.open_rounds = True, None, 0
                move("trust", d.resolve_trust_gain, "my question got a straight answer")
                if u_gain < willing:
                    move("cooperation", 1, "fair enough")
            else:
                st.open_rounds += 1
                move("trust", -d.unresolved_trust_cost, "they dodged my question")
                if answered and d.wrong_answer_cost:  # an answer, to something this user never asked
                    st.open_rounds += d.wrong_answer_cost
                    move("trust", -d.wrong_answer_cost, "that's not what I asked")
                    move("emotion", -d.wrong_answer_cost, "that's not what I asked")
                gave_up = st.open_rounds >= d.max_unresolved_rounds
        elif cued:
            expected = st.stage_done + 1
            if expected in cued:
                progressed = True
                if u_gain < willing:
                    move("cooperation", 1, "makes sense")
            else:
                move("cooperation", -1, "jumping ahead" if max(cued) > expected else "we did that already")
        elif u_off >= willing:
            move("emotion", -1, "pointless talk")

        if u_impatient < d.impatience * (1 - willing):
            move("emotion", -1, "this is taking my time")
        if v["trust"] <= d.low_trust:
            if u_drag_c < d.drag_chance:
                move("cooperation", -1, "I don't trust this")
            if u_drag_e < d.drag_chance:
                move("emotion", -1, "I don't trust this")
        return progressed, resolved, gave_up

    def _answer(
        self, st: _State, progressed: bool, resolved: bool, gave_up: bool, u_line: float, notes: list[str]
    ) -> _Outcome:
        rules, v = self.rules, st.values
        last, expected = len(rules.stages) - 1, st.stage_done + 1

        def pick(lines) -> str:
            return lines[int(u_line * len(lines))]

        if gave_up or v["cooperation"] <= self.floor["cooperation"] or v["emotion"] <= self.floor["emotion"]:
            # Hanging up before the first stage landed: the classic "not the owner" excuse.
            line = rules.not_owner_line if st.stage_done < 0 else pick(rules.hangup_lines)
            return self._finish(st, line, -1, notes + ["done with this call"])
        if progressed and expected == last and st.active is None:
            if st.pending:
                return self._voice(st, notes + ["one more thing before I agree"])
            if v["cooperation"] >= rules.dynamics.operate_threshold:
                st.stage_done = last
                return self._finish(st, rules.success_line, 1, notes + ["did it, all done"])
            return self._finish(st, pick(rules.stall_lines), 0, notes + ["not doing that yet"])
        if progressed and expected < last:
            st.stage_done = expected
            if st.active is None and st.pending:
                return self._voice(st, notes + [f"{rules.stages[expected].name} ok, but"])
        if st.active is not None:
            return self._finish(st, _spoken(st.active), 0, notes + ["still waiting for an answer"])
        if resolved:
            return self._finish(st, pick(rules.accept_lines), 0, notes or ["answered"])
        if progressed:
            return self._finish(st, pick(rules.stages[st.stage_done].user_ack), 0, notes or ["fine"])
        return self._finish(st, pick(rules.off_topic_lines), 0, notes or ["nothing useful"])

    def _voice(self, st: _State, notes: list[str]) -> _Outcome:
        st.active, st.open_rounds = st.pending.pop(0), 0
        return self._finish(st, _spoken(st.active), 0, notes + [f"raising: {st.active.text}"])

    def _finish(self, st: _State, reply: str, status: int, notes: list[str]) -> _Outcome:
        if "noise" in st.values:
            d, dim = self.rules.dynamics, self.scenario.space["noise"]
            noisy = st.active is not None and d.is_noisy(st.active.category)
            st.values["noise"] = min(dim.high, max(dim.low, d.noise_active if noisy else d.noise_base))
        st.heard = reply
        return _Outcome(reply, status, "; ".join(notes))


def _spoken(behaviour: Behaviour) -> str:
    """What the user says for a behaviour: its utterance; libraries without one (the original format) give
    only the description, which then stands in for the words."""
    return behaviour.utterance or behaviour.text
