"""Agents that need no model: scripted baselines to compare trained policies with."""

from sead.agents.scripted import ReferenceAgent, SOPIgnoringAgent

__all__ = ["ReferenceAgent", "SOPIgnoringAgent"]
