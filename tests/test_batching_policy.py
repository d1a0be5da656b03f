"""BatchingPolicy: the requests of concurrent episodes are sampled as one batch, and whatever becomes of a batch,
every episode waiting on it hears: a sampler that raises, one interrupted by a BaseException (Ctrl-C, a test's
timeout) and an episode that stops while its batch is sampled. A run of 2026-11-30 found the second hanging: the
worker died and 64 episodes awaited answers forever."""

import asyncio
import threading

from sead import compute
from sead.dialogue.agent import AgentOutput, AgentRequest, BatchingPolicy


class Interrupted(BaseException):
    """Stands in for KeyboardInterrupt or pytest-timeout's Failed: not an Exception."""


class Sampler(BatchingPolicy):
    """Answers each request with its seed; raises `fail` on the batch numbered `fail_at` (from 0)."""

    def __init__(self, max_batch: int, fail: BaseException | None = None, fail_at: int = 0):
        super().__init__(max_batch)
        self.batches: list[list[int]] = []
        self.fail, self.fail_at = fail, fail_at

    def sample(self, requests: list[AgentRequest]) -> list[AgentOutput]:
        self.batches.append([r.seed for r in requests])
        if self.fail is not None and len(self.batches) - 1 == self.fail_at:
            raise self.fail
        return [AgentOutput([r.seed]) for r in requests]


def request(seed: int) -> AgentRequest:
    return AgentRequest(prompt_ids=[1], messages=[], max_new_tokens=4, seed=seed)


def outcomes(policy: BatchingPolicy, n: int) -> list:
    """What each of n concurrent requests got back (an output or the exception it raised), under a time limit:
    a request left waiting fails the test instead of hanging it."""

    async def main():
        asks = [policy.generate(request(seed)) for seed in range(n)]
        return await asyncio.wait_for(asyncio.gather(*asks, return_exceptions=True), timeout=30)

    return compute.serve(main())


def test_concurrent_requests_are_sampled_together_and_each_gets_its_own_output():
    policy = Sampler(max_batch=4)
    got = outcomes(policy, 10)
    assert [o.token_ids for o in got] == [[seed] for seed in range(10)]
    assert policy.batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_a_sampler_error_fails_its_batch_only_and_the_rest_are_still_sampled():
    policy = Sampler(max_batch=4, fail=RuntimeError("out of memory"), fail_at=1)
    got = outcomes(policy, 10)
    assert [type(o) for o in got[4:8]] == [RuntimeError] * 4
    assert [o.token_ids for o in got[:4] + got[8:]] == [[s] for s in (0, 1, 2, 3, 8, 9)]


def test_an_interrupted_sampler_answers_every_waiting_request_instead_of_leaving_them_hanging():
    policy = Sampler(max_batch=4, fail=Interrupted(), fail_at=1)
    got = outcomes(policy, 10)
    assert [o.token_ids for o in got[:4]] == [[seed] for seed in range(4)]
    assert all(isinstance(o, Interrupted) for o in got[4:])  # its batch, and the requests queued behind it
    assert policy.batches == [[0, 1, 2, 3], [4, 5, 6, 7]] and policy._pending == []  # the worker stopped there


def test_an_episode_that_stops_while_its_batch_is_sampled_does_not_stop_the_others():
    release = threading.Event()

    class Held(Sampler):
        def sample(self, requests):
            release.wait(timeout=30)
            return super().sample(requests)

    policy = Held(max_batch=4)

    async def main():
        asks = [asyncio.ensure_future(policy.generate(request(seed))) for seed in range(6)]
        await asyncio.sleep(0.05)  # the first batch is being sampled (on a worker thread: no `serve` here)
        asks[1].cancel()
        release.set()
        _, pending = await asyncio.wait(asks, timeout=30)
        return asks, pending

    asks, pending = asyncio.run(main())
    assert not pending and asks[1].cancelled()
    assert [asks[i].result().token_ids for i in (0, 2, 3, 4, 5)] == [[s] for s in (0, 2, 3, 4, 5)]
