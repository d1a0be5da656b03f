"""Test doubles shipped with SEAD, so tests and benchmarks in any checkout can fake an LLM server."""

from sead.testing.fake_openai_server import FAULTS, FakeOpenAIServer, scripted_user_turn

__all__ = ["FAULTS", "FakeOpenAIServer", "scripted_user_turn"]
