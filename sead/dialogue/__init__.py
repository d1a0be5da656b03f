"""Phase 2: dialogues between the agent and the simulated user, and their record."""

from sead.dialogue.episode import END_REASONS, Episode, Turn

__all__ = ["END_REASONS", "Episode", "Turn"]
