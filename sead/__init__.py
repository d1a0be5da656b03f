"""SEAD: multi-turn RL for SOP-driven service dialogue agents against a simulated user."""

__version__ = "0.1.0"
