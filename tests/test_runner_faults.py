"""The batch runner against a real HTTP user simulator that misbehaves: it keeps going, retries as configured,
accounts for every episode, loses no finished rollout, and never hangs."""

import asyncio
import time

import pytest

from sead.config import build_usersim, load_config
from sead.dialogue import EpisodeJob, RolloutLog, RunnerConfig, TextAgent, read_rollouts, run_batch
from sead.metrics import compute_metrics
from sead.scenario import Profile
from sead.testing.fake_openai_server import FakeOpenAIServer, scripted_user_turn


class SteadyAgent(TextAgent):
    """Always follows the format; content does not matter here."""

    def __init__(self, tok, scenario):
        super().__init__(tok)
        self.scenario = scenario

    async def reply(self, messages, seed):
        n = sum(m["role"] == "assistant" for m in messages)
        return self.scenario.tags.format_agent(
            f"Step {n}: please open the app.", {"cooperation": 2, "emotion": 1, "trust": 2, "noise": 0}, min(n, 3), 0
        )


def jobs(n):
    return [
        EpisodeJob(Profile.make({"cooperation": 2, "emotion": 1, "trust": 2}, []), seed=i, episode_id=f"e{i}")
        for i in range(n)
    ]


def simulator(restaurant, urls, timeout=2.0):
    cfg = load_config(
        [
            "usersim=openai",
            f"usersim.base_urls=[{','.join(urls)}]",
            "usersim.model=fake-user-sim",
            f"usersim.timeout={timeout}",
        ]
    )
    return build_usersim(cfg, restaurant)


def run(restaurant, tok, sim, n, log=None, **cfg):
    rc = RunnerConfig(
        **{"user_retries": 2, "backoff_base": 0.01, "backoff_max": 0.05, "user_timeout": 3.0, "concurrency": 8, **cfg}
    )

    async def go():
        try:
            return await run_batch(
                jobs(n),
                scenario=restaurant,
                agent=SteadyAgent(tok, restaurant),
                user=sim,
                tokenizer=tok,
                cfg=rc,
                log=log,
            )
        finally:
            await sim.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("fault", ["http500", "http429", "drop", "empty", "garbage", "delay"])
def test_transient_faults_are_retried_and_episodes_complete(restaurant, smollm_tokenizer, fault):
    with FakeOpenAIServer(scripted_user_turn(finish_after=3)) as server:
        server.inject(fault, n=3, seconds=3.0)  # fewer than the 8 x 3 calls: every episode can recover
        sim = simulator(restaurant, [server.url], timeout=1.0)
        episodes = run(restaurant, smollm_tokenizer, sim, 8)
    assert [e.end_reason for e in episodes] == ["user_success"] * 8
    assert sum(e.meta["user_retries"] for e in episodes) >= 3  # each injected fault cost a retry


def test_persistent_failure_ends_as_sim_error_not_agent_failure(restaurant, smollm_tokenizer):
    with FakeOpenAIServer() as server:
        server.inject("http500", n=1000)
        episodes = run(restaurant, smollm_tokenizer, simulator(restaurant, [server.url]), 4)
        assert len(server.requests) == 4 * 3  # one call plus two retries per episode, then it gives up
    assert all(e.end_reason == "sim_error" and "500" in e.meta["sim_error"] for e in episodes)
    m = compute_metrics(episodes, restaurant.space)
    assert m["counts"]["sim_error"] == 4 and m["counts"]["failed"] == 0 and m["metrics"]["CR"]["n"] == 0


def test_server_dying_mid_batch_loses_no_finished_rollout_and_never_hangs(tmp_path, restaurant, smollm_tokenizer):
    path = tmp_path / "rollouts.jsonl"
    with FakeOpenAIServer(scripted_user_turn(finish_after=4), latency=0.02) as server:
        sim = simulator(restaurant, [server.url])

        async def main():
            with RolloutLog(path) as log:
                loop = asyncio.get_running_loop()
                loop.call_later(0.25, server.kill)  # dies while dialogues are in flight
                rc = RunnerConfig(user_retries=2, backoff_base=0.01, backoff_max=0.05, user_timeout=2.0, concurrency=4)
                try:
                    return await run_batch(
                        jobs(12),
                        scenario=restaurant,
                        agent=SteadyAgent(smollm_tokenizer, restaurant),
                        user=sim,
                        tokenizer=smollm_tokenizer,
                        cfg=rc,
                        log=log,
                    )
                finally:
                    await sim.aclose()

        t0 = time.perf_counter()
        episodes = asyncio.run(main())
        elapsed = time.perf_counter() - t0
    assert elapsed < 30
    reasons = [e.end_reason for e in episodes]
    assert set(reasons) <= {"user_success", "sim_error"}
    assert "user_success" in reasons and "sim_error" in reasons
    logged = list(read_rollouts(path))
    assert len(logged) == 12  # every episode accounted for, each written as it finished
    assert sorted(r["meta"]["episode_id"] for r in logged) == sorted(f"e{i}" for i in range(12))
    assert sum(r["end_reason"] == "user_success" for r in logged) == reasons.count("user_success")


def test_load_balances_over_two_servers(restaurant, smollm_tokenizer):
    with FakeOpenAIServer() as a, FakeOpenAIServer() as b:
        episodes = run(restaurant, smollm_tokenizer, simulator(restaurant, [a.url, b.url]), 6)
        assert abs(len(a.requests) - len(b.requests)) <= 1 and len(a.requests) > 0
    assert all(e.success for e in episodes)


