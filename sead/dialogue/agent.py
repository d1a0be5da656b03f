"""What the episode runner needs from an agent: token ids in, sampled token ids out.

Backends (transformers, vLLM, verl's server manager) sample tokens; the runner keeps those ids as they are,
never re-tokenising text. Agents that only produce text (scripted reference agents, an OpenAI endpoint)
derive from TextAgent, which tokenises their text once, canonically, and appends the end-of-turn token.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass

from sead import compute
from sead.dialogue.chat_tokens import plain_ids


@dataclass
class AgentRequest:
    """One turn to sample. The message dicts are the runner's own: read them, never change them."""

    prompt_ids: list[int]  # the whole context the agent conditions on (chat template applied)
    messages: list[dict]  # the same context as chat messages
    max_new_tokens: int
    seed: int  # differs per episode and turn, for reproducible sampling


@dataclass
class AgentOutput:
    token_ids: list[int]  # sampled ids; ends with the end-of-turn id when the agent stopped by itself
    logprobs: list[float] | None = None


class AgentPolicy(ABC):
    name: str = "agent"

    @abstractmethod
    async def generate(self, request: AgentRequest) -> AgentOutput: ...

    def identity(self) -> dict:
        return {"name": self.name}


class TextAgent(AgentPolicy):
    """An agent that writes text; its ids are the canonical tokenisation of that text plus end-of-turn."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    @abstractmethod
    async def reply(self, messages: list[dict], seed: int) -> str: ...

    async def generate(self, request: AgentRequest) -> AgentOutput:
        text = await self.reply(request.messages, request.seed)
        ids = plain_ids(self.tokenizer, text)[: max(0, request.max_new_tokens - 1)]
        return AgentOutput(ids + [self.tokenizer.eos_token_id])


class BatchingPolicy(AgentPolicy):
    """An agent whose backend samples many prompts at once (transformers, vLLM): requests from concurrent
    episodes that arrive together are sampled as one batch, off the event loop (on the main thread under
    `sead.compute.serve`, else on a worker thread)."""

    def __init__(self, max_batch: int):
        self.max_batch = max_batch
        self._pending: list[tuple[AgentRequest, asyncio.Future]] = []
        self._worker: asyncio.Task | None = None

    @abstractmethod
    def sample(self, requests: list[AgentRequest]) -> list[AgentOutput]:
        """One output per request, in order; each row's randomness comes from its request's seed only."""

    async def generate(self, request: AgentRequest) -> AgentOutput:
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((request, fut))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        while self._pending:
            for _ in range(3):  # let every episode that is ready submit its request before batching
                await asyncio.sleep(0)
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            try:
                outs = await compute.arun(self.sample, [r for r, _ in batch])
            except Exception as e:
                _settle(batch, e)
                continue
            except BaseException as e:
                # A Ctrl-C or a test's timeout raised inside the sampler, or this task cancelled: this worker stops,
                # so every request still waiting must hear of it, or its episode awaits an answer forever. The
                # waiters carry the exception on; only a cancellation of this task is its own to raise.
                waiting, self._pending = [*batch, *self._pending], []
                _settle(waiting, e)
                if isinstance(e, asyncio.CancelledError):
                    raise
                return
            _settle(batch, outs)


def _settle(waiting: list[tuple[AgentRequest, asyncio.Future]], outcome: list[AgentOutput] | BaseException) -> None:
    """Each waiting request's output in order, or one exception for all. A waiter cancelled meanwhile (its episode
    stopped) is skipped: setting it would raise and stop the worker for the others."""
    for i, (_, fut) in enumerate(waiting):
        if fut.done():
            continue
        if isinstance(outcome, asyncio.CancelledError):  # a future cannot hold a cancellation as its exception
            fut.cancel()
        elif isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome[i])
