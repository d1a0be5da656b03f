"""A user simulator behind any OpenAI-compatible chat endpoint (vLLM `serve`, a hosted API).

The message layout lives here, in `build_user_messages`, and the in-process HF simulator uses the same
function, so both backends condition the user model on exactly the same context.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from functools import lru_cache

import httpx
import orjson

from sead.errors import SEADInputError
from sead.scenario.profiles import Profile
from sead.scenario.scenario import Scenario
from sead.usersim.base import Exchange, SimulatorError, UserReply, UserSimulator, check_settings
from sead.usersim.http_client import KeepAliveClient, TooLarge

HEALTH_TIMEOUT_S = 5.0
ROUNDS_KEPT = 2048  # dialogues whose encoded rounds a simulator keeps: more than are in flight in one process
START_HINT = "start one with scripts/serve_user_sim.sh or set usersim.base_urls"


def build_user_messages(
    scenario: Scenario, profile: Profile, history: Sequence[Exchange], agent_response: str
) -> list[dict]:
    """Chat messages for the user model: the role-play prompt as system, the agent's words as `user`
    turns wrapped in `<response>`, and the simulator's own earlier raw outputs, in full, as `assistant`
    turns (so it stays consistent with the state numbers it already reported)."""
    messages = [{"role": "system", "content": scenario.user_system_prompt(profile)}]
    pending: list[str] = []  # agent turns the user did not answer yet; merged so roles keep alternating
    for past in history:
        pending.append(_wrap(past.agent_response))
        if past.user_text is not None:
            messages += _answered(pending, past.user_text)
            pending = []
    pending.append(_wrap(agent_response))
    messages.append(_newest(pending, scenario))
    return messages


def _answered(agent_turns: list[str], user_text: str) -> list[dict]:
    """The messages of one answered round: what the agent said since the user last spoke, then the user's answer."""
    return [{"role": "user", "content": "\n".join(agent_turns)}, {"role": "assistant", "content": user_text}]


def _newest(agent_turns: list[str], scenario: Scenario) -> dict:
    # Only the newest message carries the reminder: earlier messages stay byte-identical between turns,
    # which keeps vLLM's prefix cache useful.
    return {"role": "user", "content": "\n".join(agent_turns) + "\n\n" + scenario.tags.user_reminder}


def _wrap(agent_text: str) -> str:
    return f"<response>{agent_text.strip()}</response>"


def turn_seed(seed: int, turn: int) -> int:
    """One sampling seed per (episode, turn): a rerun of an episode draws the same numbers, while the turns
    of one episode do not all reuse the same random stream."""
    return (seed * 1_000_003 + turn) % 2**31


def _json(value) -> bytes:
    """JSON bytes, by orjson: with hundreds of dialogues in flight the request encoding is a share of the runner's
    CPU, and orjson takes a tenth of json's time. A string it refuses (a lone surrogate) goes through json, escaped."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value).encode()


@lru_cache(maxsize=4096)  # one role-play prompt per profile in flight is what matters
def _message_json(role: str, content: str) -> bytes:
    """A chat message as JSON; the role-play prompt is most of a request's bytes and the same on every turn."""
    return _json({"role": role, "content": content})