def test_health_check_names_each_unreachable_url_and_only_those(restaurant):
    from sead.errors import SEADInputError

    dead = ["http://127.0.0.1:9/v1", "http://127.0.0.1:99999/v1", "localhost:8000/v1"]
    with FakeOpenAIServer() as live:
        sim = simulator(restaurant, [dead[0], live.url, *dead[1:]])

        async def go():
            try:
                await sim.check_health()
            finally:
                await sim.aclose()

        with pytest.raises(SEADInputError) as e:
            asyncio.run(go())
    message = str(e.value)
    assert all(f"user simulator at {url} is unreachable" in message for url in dead)
    assert live.url not in message


def test_batches_freeze_older_objects_only_while_they_run():
    import gc

    from sead.dialogue.batch import older_objects_frozen

    assert gc.get_freeze_count() == 0
    with older_objects_frozen():
        frozen = gc.get_freeze_count()
        with older_objects_frozen():  # a batch inside another keeps the heap frozen
            pass
        # still frozen, and not frozen again (a frozen object freed meanwhile leaves the count, so not ==)
        assert 0 < gc.get_freeze_count() <= frozen
    assert gc.get_freeze_count() == 0
    gc.freeze()  # someone else's freeze (e.g. before forking workers) is theirs to undo
    try:
        owned = gc.get_freeze_count()
        with older_objects_frozen():
            pass
        assert 0 < gc.get_freeze_count() <= owned  # left frozen, and by them alone
    finally:
        gc.unfreeze()


def test_batches_collect_the_young_generation_less_often_only_while_they_run():
    import gc

    from sead.dialogue.batch import BATCH_YOUNG_THRESHOLD, older_objects_frozen

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with older_objects_frozen():
            with older_objects_frozen():
                assert gc.get_threshold() == (BATCH_YOUNG_THRESHOLD, 10, 10)
            assert gc.get_threshold() == (BATCH_YOUNG_THRESHOLD, 10, 10)  # the outer batch still runs
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(10 * BATCH_YOUNG_THRESHOLD, 5, 5)  # a user's higher threshold is kept
        with older_objects_frozen():
            assert gc.get_threshold() == (10 * BATCH_YOUNG_THRESHOLD, 5, 5)
        gc.set_threshold(0)  # automatic collection switched off stays off
        with older_objects_frozen():
            assert gc.get_threshold()[0] == 0
        assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)


@pytest.mark.parametrize("declared", [None, 30.0])
def test_a_hanging_simulator_is_cut_at_the_runners_deadline_unless_its_own_is_shorter(
    restaurant, smollm_tokenizer, declared
):
    """The runner skips its own timer only for a simulator whose declared deadline is at most the runner's; one
    that declares none, or a longer one, and hangs is still cut at `user_timeout` and retried as configured."""
    from sead.usersim import UserSimulator

    class Hanging(UserSimulator):
        name = "hanging"
        call_deadline = declared

        async def respond(self, profile, history, agent_response, *, seed):
            await asyncio.sleep(3600)

    t0 = time.monotonic()
    episodes = asyncio.run(
        run_batch(
            jobs(2),
            scenario=restaurant,
            agent=SteadyAgent(smollm_tokenizer, restaurant),
            user=Hanging(restaurant),
            tokenizer=smollm_tokenizer,
            cfg=RunnerConfig(user_retries=1, backoff_base=0.01, user_timeout=0.2),
        )
    )
    assert time.monotonic() - t0 < 5
    assert [e.end_reason for e in episodes] == ["sim_error"] * 2
    assert all("no answer within 0.2 s" in e.meta["sim_error"] for e in episodes)


def test_a_rate_limit_is_waited_out_as_its_retry_after_asks(restaurant, smollm_tokenizer, monkeypatch):
    """A burst of 429s once used up every retry within the backoff's fraction of a second and ended dialogues as
    simulator errors; the runner now waits what the server's Retry-After asks (1 s here), up to user_timeout."""
    waits, sleep = [], asyncio.sleep

    async def recorded(seconds, *args):
        waits.append(seconds)
        await sleep(0)

    monkeypatch.setattr("sead.dialogue.runner.asyncio.sleep", recorded)
    with FakeOpenAIServer(scripted_user_turn(finish_after=3)) as server:
        server.inject("http429", n=2)  # each asks for Retry-After: 1
        episodes = run(restaurant, smollm_tokenizer, simulator(restaurant, [server.url]), 1)
    assert episodes[0].end_reason == "user_success" and waits == [1.0, 1.0]


def test_retry_after_is_honoured_up_to_the_user_timeout():
    from sead.dialogue.runner import retry_wait
    from sead.usersim.base import SimulatorError

    cfg = RunnerConfig(backoff_base=0.5, backoff_max=8.0, user_timeout=30.0)
    assert retry_wait(cfg, 1, SimulatorError("HTTP 429")) == 0.5  # no Retry-After: the backoff
    assert retry_wait(cfg, 2, SimulatorError("HTTP 429", retry_after=5.0)) == 5.0
    assert retry_wait(cfg, 3, SimulatorError("HTTP 429", retry_after=0.1)) == 2.0  # never below the backoff
    assert retry_wait(cfg, 1, SimulatorError("HTTP 429", retry_after=86400.0)) == 30.0


def test_an_oversized_reply_is_a_simulator_error_not_the_agents_failure(tmp_path, restaurant, smollm_tokenizer):
    path = tmp_path / "rollouts.jsonl"
    with FakeOpenAIServer(scripted_user_turn(finish_after=3)) as server:
        server.inject("oversized", n=1000)
        with RolloutLog(path) as log:
            episodes = run(restaurant, smollm_tokenizer, simulator(restaurant, [server.url]), 2, log=log)
    assert all(e.end_reason == "sim_error" and "longer than 512 KiB" in e.meta["sim_error"] for e in episodes)
    assert compute_metrics(episodes, restaurant.space)["counts"]["failed"] == 0
    assert path.stat().st_size < 100_000  # the reply was never stored
