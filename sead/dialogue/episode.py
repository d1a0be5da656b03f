"""The record of one dialogue: what each side said, parsed, and how it ended.

This is what the episode runner produces and what reward, metrics, the controller and the rollout log read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sead.dialogue.chat_tokens import TokenSegment
from sead.scenario.profiles import Profile
from sead.scenario.tags import AgentTurn, UserTurn

# How a dialogue can end. Only `sim_error` is excluded from reward and completion rate. `context_overflow`: even the
# SOP prompt and the latest message no longer fit dialogue.max_context_tokens with room for another agent turn.
# `branch_horizon`: a branched continuation played the agent turns it was given after its prefix (trainer.branch.turns).
END_REASONS = (
    "user_success",
    "user_hangup",
    "agent_done",
    "turn_limit",
    "token_budget",
    "format_error",
    "context_overflow",
    "branch_horizon",
    "sim_error",
)


@dataclass
class Turn:
    agent: AgentTurn
    user: UserTurn | None = None  # None when the agent ended the call, or when feedback replaced the user turn
    feedback: str | None = None  # format-error message shown to the agent instead of a user turn


# Episode.meta key under which the runner keeps each user turn's simulator report (UserReply.meta), in order;
# the scripted user reports the SOP stages it acknowledged there, which the shaped reward reads.
USER_REPORTS = "user_meta"


@dataclass
class Episode:
    profile: Profile
    turns: list[Turn]
    end_reason: str
    tokens: dict[str, int] = field(default_factory=dict)  # e.g. agent_prompt, agent_completion, user_completion
    meta: dict = field(default_factory=dict)  # ids, seed, simulator identity, timings
    segments: list[TokenSegment] = field(default_factory=list)  # token ids + loss mask (see chat_tokens)

    def __post_init__(self):
        if self.end_reason not in END_REASONS:
            raise ValueError(f"unknown end reason {self.end_reason!r}; expected one of {END_REASONS}")

    @property
    def user_turns(self) -> list[UserTurn]:
        return [t.user for t in self.turns if t.user is not None]

    @property
    def final_user_status(self) -> int:
        users = self.user_turns
        return users[-1].status if users else 0

    @property
    def success(self) -> bool:
        return self.end_reason != "sim_error" and self.final_user_status == 1

    @property
    def sim_error(self) -> bool:
        return self.end_reason == "sim_error"

    @property
    def agent_declared_done(self) -> bool:
        return bool(self.turns) and self.turns[-1].agent.status == 1

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    def to_dict(self) -> dict:
        return {
            "profile": self.profile.to_dict(),
            "end_reason": self.end_reason,
            "success": self.success,
            "final_user_status": self.final_user_status,
            "turns": [
                {"agent": t.agent.to_dict(), "user": t.user.to_dict() if t.user else None, "feedback": t.feedback}
                for t in self.turns
            ],
            "tokens": dict(self.tokens),
            "meta": dict(self.meta),
            "segments": [s.to_dict() for s in self.segments],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Episode:
        prof = dict(d["profile"])
        behaviours = prof.pop("behaviours", [])
        turns = [
            Turn(AgentTurn(**t["agent"]), UserTurn(**t["user"]) if t.get("user") else None, t.get("feedback"))
            for t in d["turns"]
        ]
        segments = [TokenSegment(s["ids"], s["mask"], s["logprobs"]) for s in d.get("segments", [])]
        return cls(
            Profile.make(prof, behaviours),
            turns,
            d["end_reason"],
            dict(d.get("tokens", {})),
            dict(d.get("meta", {})),
            segments,
        )
