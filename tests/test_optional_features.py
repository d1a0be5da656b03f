"""Options that are off by default: the user-response cache, the plausibility pass, ending on bad format; the
first two as library code and through `sead train` (both backends for the pass; verl refuses the cache)."""

import asyncio
import json
import random

import pandas as pd
import pytest
from verl_fakes import SMALL_DIALOGUES, tiny_model_dir, verl_run_config

from sead.cli.main import main
from sead.config import build_controller
from sead.controller.plausibility import PlausibilityConfig, apply_answer, plausibility_pass, training_profiles
from sead.dialogue import RunnerConfig, run_episode
from sead.dialogue.episode import Episode
from sead.dialogue.response_cache import ResponseCache, ResponseCacheConfig
from sead.dialogue.rollout_log import read_rollouts
from sead.policy.hf import HFPolicy
from sead.policy.scripted import ReferenceAgent
from sead.run.json_lines import read_json_lines
from sead.run.layout import RunLayout
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

    def __init__(self, tok, text="no tags at all"):
        self.tok, self.text = tok, text

    def identity(self):
        return {"name": self.name}

    async def generate(self, request):
        from sead.dialogue import AgentOutput

        return AgentOutput(self.tok.encode(self.text, add_special_tokens=False) + [self.tok.eos_token_id])


# What RL drifted into on 2026-11-27: the first turn's line, then another answer, the other tags dropped.
TWO_ANSWERS = (
    "<response>Hi, this is Alex from the [Platform] advertising team. Am I speaking with the owner?</response>\n"
    "<response>Great! [Platform] is giving your restaurant a free 700-yuan advertising credit.</response>"
)


