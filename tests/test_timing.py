"""sead.timing.timed: the clock waits for queued device work before it starts and before it stops."""

from sead.timing import timed


def test_sync_runs_before_the_clock_starts_and_before_it_stops():
    events = []
    seconds = timed(lambda: events.append("call"), 2, sync=lambda: events.append("sync"))
    assert events == ["sync", "call", "sync"] * 2
    assert seconds >= 0


def test_without_sync_only_the_calls_run():
    events = []
    timed(lambda: events.append("call"), 3)
    assert events == ["call"] * 3
