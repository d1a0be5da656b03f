"""Options that are off by default: the user-response cache, the plausibility pass, ending on bad format."""

import asyncio
import json
import random

from sead.controller.plausibility import PlausibilityConfig, apply_answer, plausibility_pass
from sead.dialogue import RunnerConfig, run_episode
from sead.dialogue.response_cache import ResponseCache, ResponseCacheConfig
from sead.scenario import Profile
from sead.testing.fake_openai_server import FakeOpenAIServer


def test_cache_waits_for_min_entries_never_hits_twice_in_a_row_and_persists(tmp_path):
    cfg = ResponseCacheConfig(enabled=True, hit_rates={0: 1.0}, min_entries=3, path=str(tmp_path / "c.jsonl"))
    cache = ResponseCache(cfg)
    rng = random.Random(0)
    cache.add(0, "<user_reply>first reply</user_reply>")
    cache.add(0, "short")  # under min_chars: not stored
    assert cache.lookup(0, rng, previous_was_hit=False) is None  # only 1 entry < min_entries
    cache.add(0, "<user_reply>second reply</user_reply>")
    cache.add(0, "<user_reply>third reply</user_reply>")
    hit = cache.lookup(0, rng, previous_was_hit=False)
    assert hit is not None and "reply" in hit
    assert cache.lookup(0, rng, previous_was_hit=True) is None
    assert cache.lookup(1, rng, previous_was_hit=False) is None  # stage 1 has no rate, no entries
    cache.close()
    again = ResponseCache(cfg)  # reloaded from disk
    assert len(again.entries[0]) == 3
    again.close()


class OneLineAgent:
    name = "bad"

    def __init__(self, tok):
        self.tok = tok

    def identity(self):
        return {"name": self.name}

    async def generate(self, request):
        from sead.dialogue import AgentOutput

        return AgentOutput(self.tok.encode("no tags at all", add_special_tokens=False) + [self.tok.eos_token_id])


def test_on_malformed_end_stops_at_the_first_bad_turn(restaurant, smollm_tokenizer):
    from sead.usersim.scripted import ScriptedUserSimulator

    profile = Profile.make({"cooperation": 2, "emotion": 1, "trust": 2}, [])
    ep = asyncio.run(
        run_episode(
            profile,
            scenario=restaurant,
            agent=OneLineAgent(smollm_tokenizer),
            user=ScriptedUserSimulator(restaurant),
            tokenizer=smollm_tokenizer,
            cfg=RunnerConfig(on_malformed="end"),
            seed=1,
        )
    )
    assert ep.end_reason == "format_error" and len(ep.turns) == 1 and not ep.success


def test_plausibility_swaps_only_for_exact_library_entries_and_keeps_numbers(restaurant):
    lib = [b.text for b in restaurant.library.behaviours]
    profile = Profile.make({"cooperation": 1, "emotion": 2, "trust": 3}, [lib[0], lib[1]])
    swapped, n = apply_answer(profile, json.dumps({"behaviours": [lib[5], lib[1]]}), restaurant.library)
    assert n == 1 and swapped.behaviours == (lib[5], lib[1]) and swapped.state == profile.state
    invented, n = apply_answer(profile, json.dumps({"behaviours": ["Sings loudly.", lib[1]]}), restaurant.library)
    assert n == 0 and invented == profile
    assert apply_answer(profile, "not json", restaurant.library) == (profile, 0)
    assert apply_answer(profile, json.dumps({"behaviours": [lib[5]]}), restaurant.library) == (profile, 0)


def test_plausibility_pass_against_a_server_and_when_it_fails(restaurant):
    lib = [b.text for b in restaurant.library.behaviours]
    profiles = [Profile.make({"cooperation": 2, "emotion": 1, "trust": 2}, [lib[0]]) for _ in range(3)]
    with FakeOpenAIServer(lambda body: json.dumps({"behaviours": [lib[7]]})) as server:
        server.inject("http500", n=1)
        cfg = PlausibilityConfig(enabled=True, base_url=server.url, model="fake-user-sim", timeout=5.0)
        out, stats = asyncio.run(plausibility_pass(profiles, restaurant, cfg, seed=0))
        assert lib[0] in server.requests[0]["messages"][0]["content"]
    assert stats["checked"] == 3 and stats["swapped"] + stats["failed"] == 3
    assert sum(p.behaviours == (lib[7],) for p in out) == stats["swapped"]
    assert all(p.state == profiles[0].state for p in out)
