"""What the episode runner needs from an agent: token ids in, sampled token ids out.

Backends (transformers, vLLM, verl's server manager) sample tokens; the runner keeps those ids as they are,
never re-tokenising text. Agents that only produce text (scripted reference agents, an OpenAI endpoint)
derive from TextAgent, which tokenises their text once, canonically, and appends the end-of-turn token.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass
class AgentRequest:
    prompt_ids: list[int]       # the whole context the agent conditions on (chat template applied)
    messages: list[dict]        # the same context as chat messages
    max_new_tokens: int
    seed: int                   # differs per episode and turn, for reproducible sampling


@dataclass
class AgentOutput:
    token_ids: list[int]        # sampled ids; ends with the end-of-turn id when the agent stopped by itself
    logprobs: list[float] | None = None


class AgentPolicy(ABC):
    name: str = "agent"

    @abstractmethod
    async def generate(self, request: AgentRequest) -> AgentOutput:
        ...

    def identity(self) -> dict:
        return {"name": self.name}


class TextAgent(AgentPolicy):
    """An agent that writes text; its ids are the canonical tokenisation of that text plus end-of-turn."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    @abstractmethod
    async def reply(self, messages: list[dict], seed: int) -> str:
        ...

    async def generate(self, request: AgentRequest) -> AgentOutput:
        text = await self.reply(request.messages, request.seed)
        ids = self.tokenizer.encode(text, add_special_tokens=False)[: max(0, request.max_new_tokens - 1)]
        return AgentOutput(ids + [self.tokenizer.eos_token_id])
