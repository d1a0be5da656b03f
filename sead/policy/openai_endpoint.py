"""The agent as any OpenAI-compatible chat endpoint (an API baseline, or a model served elsewhere)."""

from __future__ import annotations

import hashlib
import secrets

import httpx

from sead.dialogue.agent import TextAgent
from sead.errors import SEADInputError
from sead.policy.settings import SamplingConfig

HEALTH_TIMEOUT_S = 10.0


class OpenAIAgent(TextAgent):
    """An API baseline. Token ids for the transcript are the evaluation tokenizer's encoding of its text;
    what the endpoint itself bills is summed in `usage`."""

    name = "openai"

    def __init__(
        self,
        tokenizer,
        *,
        model: str,
        url: str,
        sampling: SamplingConfig,
        max_tokens: int,
        api_key: str,
        timeout: float = 120.0,
        retries: int = 3,
    ):
        import openai

        super().__init__(tokenizer)
        self.model, self.url, self.sampling, self.max_tokens = model, url, sampling, max_tokens
        self._api_key = api_key
        # The SDK's own retries (exponential backoff) cover rate limits and dropped connections of an API.
        self._client = openai.AsyncOpenAI(
            base_url=url,
            api_key=api_key,
            max_retries=retries,
            timeout=timeout,
            http_client=openai.DefaultAioHttpClient(timeout=timeout),
        )
        self.usage = {"prompt": 0, "completion": 0}
        # The seed formulas and the default test set are public, so a seed derived from a dialogue's place in the
        # test set would let the endpoint rebuild the user (profile and dice) without reading a message: each
        # request's seed is drawn from the dialogue's seed with a secret of this agent's own, made afresh each time.
        self._seed_key = secrets.token_bytes(16)

    async def reply(self, messages: list[dict], seed: int) -> str:
        s = self.sampling
        out = await self._client.chat.completions.create(
            model=self.model,
            messages=messages,
            temperature=s.temperature,
            top_p=s.top_p,
            max_tokens=self.max_tokens,
            seed=self.endpoint_seed(seed),
        )
        if out.usage:
            self.usage["prompt"] += out.usage.prompt_tokens
            self.usage["completion"] += out.usage.completion_tokens
        return (out.choices[0].message.content or "") if out.choices else ""

    def endpoint_seed(self, seed: int) -> int:
        """The seed the endpoint is sent for a turn's `seed`: fixed for it within this agent's life (a retried request
        samples the same), unrelated to it without the secret."""
        digest = hashlib.blake2b(str(seed).encode(), key=self._seed_key, digest_size=4).digest()
        return int.from_bytes(digest, "big") % 2**31

    def identity(self) -> dict:
        return {
            "name": self.name,
            "model": self.model,
            "url": self.url,
            "sampling": vars(self.sampling),
            "max_tokens": self.max_tokens,
        }

    async def aclose(self) -> None:
        await self._client.close()


async def check_endpoint(url: str, model: str, api_key: str) -> None:
    """Fail before any dialogue when the endpoint is down or does not serve the model."""
    from sead.usersim.openai_sim import probe_endpoint

    async with httpx.AsyncClient(timeout=HEALTH_TIMEOUT_S, headers={"Authorization": f"Bearer {api_key}"}) as http:
        problem = await probe_endpoint(
            http, url, model, role="agent endpoint", hint="check the MODEL part of openai:MODEL@URL"
        )
    if problem:
        raise SEADInputError(problem)
