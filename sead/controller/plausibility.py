"""Optional LLM plausibility pass over sampled profiles (OFF by default; `controller.plausibility.enabled`).

An LLM is asked whether each behaviour fits the profile's state. It may swap a behaviour, but only for
another exact entry of the library; the sampled numbers never change (the original let the LLM rewrite them,
which silently broke the curriculum's sampling). Any failure leaves the profile as sampled.
Both training backends draw a step's profiles through `training_profiles`, so they ask the same questions.
"""

from __future__ import annotations

import asyncio
import json
import random
import re

from sead.config import PlausibilityConfig
from sead.dialogue.seeds import profile_check_seed
from sead.errors import SEADInputError
from sead.scenario.profiles import Profile
from sead.scenario.scenario import Scenario

__all__ = ["PlausibilityConfig", "apply_answer", "check_endpoint", "plausibility_pass", "training_profiles"]

_JSON = re.compile(r"\{.*\}", re.S)


def build_prompt(profile: Profile, scenario: Scenario, candidates: list[str]) -> str:
    dims = ", ".join(
        f"{k}={v} (scale {scenario.space[k].low}-{scenario.space[k].high})" for k, v in profile.values.items()
    )
    current = "\n".join(f"- {b}" for b in profile.behaviours)
    pool = "\n".join(f"- {c}" for c in candidates)
    return (
        f"A simulated customer in the scenario '{scenario.name}' has this state: {dims}.\n"
        f"Their planned behaviours:\n{current}\n\n"
        "Keep each behaviour that a person in this state could plausibly show. Replace one that clearly does "
        "not fit with an entry copied EXACTLY from this list (no edits, no new text):\n"
        f'{pool}\n\nAnswer with JSON only: {{"behaviours": [one string per planned behaviour, in order]}}'
    )


def apply_answer(profile: Profile, answer: str, library) -> tuple[Profile, int]:
    """The profile with valid swaps applied, and how many behaviours were swapped."""
    m = _JSON.search(answer or "")
    try:
        proposed = json.loads(m.group(0))["behaviours"] if m else None
    except (ValueError, KeyError, TypeError):
        proposed = None
    if not isinstance(proposed, list) or len(proposed) != len(profile.behaviours):
        return profile, 0
    out, swaps = [], 0
    for old, new in zip(profile.behaviours, proposed):
        ok = isinstance(new, str) and new in library and new not in out and new != old
        out.append(new if ok else old)
        swaps += ok
    return Profile(profile.state, tuple(out)), swaps


async def plausibility_pass(
    profiles: list[Profile], scenario: Scenario, cfg: PlausibilityConfig, *, seed: int = 0
) -> tuple[list[Profile], dict]:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=cfg.base_url, api_key=cfg.api_key, timeout=cfg.timeout, max_retries=1)
    rng = random.Random(seed)
    texts = [b.text for b in scenario.library.behaviours]
    gate = asyncio.Semaphore(cfg.concurrency)
    stats = {"checked": len(profiles), "swapped": 0, "failed": 0}

    async def one(profile: Profile) -> Profile:
        candidates = rng.sample(texts, min(cfg.candidates, len(texts)))
        async with gate:
            try:
                resp = await client.chat.completions.create(
                    model=cfg.model,
                    temperature=0.0,
                    max_tokens=400,
                    messages=[{"role": "user", "content": build_prompt(profile, scenario, candidates)}],
                )
                answer = resp.choices[0].message.content
            except Exception:  # the pass is advisory: a failed call keeps the sampled profile
                stats["failed"] += 1
                return profile
        new, swaps = apply_answer(profile, answer, scenario.library)
        stats["swapped"] += swaps
        return new

    try:
        return list(await asyncio.gather(*(one(p) for p in profiles))), stats
    finally:
        await client.close()


async def training_profiles(
    controller, n: int, scenario: Scenario, cfg: PlausibilityConfig, *, run_seed: int, step: int
) -> tuple[list[Profile], dict | None]:
    """Training step `step`'s `n` profiles as the controller draws them, then checked by the pass where it is
    enabled, seeded by the step (a replayed step, or the same step in the other backend, asks the same). The
    pass's counts ({checked, swapped, failed}) go with them; None where it is off."""
    profiles = controller.sample(n)
    if not cfg.enabled:
        return profiles, None
    return await plausibility_pass(profiles, scenario, cfg, seed=profile_check_seed(run_seed, step))


async def check_endpoint(cfg: PlausibilityConfig) -> None:
    """Where the pass is enabled, fail before a model loads when its endpoint is down or does not serve the model:
    during the run a failed call only keeps the sampled profile, so a dead endpoint would pass unnoticed."""
    if not cfg.enabled:
        return
    import httpx

    from sead.usersim.openai_sim import HEALTH_TIMEOUT_S, probe_endpoint

    async with httpx.AsyncClient(timeout=HEALTH_TIMEOUT_S, headers={"Authorization": f"Bearer {cfg.api_key}"}) as http:
        problem = await probe_endpoint(
            http, cfg.base_url, cfg.model, role="plausibility LLM", hint="set controller.plausibility.model"
        )
    if problem:
        raise SEADInputError(
            f"{problem}; start it, or set controller.plausibility.enabled=false", field="controller.plausibility"
        )
