"""Scenarios as data: profile space, behaviour library, prompt templates and the tag format."""

from sead.scenario.behaviours import Behaviour, BehaviourLibrary
from sead.scenario.profile_space import Dimension, ProfileSpace
from sead.scenario.profiles import Profile, read_profiles, write_profiles
from sead.scenario.scenario import Scenario
from sead.scenario.tags import AgentTurn, TagSchema, UserTurn
from sead.scenario.template import PromptTemplate

__all__ = [
    "AgentTurn",
    "Behaviour",
    "BehaviourLibrary",
    "Dimension",
    "Profile",
    "ProfileSpace",
    "PromptTemplate",
    "Scenario",
    "TagSchema",
    "UserTurn",
    "read_profiles",
    "write_profiles",
]
