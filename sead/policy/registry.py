"""Agents that need no model, by name (`sead eval scripted:NAME`): scripted baselines to compare trained policies
with. The adversaries a user simulator must not be fooled by are test tools (`sead.testing.adversarial_agents`)."""

from sead.policy.scripted import ReferenceAgent, SOPIgnoringAgent

SCRIPTED_AGENTS = {"reference": ReferenceAgent, "sop_ignoring": SOPIgnoringAgent}
