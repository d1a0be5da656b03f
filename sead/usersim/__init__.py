"""User simulators: one interface, several backends, chosen by `usersim.name` in config."""

from sead.usersim.base import Exchange, SimulatorError, UserReply, UserSimulator

__all__ = ["Exchange", "SimulatorError", "UserReply", "UserSimulator"]
