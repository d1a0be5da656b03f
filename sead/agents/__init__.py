"""Agents that need no model: scripted baselines to compare trained policies with, and adversaries a user
simulator must not be fooled by. `SCRIPTED_AGENTS` names each for `sead eval scripted:NAME`."""

from sead.agents.adversarial import ADVERSARIAL_AGENTS
from sead.agents.scripted import ReferenceAgent, SOPIgnoringAgent

SCRIPTED_AGENTS = {"reference": ReferenceAgent, "sop_ignoring": SOPIgnoringAgent, **ADVERSARIAL_AGENTS}

__all__ = ["ADVERSARIAL_AGENTS", "SCRIPTED_AGENTS", "ReferenceAgent", "SOPIgnoringAgent"]
