"""Off a terminal (a log file, CI) long phases print a line with done/total, elapsed time and ETA when they start and
every LOG_EVERY seconds; on a terminal the rich bar alone draws."""

import io
import threading

from rich.console import Console

from sead.cli.main import main
from sead.progress import LOG_EVERY, LoggedProgress, phase, progress_bar


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=200), out


def _printed(out: io.StringIO, text: str, timeout: float = 10.0) -> bool:
    """Whether `text` reaches `out` within `timeout` seconds (the log thread prints on its own schedule)."""
    seen = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if text in out.getvalue():
            return True
        seen.wait(0.01)
    return False


def test_off_a_terminal_a_task_logs_when_added_and_then_every_interval():
    console, out = _console(terminal=False)
    with progress_bar(console, log_every=0.01) as progress:
        task = progress.add_task("[bold]eval model", total=4)
        assert out.getvalue().startswith("[progress] eval model: 0/4 (0%), 0:00:00 elapsed, ETA ?\n")
        progress.advance(task)
        assert _printed(out, "[progress] eval model: 1/4 (25%)")
        progress.advance(task, 3)
    finished = out.getvalue().rsplit("eval model: 1/4", 1)[1]
    assert "[progress] eval model: 4/4" not in finished  # a finished task logs no more


def test_the_eta_is_the_mean_rate_since_the_task_was_added():
    console, _ = _console(terminal=False)
    now = [0.0]
    progress = LoggedProgress(console=console, log_every=LOG_EVERY, get_time=lambda: now[0])
    task = progress.add_task("validation", total=10, completed=4)  # 4 done by an earlier, resumed run
    now[0] = 30.0
    progress.advance(task, 2)  # 2 in 30 s: the 4 left take a minute
    assert progress.status_lines() == ["[progress] validation: 6/10 (60%), 0:00:30 elapsed, ETA 0:01:00"]


def test_on_a_terminal_only_the_bar_draws():
    console, out = _console(terminal=True)
    with progress_bar(console, log_every=0.001) as progress:
        task = progress.add_task("eval model", total=2)
        progress.advance(task)
        assert progress._thread is None
    assert "[progress]" not in out.getvalue()


def test_a_phase_without_counts_logs_its_start_and_elapsed_time():
    console, out = _console(terminal=False)
    with phase(console, "converting the model", log_every=0.01):
        assert _printed(out, "[progress] converting the model: 0/1 (0%), 0:00:00 elapsed, ETA ?")
        assert _printed(out, "elapsed, ETA ?\n[progress] converting the model: 0/1")  # and again while it runs


def test_an_evaluation_logs_its_progress(tmp_path, capsys):
    argv = ["eval", "scripted:reference", "eval.limit=3", f"eval.out_dir={tmp_path}", f"eval.testset_dir={tmp_path}"]
    assert main(argv) == 0
    assert "[progress] eval scripted-reference: 0/3 (0%)" in capsys.readouterr().out
