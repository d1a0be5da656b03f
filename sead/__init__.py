"""SEAD: multi-turn RL for SOP-driven service dialogue agents against a simulated user."""

from sead import host_memory

host_memory.prefer_huge_pages()  # before torch loads: it reads the setting once (sead/host_memory.py)

__version__ = "0.1.0"
