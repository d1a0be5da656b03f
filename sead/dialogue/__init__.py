"""Phase 2: dialogues between the agent and the simulated user, and their record."""

from sead.dialogue.agent import AgentOutput, AgentPolicy, AgentRequest, TextAgent
from sead.dialogue.batch import EpisodeJob, run_batch
from sead.dialogue.chat_tokens import ChatTokens, TemplateError, TokenSegment
from sead.dialogue.episode import END_REASONS, Episode, Turn
from sead.dialogue.rollout_log import RolloutLog, read_rollouts
from sead.dialogue.runner import RunnerConfig, run_episode

__all__ = [
    "END_REASONS",
    "AgentOutput",
    "AgentPolicy",
    "AgentRequest",
    "ChatTokens",
    "Episode",
    "EpisodeJob",
    "RolloutLog",
    "RunnerConfig",
    "TemplateError",
    "TextAgent",
    "TokenSegment",
    "Turn",
    "read_rollouts",
    "run_batch",
    "run_episode",
]