class OpenAIUserSimulator(UserSimulator):
    name = "openai"

    def __init__(
        self,
        scenario: Scenario,
        *,
        base_urls: Sequence[str] | str,
        model: str,
        api_key: str | None = None,
        temperature: float = 0.9,
        top_p: float = 0.95,
        top_k: int | None = 40,
        max_tokens: int = 512,
        timeout: float = 60.0,
    ):
        super().__init__(scenario)
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise SEADInputError("needs at least one URL, e.g. [http://127.0.0.1:8000/v1]", field="usersim.base_urls")
        if not model:
            raise SEADInputError("the served model name is required", field="usersim.model")
        check_settings(temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens, timeout=timeout)
        self.base_urls = [u.rstrip("/") for u in urls]
        self.model = model
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.max_tokens, self.timeout = max_tokens, timeout
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        # One keep-alive client per URL, a plain HTTP/1.1 one rather than the openai SDK or aiohttp: with hundreds
        # of dialogues in flight the client's CPU per request bounds the rollout rate (see http_client).
        # Retries belong to the episode runner.
        headers = {"Authorization": f"Bearer {self._api_key}", "Accept": "application/json"}
        self._clients = [KeepAliveClient(u, headers) for u in self.base_urls]
        self._calls = 0
        self._rounds: dict[int, tuple[list[Exchange], bytes]] = {}  # id(history) -> its rounds, encoded

    @property
    def call_deadline(self) -> float:
        return self.timeout  # the client's deadline covers the whole call

    async def respond(self, profile: Profile, history: list[Exchange], agent_response: str, *, seed: int) -> UserReply:
        index = self._calls % len(self.base_urls)
        self._calls += 1
        url = self.base_urls[index]
        body = self._request_json(profile, history, agent_response, seed)
        try:
            # The deadline covers the whole call: a server trickling bytes must not hold the episode.
            data = await self._post(index, body)
        except TimeoutError as e:
            raise SimulatorError(f"user simulator at {url} failed: no answer within {self.timeout:g} s") from e
        except TooLarge as e:
            raise SimulatorError(f"user simulator at {url} failed: {e}") from e
        except OSError as e:  # refused, reset, unresolvable, TLS, or an answer that is not HTTP
            raise SimulatorError(
                f"user simulator at {url} failed: connection failed: {str(e) or type(e).__name__}"
            ) from e
        except _HTTPError as e:
            raise SimulatorError(f"user simulator at {url} failed: {e}", retry_after=e.retry_after) from e
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices or not isinstance(choices[0], dict):
            raise SimulatorError(f"user simulator at {url} returned no choices")
        choice = choices[0]
        text = (choice.get("message") or {}).get("content")
        if not isinstance(text, str) or not text.strip():
            raise SimulatorError(
                f"user simulator at {url} returned empty content (finish_reason={choice.get('finish_reason')})"
            )
        usage = data.get("usage") or {}
        return UserReply(
            text,
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
            meta={"base_url": url, "finish_reason": choice.get("finish_reason")},
        )

    async def _post(self, index: int, body: bytes) -> dict:
        status, raw, retry_after = await self._clients[index].post_json("/chat/completions", body, self.timeout)
        if status >= 400:
            raise _HTTPError(status, raw, retry_after=retry_after)
        try:
            return orjson.loads(raw)
        except ValueError:  # orjson.JSONDecodeError is one
            raise _HTTPError(status, raw, "the answer is not JSON") from None

    def _request_json(self, profile: Profile, history: list[Exchange], agent_response: str, seed: int) -> bytes:
        """The chat request body: `build_user_messages`, encoded. Its system message, the role-play prompt, is
        most of its bytes and the same on every turn of a dialogue, so its JSON is encoded once per prompt and
        spliced in; the answered rounds of a dialogue are encoded once, in `_rounds_json`."""
        settings = {
            "model": self.model,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": turn_seed(seed, len(history)),
        }
        if self.top_k is not None:
            settings["top_k"] = self.top_k
        rounds = self._rounds_json(history)
        if rounds is None:  # a round the user did not answer: merged with the next, so the whole list is built
            messages = build_user_messages(self.scenario, profile, history, agent_response)[1:]
        else:
            messages = [_newest([_wrap(agent_response)], self.scenario)]
        system = _message_json("system", self.scenario.user_system_prompt(profile))
        return b'{"messages":[%s%s,%s],%s' % (system, rounds or b"", _json(messages)[1:-1], _json(settings)[1:])

    def _rounds_json(self, history: list[Exchange]) -> bytes | None:
        """The JSON of the messages `history`'s rounds make (each with a leading comma), or None when one round
        has no user answer. A dialogue's history list only grows between its turns, so what was encoded for it is
        kept under the list's identity and reused while the list still begins with the same rounds (checked:
        lists die and their identities are reused); this keeps each turn's encoding to its new round instead of
        every round so far."""
        key = id(history)
        seen, encoded = self._rounds.pop(key, ([], b""))
        if history[: len(seen)] != seen:
            seen, encoded = [], b""
        new = history[len(seen) :]
        if any(past.user_text is None for past in new):
            return None
        if new:
            encoded += b"".join(b"," + _json(_answered([_wrap(p.agent_response)], p.user_text))[1:-1] for p in new)
            seen = list(history)
        self._rounds[key] = (seen, encoded)
        if len(self._rounds) > ROUNDS_KEPT:
            del self._rounds[next(iter(self._rounds))]  # the dialogue that spoke least recently
        return encoded

    def identity(self) -> dict:
        return {
            "name": self.name,
            "model": self.model,
            "base_urls": list(self.base_urls),
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "max_tokens": self.max_tokens,
            "timeout": self.timeout,
        }

    async def check_health(self) -> None:
        """GET /models on every URL; also catches a `usersim.model` that the server does not serve, which
        would otherwise surface as an HTTP 404 on every turn. Raises SEADInputError naming every URL at fault."""
        headers = {"Authorization": f"Bearer {self._api_key}"}
        async with httpx.AsyncClient(timeout=HEALTH_TIMEOUT_S, headers=headers) as http:
            problems = await asyncio.gather(*(probe_endpoint(http, u, self.model) for u in self.base_urls))
        problems = [p for p in problems if p]
        if problems:
            raise SEADInputError("; ".join(problems) + f"; {START_HINT}", field="usersim")

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self._clients))


async def probe_endpoint(
    http: httpx.AsyncClient, url: str, model: str, *, role: str = "user simulator", hint: str = "set usersim.model"
) -> str | None:
    """None when `url` answers GET /models and serves `model`; otherwise what is wrong, in one line."""
    try:
        r = await http.get(f"{url}/models")
        r.raise_for_status()
        served = [m.get("id") for m in r.json().get("data", [])]
    except httpx.HTTPStatusError as e:
        return f"{role} at {url} is unreachable: HTTP {e.response.status_code} from /models"
    except Exception as e:  # whatever stops the request (bad URL, refused, not JSON) is the answer
        inner = getattr(e, "exceptions", None)
        if inner:  # an exception group: httpx's connection pool wraps some socket errors in one
            e = inner[0]
        return f"{role} at {url} is unreachable: {type(e).__name__}: {e}"
    if model not in served:
        return f"{role} at {url} serves {served}, not {model!r} ({hint})"
    return None


class _HTTPError(Exception):
    """An error status (or an unreadable body) from the simulator, with the server's own message if it sent one
    and the wait it asked for (Retry-After)."""

    def __init__(self, status: int, raw: bytes, problem: str | None = None, *, retry_after: float | None = None):
        self.retry_after = retry_after
        detail = problem
        if detail is None:
            try:
                err = json.loads(raw).get("error") or {}
                detail = err.get("message") if isinstance(err, dict) else str(err)
            except (ValueError, AttributeError):
                detail = None
            detail = detail or raw[:120].decode("utf-8", "replace").strip() or "no message"
        super().__init__(f"HTTP {status}: {detail}")
