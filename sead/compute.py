"""The tensor work of a run stays on the main thread; its event loop runs beside it, in a helper thread.

torch's CPU kernels run on an OpenMP team that belongs to the thread calling them: every thread that runs a
parallel kernel gets a team of its own, and its workers stay. Once a process holds more OpenMP threads than cores,
GNU OpenMP (torch's CPU build) stops letting idle workers spin: they sleep between parallel regions, and each of
the thousands of small regions of a decoding step waits for its workers to wake. The trainer loaded and updated
the model on the main thread and sampled on a worker thread (`asyncio.to_thread`), so on a 2-vCPU VM its decoding
ran 1.6-1.7x slower than the same decoding in a process with one team (benchmarks/RESULTS.md).

`serve(coro)` runs a run's coroutine (training, an evaluation) on an event loop in a helper thread while the main
thread does the tensor work the coroutine hands it with `arun` (awaited: the loop goes on meanwhile) or `run`
(blocking); work begun on the main thread (loading a model, a script calling `sample` itself) runs there as
before. Outside `serve`, `arun` uses a worker thread as `asyncio.to_thread` does.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import Future
from functools import partial

_STOP = object()
_work: queue.SimpleQueue | None = None  # tensor work for the main thread, while `serve` runs


def serve(coro):
    """Run `coro` to its end as `asyncio.run` would, its loop in a helper thread, doing the tensor work it hands
    over (`arun`, `run`) on this thread. Ctrl-C cancels the coroutine (its `finally` blocks run) and is raised
    here. Off the main thread, or inside another `serve`, it is `asyncio.run`."""
    global _work
    if threading.current_thread() is not threading.main_thread() or _work is not None:
        return asyncio.run(coro)
    work, box = queue.SimpleQueue(), {}

    async def tracked():
        box["loop"], box["task"] = asyncio.get_running_loop(), asyncio.current_task()
        return await coro

    def loop_side():
        try:
            box["result"] = asyncio.run(tracked())
        except BaseException as e:  # handed to the main thread, raised there
            box["error"] = e
        finally:
            work.put(_STOP)

    _work = work
    try:
        threading.Thread(target=loop_side, name="sead-event-loop", daemon=True).start()
        interrupted = _do_work(work, box)
    finally:
        _work = None
    if interrupted:
        raise KeyboardInterrupt
    if "error" in box:
        raise box["error"]
    return box.get("result")


def _do_work(work: queue.SimpleQueue, box: dict) -> bool:
    """Run what the loop hands over until it stops; True if Ctrl-C came while waiting (the coroutine was then
    cancelled). Ctrl-C inside a piece of work is that work's exception, raised where it was awaited."""
    interrupted = False
    while True:
        try:
            item = work.get()
        except KeyboardInterrupt:
            interrupted = True
            if "task" in box:
                box["loop"].call_soon_threadsafe(box["task"].cancel)
            continue
        if item is _STOP:
            return interrupted
        fut, call = item
        if fut.set_running_or_notify_cancel():  # False: its awaiter was cancelled before it started
            try:
                fut.set_result(call())
            except BaseException as e:
                fut.set_exception(e)


def _hand_over(call) -> Future | None:
    """Queue `call` for the main thread when this is the loop of a `serve`; None otherwise."""
    work = _work
    if work is None or threading.current_thread() is threading.main_thread():
        return None
    fut = Future()
    work.put((fut, call))
    return fut


async def arun(fn, /, *args, **kwargs):
    """fn(*args, **kwargs) awaited: on the main thread under `serve`, else on a worker thread."""
    call = partial(fn, *args, **kwargs)
    fut = _hand_over(call)
    if fut is None:
        return await asyncio.to_thread(call)
    return await asyncio.wrap_future(fut)


def run(fn, /, *args, **kwargs):
    """fn(*args, **kwargs), blocking: on the main thread under `serve`, else right here."""
    fut = _hand_over(partial(fn, *args, **kwargs))
    return fn(*args, **kwargs) if fut is None else fut.result()
