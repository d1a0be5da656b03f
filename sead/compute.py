"""The tensor work of a run stays on the main thread; its event loop runs beside it, in a helper thread.

torch's CPU kernels run on an OpenMP team that belongs to the thread calling them: every thread that runs a
parallel kernel gets a team of its own, and its workers stay. Once a process holds more OpenMP threads than cores,
GNU OpenMP (torch's CPU build) stops letting idle workers spin: they sleep between parallel regions, and each of
the thousands of small regions of a decoding step waits for its workers to wake. The trainer loaded and updated
the model on the main thread and sampled on a worker thread (`asyncio.to_thread`), so on a 2-vCPU VM its decoding
ran 1.6-1.7x slower than the same decoding in a process with one team (measured 2026-11-26).

`serve(coro)` runs a run's coroutine (training, an evaluation) on an event loop in a helper thread while the main
thread does the tensor work the coroutine hands it with `arun` (awaited: the loop goes on meanwhile) or `run`
(blocking); work begun on the main thread (loading a model, a script calling `sample` itself) runs there as
before. Outside `serve`, `arun` uses a worker thread as `asyncio.to_thread` does.
"""

from __future__ import annotations

import asyncio
import queue
import signal
import threading
from concurrent.futures import Future
from functools import partial

_STOP = object()
_loop_side = threading.local()  # .work: the queue of the `serve` whose loop runs on this thread


def serve(coro):
    """Run `coro` to its end as `asyncio.run` would, its loop in a helper thread, doing the tensor work it hands
    over (`arun`, `run`) on this thread. Ctrl-C cancels the coroutine, as `asyncio.run` does: the piece of work
    under way finishes, the coroutine's cleanup runs, then KeyboardInterrupt is raised here; a second Ctrl-C
    interrupts at once. Off the main thread it is `asyncio.run`."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(coro)
    work, box = queue.SimpleQueue(), {}

    async def tracked():
        box["loop"], box["task"] = asyncio.get_running_loop(), asyncio.current_task()
        return await coro

    def loop_thread():
        _loop_side.work = work
        try:
            box["result"] = asyncio.run(tracked())
        except BaseException as e:  # handed to the main thread, raised there
            box["error"] = e
        finally:
            work.put(_STOP)

    def on_ctrl_c(signum, frame):
        if box.get("interrupted") or "task" not in box:
            raise KeyboardInterrupt
        box["interrupted"] = True
        box["loop"].call_soon_threadsafe(box["task"].cancel)

    # as asyncio.Runner does: only where Ctrl-C would raise KeyboardInterrupt (not where it is ignored)
    ours = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if ours:
        signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        threading.Thread(target=loop_thread, name="sead-event-loop", daemon=True).start()
        _do_work(work)
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if box.get("interrupted"):
        raise KeyboardInterrupt
    if "error" in box:
        raise box["error"]
    return box.get("result")


def _do_work(work: queue.SimpleQueue) -> None:
    """Run what the loop hands over until it stops."""
    while (item := work.get()) is not _STOP:
        fut, call = item
        if fut.set_running_or_notify_cancel():  # False: its awaiter was cancelled before it started
            try:
                fut.set_result(call())
            except BaseException as e:
                fut.set_exception(e)


def _hand_over(call) -> Future | None:
    """Queue `call` for the main thread when this thread runs the loop of a `serve`; None otherwise."""
    work = getattr(_loop_side, "work", None)
    if work is None:
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
