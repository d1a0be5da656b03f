"""Optional LLM plausibility pass over sampled profiles (OFF by default).

An LLM is asked whether each behaviour fits the profile's state. It may swap a behaviour, but only for
another exact entry of the library; the sampled numbers never change (the original let the LLM rewrite them,
which silently broke the curriculum's sampling). Any failure leaves the profile as sampled.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from dataclasses import dataclass

from sead.scenario.profiles import Profile
from sead.scenario.scenario import Scenario

_JSON = re.compile(r"\{.*\}", re.S)


@dataclass
class PlausibilityConfig:
    enabled: bool = False
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "Qwen/Qwen2.5-14B-Instruct"
    api_key: str = "EMPTY"
    timeout: float = 60.0
    candidates: int = 30  # library entries offered as replacements per profile
    concurrency: int = 8


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