@pytest.mark.parametrize("text", ["no tags at all", TWO_ANSWERS])
def test_on_malformed_end_stops_at_the_first_bad_turn(restaurant, smollm_tokenizer, text):
    from sead.usersim.scripted import ScriptedUserSimulator

    profile = Profile.make({"cooperation": 2, "emotion": 1, "trust": 2}, [])
    ep = asyncio.run(
        run_episode(
            profile,
            scenario=restaurant,
            agent=OneLineAgent(smollm_tokenizer, text),
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


# --- wired into `sead train` ---------------------------------------------------------------------------------

TINY = [
    "preset=tiny",
    "trainer.iterations=1",
    "trainer.steps_per_iteration=1",
    "trainer.validation.at_start=false",
    "trainer.rollouts_per_profile=1",  # with dynamic sampling, groups of one are all dropped: no update to wait for
    "trainer.update.dynamic_sampling=true",
]
CACHE = [
    "dialogue.response_cache.enabled=true",
    "dialogue.response_cache.hit_rates={0:1.0,1:1.0,2:1.0,3:1.0}",
    "dialogue.response_cache.min_entries=1",
]


def episodes(path) -> list[Episode]:
    return [Episode.from_dict(r) for r in read_rollouts(path)]


def step_records(run) -> list[dict]:
    return [r for r in read_json_lines(RunLayout(run).metrics) if "reward" in r]


@pytest.fixture
def reference_speaking(monkeypatch, restaurant):
    """The tiny model's policy saying the reference agent's lines: a random model never writes the tags that
    declare an SOP stage, and the cache is keyed by that stage."""

    async def generate(self, request):
        return await ReferenceAgent(restaurant, self.tokenizer).generate(request)

    monkeypatch.setattr(HFPolicy, "generate", generate)


@pytest.mark.parametrize("cache", [True, False], ids=["cache on", "cache off (default)"])
def test_sead_train_replays_cached_replies_in_training_dialogues_only(tmp_path, reference_speaking, cache):
    run = tmp_path / "run"
    longer = ["dialogue.max_turns=3", "dialogue.max_new_tokens=200"]  # room for the reference agent's lines
    assert (
        main(["train", *TINY, *longer, "trainer.profiles_per_step=4", *(CACHE if cache else []), f"run_dir={run}"]) == 0
    )
    layout = RunLayout(run)
    (record,) = step_records(run)
    hits = sum(ep.meta["cache_hits"] for ep in episodes(layout.rollouts(1)))
    # validation after the step, with the cache full, still asks the simulator
    assert all(ep.meta["cache_hits"] == 0 for ep in episodes(layout.validation_dialogues(1)))
    if not cache:  # the defaults: neither option leaves a trace
        assert hits == 0 and not layout.response_cache.exists()
        assert "response_cache" not in record and "plausibility" not in record
        return
    stored = list(read_json_lines(layout.response_cache))
    assert record["response_cache"]["hits"] == hits > 0
    assert record["response_cache"]["misses"] > 0 and record["response_cache"]["entries"] == len(stored) > 0
    assert {r["stage"] for r in stored} <= {0, 1, 2, 3} and all("<user_reply>" in r["text"] for r in stored)


def plausible_answers():
    """A fake plausibility LLM that swaps every planned behaviour for the first entries it was offered; the
    answers it gave, in order."""
    given: list[tuple[str, ...]] = []

    def respond(body):
        prompt = body["messages"][0]["content"]
        planned = prompt.split("Their planned behaviours:\n")[1].split("\n\n")[0].splitlines()
        offered = prompt.split("(no edits, no new text):\n")[1].split("\n\n")[0].splitlines()
        given.append(tuple(line[2:] for line in offered[: len(planned)]))
        return json.dumps({"behaviours": list(given[-1])})

    return respond, given


def test_sead_train_checks_each_steps_profiles_when_the_plausibility_pass_is_on(tmp_path):
    respond, given = plausible_answers()
    run = tmp_path / "run"
    with FakeOpenAIServer(respond) as server:
        on = ["controller.plausibility.enabled=true", f"controller.plausibility.base_url={server.url}"]
        assert main(["train", *TINY, *on, "controller.plausibility.model=fake-user-sim", f"run_dir={run}"]) == 0
    (record,) = step_records(run)
    assert record["plausibility"]["checked"] == len(given) == 2  # trainer.profiles_per_step of the tiny preset
    assert record["plausibility"]["failed"] == 0 and record["plausibility"]["swapped"] > 0
    # the dialogues were played with the checked profiles; validation's fixed profiles are never checked
    assert {ep.profile.behaviours for ep in episodes(RunLayout(run).rollouts(1))} == set(given)
    assert not set(given) & {ep.profile.behaviours for ep in episodes(RunLayout(run).validation_dialogues(1))}


def test_an_unreachable_plausibility_llm_is_refused_before_the_model_loads(tmp_path, capsys, monkeypatch):
    def no_loading(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("sead.trainer.loop.load_model", no_loading)
    dead = ["controller.plausibility.enabled=true", "controller.plausibility.base_url=http://127.0.0.1:9/v1"]
    assert main(["train", *TINY, *dead, f"run_dir={tmp_path / 'run'}"]) == 2
    out = capsys.readouterr().out
    assert "[controller.plausibility]" in out and "http://127.0.0.1:9/v1 is unreachable" in out
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "override, field, message",
    [
        ("dialogue.response_cache.hit_rates={0:1.5}", "dialogue.response_cache.hit_rates", "must be >= 0 and <= 1"),
        ("dialogue.response_cache.min_entries=-1", "dialogue.response_cache.min_entries", "must be >= 1"),
        ("+dialogue.response_cache.hit_rates.x=0.5", "dialogue.response_cache.hit_rates.x", "incompatible"),
        ("controller.plausibility.candidates=0", "controller.plausibility.candidates", "must be >= 1"),
        ("trainer.update.imitation_coef=0.5", "trainer.update.imitation_coef", "this run has no warm-up"),
        ("trainer.update.policy_gradient=false", "trainer.update.policy_gradient", "nothing would train"),
    ],
)
def test_sead_train_refuses_bad_settings_naming_the_field(tmp_path, capsys, override, field, message):
    assert main(["train", *TINY, override, f"run_dir={tmp_path / 'run'}"]) == 2
    out = capsys.readouterr().out
    assert f"[{field}" in out and message in out and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "override, field",
    [
        ("dialogue.response_cache.enabled=true", "dialogue.response_cache.enabled"),
        ("trainer.lora.enabled=true", "trainer.lora.enabled"),
        ("trainer.validation.every=2", "trainer.validation.every"),
        ("trainer.update.refill_rounds=1", "trainer.update.refill_rounds"),
        ("trainer.update.loss_tokens=played", "trainer.update.loss_tokens"),
        ("trainer.branch.groups=2", "trainer.branch.groups"),
        ("trainer.group_user=shared", "trainer.group_user"),
        ("trainer.weight_ema=0.9", "trainer.weight_ema"),
        ("trainer.warmup.reuse=/a/warm-up trainer.update.imitation_coef=0.5", "trainer.update.imitation_coef"),
        ("trainer.update.policy_gradient=false", "trainer.update.policy_gradient"),
    ],
)
def test_backend_verl_refuses_embedded_only_settings(tmp_path, capsys, monkeypatch, override, field):
    monkeypatch.setattr("sead.verl_backend.preflight.visible_gpus", lambda: 1)  # past the GPU check, to the config
    model = tiny_model_dir(tmp_path)
    verl = ["backend=verl", "preset=gpu1", f"model.path={model}", *SMALL_DIALOGUES]
    assert main(["train", *verl, *override.split(), f"run_dir={tmp_path / 'run'}"]) == 2
    out = capsys.readouterr().out
    assert f"[{field}]" in out and "embedded-only" in out and not (tmp_path / "run").exists()


def test_the_verl_outer_loop_checks_each_steps_profiles_as_the_embedded_loop_does(tmp_path):
    from sead.verl_backend.outer_loop import VerlTrainer

    respond, given = plausible_answers()
    with FakeOpenAIServer(respond) as server:
        on = ["controller.plausibility.enabled=true", f"controller.plausibility.base_url={server.url}"]
        cfg, scenario = verl_run_config(tmp_path, *on, "controller.plausibility.model=fake-user-sim")
        trainer = VerlTrainer(cfg, runner=None)
        trainer.prepare_iteration(0)
        # what the embedded loop draws for the same steps, from a controller in the same state
        twin = build_controller(cfg, scenario)
        embedded = [
            asyncio.run(
                training_profiles(
                    twin, trainer.tc.profiles_per_step, scenario, trainer.plausibility, run_seed=0, step=s
                )
            )
            for s in (1, 2, 3)
        ]
    spi, per_step = trainer.tc.steps_per_iteration, trainer.tc.profiles_per_step
    assert sorted(trainer.checked) == list(range(1, spi + 1)) == [1, 2, 3]  # the gpu1 preset's 3 steps
    assert all(
        trainer.checked[s] == embedded[s - 1][1] and trainer.checked[s]["checked"] == per_step for s in (1, 2, 3)
    )
    rows = pd.read_parquet(trainer._files(0).train_file)
    written = [json.loads(e["profile"]) for e in rows["extra_info"]]
    assert written == [p.to_dict() for profiles, _ in embedded for p in profiles]
    assert {p.behaviours for profiles, _ in embedded for p in profiles} <= set(given)
