"""A user simulator behind any OpenAI-compatible chat endpoint (vLLM `serve`, a hosted API).

The message layout lives here, in `build_user_messages`, and the in-process HF simulator uses the same
function, so both backends condition the user model on exactly the same context.
"""

from __future__ import annotations

import asyncio
import os
from typing import Sequence

import httpx
import openai
from openai.types.chat import ChatCompletion

from sead.errors import SEADInputError
from sead.scenario.profiles import Profile
from sead.scenario.scenario import Scenario
from sead.usersim.base import Exchange, SimulatorError, UserReply, UserSimulator

HEALTH_TIMEOUT_S = 5.0
START_HINT = "start one with scripts/serve_user_sim.sh or set usersim.base_urls"


def build_user_messages(scenario: Scenario, profile: Profile, history: Sequence[Exchange],
                        agent_response: str) -> list[dict]:
    """Chat messages for the user model: the role-play prompt as system, the agent's words as `user`
    turns wrapped in `<response>`, and the simulator's own earlier raw outputs, in full, as `assistant`
    turns (so it stays consistent with the state numbers it already reported)."""
    messages = [{"role": "system", "content": scenario.user_system_prompt(profile)}]
    pending: list[str] = []  # agent turns the user did not answer yet; merged so roles keep alternating
    for past in history:
        pending.append(_wrap(past.agent_response))
        if past.user_text is not None:
            messages.append({"role": "user", "content": "\n".join(pending)})
            messages.append({"role": "assistant", "content": past.user_text})
            pending = []
    pending.append(_wrap(agent_response))
    tags = ", ".join(f"<{t}>" for t in scenario.tags.user_tags())
    # Only the newest message carries the reminder: earlier messages stay byte-identical between turns,
    # which keeps vLLM's prefix cache useful.
    reminder = f"(The caller's words are inside <response>. Answer this turn with exactly these tags: {tags}.)"
    messages.append({"role": "user", "content": "\n".join(pending) + "\n\n" + reminder})
    return messages


def _wrap(agent_text: str) -> str:
    return f"<response>{agent_text.strip()}</response>"


def turn_seed(seed: int, turn: int) -> int:
    """One sampling seed per (episode, turn): a rerun of an episode draws the same numbers, while the turns
    of one episode do not all reuse the same random stream."""
    return (seed * 1_000_003 + turn) % 2**31


