"""Agents that need no model, by name: scripted baselines to compare trained policies with, and adversaries a
user simulator must not be fooled by (`sead eval scripted:NAME`)."""

from sead.policy.adversarial import ADVERSARIAL_AGENTS, KNOWN_LIMITS
from sead.policy.scripted import ReferenceAgent, SOPIgnoringAgent

SCRIPTED_AGENTS = {"reference": ReferenceAgent, "sop_ignoring": SOPIgnoringAgent, **ADVERSARIAL_AGENTS, **KNOWN_LIMITS}
