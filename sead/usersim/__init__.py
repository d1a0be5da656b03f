"""User simulators: one interface, several backends, chosen by `usersim.name` in config.

Backends are imported lazily, so the scripted CPU path never loads openai or torch.
"""

from sead.usersim.base import Exchange, SimulatorError, UserReply, UserSimulator


def _scripted(scenario, **kw):
    from sead.usersim.scripted import ScriptedUserSimulator

    return ScriptedUserSimulator(scenario, **kw)


def _openai(scenario, **kw):
    from sead.usersim.openai_sim import OpenAIUserSimulator

    return OpenAIUserSimulator(scenario, **kw)


def _hf(scenario, **kw):
    from sead.usersim.hf_sim import HFUserSimulator

    return HFUserSimulator(scenario, **kw)


SIMULATORS = {"scripted": _scripted, "openai": _openai, "hf": _hf}

__all__ = ["SIMULATORS", "Exchange", "SimulatorError", "UserReply", "UserSimulator"]
