"""SEAD: multi-turn RL for SOP-driven service dialogue agents against a simulated user."""

from sead import host_memory, threads

# before torch loads: it reads these settings once (sead/host_memory.py, sead/threads.py)
host_memory.prefer_huge_pages()
threads.share_cores()

__version__ = "0.1.0"