class OpenAIUserSimulator(UserSimulator):
    name = "openai"

    def __init__(self, scenario: Scenario, *, base_urls: Sequence[str] | str, model: str,
                 api_key: str | None = None, temperature: float = 0.9, top_p: float = 0.95,
                 top_k: int | None = 40, max_tokens: int = 512, timeout: float = 60.0):
        super().__init__(scenario)
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise SEADInputError("needs at least one URL, e.g. [http://127.0.0.1:8000/v1]", field="usersim.base_urls")
        if not model:
            raise SEADInputError("the served model name is required", field="usersim.model")
        self.base_urls = [u.rstrip("/") for u in urls]
        self.model = model
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.max_tokens, self.timeout = max_tokens, timeout
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        # Retries belong to the episode runner, which knows whether the episode is still worth retrying.
        # The aiohttp transport: httpx's connection pool costs about twice the CPU per request with hundreds
        # of dialogues in flight (benchmarks/rollout_concurrency.py).
        self._clients = [openai.AsyncOpenAI(base_url=u, api_key=self._api_key, max_retries=0, timeout=timeout,
                                            http_client=openai.DefaultAioHttpClient(timeout=timeout))
                         for u in self.base_urls]
        self._calls = 0

    async def respond(self, profile: Profile, history: list[Exchange], agent_response: str, *,
                      seed: int) -> UserReply:
        index = self._calls % len(self._clients)
        self._calls += 1
        url, client = self.base_urls[index], self._clients[index]
        messages = build_user_messages(self.scenario, profile, history, agent_response)
        try:
            # httpx's timeout bounds each read, not the call; a server trickling bytes must not hold the episode.
            async with asyncio.timeout(self.timeout):
                # The raw-body post skips the SDK's per-call TypedDict transform of `messages`, which cost
                # ~10 ms of CPU per call on long dialogues; the request on the wire is the same.
                completion = await client.post("/chat/completions", cast_to=ChatCompletion,
                                               body=self._body(messages, seed, len(history)))
        except (TimeoutError, openai.OpenAIError) as e:
            raise SimulatorError(f"user simulator at {url} failed: {self._cause(e)}") from e
        if not completion.choices:
            raise SimulatorError(f"user simulator at {url} returned no choices")
        choice = completion.choices[0]
        text = choice.message.content if choice.message else None
        if not text or not text.strip():
            raise SimulatorError(f"user simulator at {url} returned empty content "
                                 f"(finish_reason={choice.finish_reason})")
        usage = completion.usage
        return UserReply(text, usage.prompt_tokens if usage else 0, usage.completion_tokens if usage else 0,
                         meta={"base_url": url, "finish_reason": choice.finish_reason})

    def _body(self, messages: list[dict], seed: int, turn: int) -> dict:
        body = {"model": self.model, "messages": messages, "temperature": self.temperature, "top_p": self.top_p,
                "max_tokens": self.max_tokens, "seed": turn_seed(seed, turn)}
        if self.top_k is not None:
            body["top_k"] = self.top_k
        return body

    def _cause(self, e: BaseException) -> str:
        dropped = _dropped_connection(e)
        if dropped is not None:  # the aiohttp transport reports a dropped connection as a timeout
            return f"connection failed: {dropped}"
        if isinstance(e, (TimeoutError, openai.APITimeoutError)):
            return f"no answer within {self.timeout:g} s"
        if isinstance(e, openai.APIStatusError):
            detail = e.body.get("message") if isinstance(e.body, dict) else None
            return f"HTTP {e.status_code}: {detail or e.message}"
        if isinstance(e, openai.APIConnectionError):
            cause = e.__cause__ or e
            return f"connection failed: {str(cause) or type(cause).__name__}"
        return f"{type(e).__name__}: {e}"

    def identity(self) -> dict:
        return {"name": self.name, "model": self.model, "base_urls": list(self.base_urls),
                "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                "max_tokens": self.max_tokens, "timeout": self.timeout}

    async def check_health(self) -> None:
        """GET /models on every URL; also catches a `usersim.model` that the server does not serve, which
        would otherwise surface as an HTTP 404 on every turn."""
        headers = {"Authorization": f"Bearer {self._api_key}"}
        async with httpx.AsyncClient(timeout=HEALTH_TIMEOUT_S, headers=headers) as http:
            problems = await asyncio.gather(*(self._probe(http, u) for u in self.base_urls))
        problems = [p for p in problems if p]
        if problems:
            raise SimulatorError("; ".join(problems) + f"; {START_HINT}")

    async def _probe(self, http: httpx.AsyncClient, url: str) -> str | None:
        try:
            r = await http.get(f"{url}/models")
            r.raise_for_status()
            served = [m.get("id") for m in r.json().get("data", [])]
        except httpx.HTTPStatusError as e:
            return f"user simulator at {url} is unreachable: HTTP {e.response.status_code} from /models"
        except (httpx.HTTPError, ValueError, AttributeError) as e:
            return f"user simulator at {url} is unreachable: {type(e).__name__}: {e}"
        if self.model not in served:
            return f"user simulator at {url} serves {served}, not {self.model!r} (set usersim.model)"
        return None

    async def aclose(self) -> None:
        await asyncio.gather(*(c.close() for c in self._clients))


def _dropped_connection(e: BaseException) -> str | None:
    """The message of a closed or refused connection somewhere in the exception's cause chain, else None."""
    import aiohttp

    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, (aiohttp.ClientConnectionError, ConnectionError, httpx.ConnectError,
                          httpx.RemoteProtocolError)) and not isinstance(e, aiohttp.ServerTimeoutError):
            return str(e) or type(e).__name__
        e = e.__cause__ or e.__context__
    return None
