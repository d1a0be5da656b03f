"""Where a run's tensor work happens (`sead.compute`): on the main thread, the event loop beside it, so the
process keeps one OpenMP team (a second one made torch's decoding 1.6-1.7x slower on 2 vCPUs)."""

import asyncio
import shutil
import signal
import threading
import time

import pytest
import torch
from transformers import LlamaForCausalLM

from sead import compute
from sead.cli.main import main
from sead.config import load_config
from sead.run.layout import RunLayout
from sead.trainer.loop import train

MAIN = threading.main_thread()


def test_serve_runs_the_loop_beside_and_the_handed_work_on_the_main_thread():
    seen = {}

    async def job():
        seen["loop"] = threading.current_thread()
        seen["arun"] = await compute.arun(threading.current_thread)
        seen["run"] = compute.run(threading.current_thread)
        return 42

    assert compute.serve(job()) == 42
    assert seen["loop"] is not MAIN and seen["arun"] is MAIN and seen["run"] is MAIN


def test_outside_serve_arun_leaves_the_loop_free_and_run_stays_where_it_is():
    async def job():
        return await compute.arun(threading.current_thread), compute.run(threading.current_thread)

    handed, here = asyncio.run(job())
    assert handed is not MAIN and here is MAIN


def test_errors_reach_the_awaiting_code_and_the_caller_of_serve():
    async def job():
        with pytest.raises(ZeroDivisionError):
            await compute.arun(lambda: 1 / 0)
        raise KeyError("from the coroutine")

    with pytest.raises(KeyError, match="from the coroutine"):
        compute.serve(job())
    assert compute.serve(asyncio.sleep(0, result="again")) == "again"  # nothing of the failed run is left behind


def test_serve_off_the_main_thread_is_plain_asyncio_run_and_serve_nests():
    out = {}

    async def inner():
        return threading.current_thread(), await compute.arun(threading.current_thread)

    thread = threading.Thread(target=lambda: out.setdefault("t", compute.serve(inner())))
    thread.start()
    thread.join()
    assert out["t"][0] is thread and out["t"][1] not in (thread, MAIN)  # asyncio.to_thread's worker

    async def outer():
        return await compute.arun(compute.serve, inner())  # a serve inside a piece of handed-over work

    loop, work = compute.serve(outer())
    assert loop is not MAIN and work is MAIN


def ctrl_c(job):
    """serve(job()) under Python's own Ctrl-C handler, as `sead train` has it (a runner started in the background
    ignores SIGINT, and so would these tests); the handler is back afterwards."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            compute.serve(job())
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_the_main_thread_waits_cancels_the_run_and_is_raised():
    cleaned = []

    async def job():
        try:
            await asyncio.sleep(0.05)  # the main thread is waiting for work by now
            signal.pthread_kill(MAIN.ident, signal.SIGINT)
            await asyncio.sleep(30)
        finally:
            cleaned.append(True)

    ctrl_c(job)
    assert cleaned == [True]  # the coroutine's finally ran before serve returned


def test_ctrl_c_during_handed_over_work_lets_it_finish_then_cancels_the_run():
    done = []

    def work():
        signal.pthread_kill(MAIN.ident, signal.SIGINT)  # arrives while this runs on the main thread
        time.sleep(0.2)
        done.append("work")

    async def job():
        try:
            await compute.arun(work)
            await asyncio.sleep(30)
        finally:
            done.append("cleanup")

    ctrl_c(job)
    assert sorted(done) == ["cleanup", "work"]  # the work was not cut short, and the run cleaned up


@pytest.fixture
def forward_threads(monkeypatch):
    """The thread of every forward and backward of the tiny Llama while the test runs."""
    threads = []
    forward, backward = LlamaForCausalLM.forward, torch.Tensor.backward

    def record_forward(self, *a, **k):
        threads.append(("forward", threading.current_thread()))
        return forward(self, *a, **k)

    def record_backward(self, *a, **k):
        threads.append(("backward", threading.current_thread()))
        return backward(self, *a, **k)

    monkeypatch.setattr(LlamaForCausalLM, "forward", record_forward)
    monkeypatch.setattr(torch.Tensor, "backward", record_backward)
    return threads


def test_a_training_run_and_an_evaluation_do_their_tensor_work_on_the_main_thread(tmp_path, forward_threads):
    run = train(
        load_config(
            [
                "preset=tiny",
                "trainer.warmup.dialogues=2",
                "trainer.update.entropy_coef=0.05",  # the random model's flat rewards still give an update
                "trainer.iterations=1",
                "trainer.steps_per_iteration=1",
                f"run_dir={tmp_path / 'run'}",
            ]
        )
    )
    kinds = {kind for kind, _ in forward_threads}
    assert kinds == {"forward", "backward"} and len(forward_threads) > 10  # sampling, warm-up and update
    assert {t for _, t in forward_threads} == {MAIN}
    forward_threads.clear()
    shutil.copytree(RunLayout(run).checkpoint(1).model, tmp_path / "tiny")
    evaluation = ["eval", str(tmp_path / "tiny"), "preset=tiny", "eval.limit=2", "eval.max_new_tokens=8"]
    assert main([*evaluation, f"eval.out_dir={tmp_path / 'eval'}", f"eval.testset_dir={tmp_path / 'sets'}"]) == 0
    assert forward_threads and {t for _, t in forward_threads} == {MAIN}
