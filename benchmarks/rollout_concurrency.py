"""Rollout concurrency: 256 dialogues against a local OpenAI-compatible user simulator with fixed latency.

Prints wall time / ideal, where ideal is the longest dialogue's sum of agent and user latencies (what a
perfectly concurrent runner would take; target <= 1.2), and the runner's own work per turn (parsing,
tokenising, masking) as a share of the turn time (target < 5%). Also the CPU the runner processes and the fake
server spent: on a machine with busy cores, wall time says more about the neighbours than about the runner,
while a runner's CPU per turn against the ideal time per turn says whether one process can keep up at all.

The fake agent answers with token ids, tokenised once per distinct reply, as a sampling backend (vLLM,
transformers) hands the runner ids it sampled on its own device. The fake simulator runs in its own process, by
default the lean one-event-loop server (`--server threaded`: the tests' thread-per-connection server); its CPU
shares this machine's cores, which a real simulator (on its own GPUs) would not.

`--processes N` deals the dialogues out to N runner processes against the same server, as verl's agent-loop
workers (`verl.agent_workers`) share a step's trajectories; the CPU and the bound are then summed over them.

    .venv/bin/python benchmarks/rollout_concurrency.py [--dialogues 256] [--latency 0.05] [--turns 15]
        [--processes 1 [2 ...]] [--server lean [threaded]] [--batches 1] [--rounds 1] [--out runs.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import queue
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from rich.progress import Progress

import sead
from sead.config import build_scenario, build_usersim, load_config
from sead.dialogue import AgentOutput, AgentPolicy, EpisodeJob, RunnerConfig, run_batch
from sead.dialogue.chat_tokens import plain_ids, plain_text
from sead.models.precision import cpu_info, cpu_line
from sead.models.smollm import load_tokenizer
from sead.scenario import Profile


@contextmanager
def simulator_server(latency: float, finish_after: int, threaded: bool):
    """The fake simulator in its own process, as a real vLLM server would be."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",  # not -m: sead.testing imports the module first, and runpy would warn about running it again
            "from sead.testing.fake_openai_server import main; main()",
            "--latency",
            str(latency),
            "--finish-after",
            str(finish_after),
            *(["--threaded"] if threaded else []),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc.stdout.readline().strip(), proc.pid
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


class FixedLatencyAgent(AgentPolicy):
    """Answers after `latency` seconds with the ids of a well-formed turn, as a sampling backend would."""

    def __init__(self, tok, scenario, latency):
        self.tok, self.scenario, self.latency = tok, scenario, latency
        self._ids: dict[int, list[int]] = {}  # turn number -> ids of that turn's reply

    async def generate(self, request):
        await asyncio.sleep(self.latency)
        n = (len(request.messages) - 1) // 2  # agent turns so far: the SOP prompt, then agent and user in turn
        if n not in self._ids:
            text = self.scenario.tags.format_agent(
                f"Thanks for your patience. Step {n}: open the back-office app and tap the button at the top right.",
                {"cooperation": 2, "emotion": 1, "trust": 3, "noise": 0},
                min(n, 3),
                0,
            )
            self._ids[n] = self.tok.encode(text, add_special_tokens=False) + [self.tok.eos_token_id]
        return AgentOutput(list(self._ids[n]))


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of another process (Linux /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def play_share(dialogues: range, url: str, args, start, together, progress) -> None:
    """One runner process: its share of the dialogues, with its own event loop, agent and simulator client, as
    each of verl's agent-loop workers runs its share; `args.batches` times, each batch new dialogues, as a training
    run's steps are played by the same long-lived process. Sets up, says "ready" and waits for `start`, plays each
    batch once every runner is ready for it (`together`), and puts one None per finished dialogue and then its
    figures, one dict per batch, on `progress`."""
    scenario = build_scenario(load_config([]))
    tok = load_tokenizer()
    plain_text(tok, plain_ids(tok, scenario.agent_system_prompt()))  # the once-per-process probes, off the clock
    agent = FixedLatencyAgent(tok, scenario, args.latency)
    user = build_usersim(
        load_config(["usersim=openai", f"usersim.base_urls=[{url}]", "usersim.model=fake-user-sim"]), scenario
    )
    cfg = RunnerConfig(max_turns=args.turns, concurrency=len(dialogues), user_timeout=30.0)

    async def play_batch(batch: int) -> dict:
        jobs = [
            EpisodeJob(Profile.make({"cooperation": 2, "emotion": 1, "trust": 2}, []), seed=seed, episode_id=str(seed))
            for seed in (batch * args.dialogues + i for i in dialogues)
        ]
        t0, cpu0 = time.monotonic(), time.process_time()  # CLOCK_MONOTONIC: one clock for every process
        episodes = await run_batch(
            jobs,
            scenario=scenario,
            agent=agent,
            user=user,
            tokenizer=tok,
            cfg=cfg,
            on_done=lambda ep: progress.put(None),
        )
        return {
            "start": t0,
            "end": time.monotonic(),
            "cpu_s": time.process_time() - cpu0,
            "turns": [len(e.turns) for e in episodes],
            "user_calls": [sum(t.user is not None for t in e.turns) for e in episodes],
            "runner_s": sum(e.meta["timing"]["runner_s"] for e in episodes),
            "turn_s": sum(e.meta["timing"]["total_s"] for e in episodes),
            "end_reasons": sorted({e.end_reason for e in episodes}),
        }

    async def go():
        try:
            played = []
            for batch in range(args.batches):
                if batch:
                    await asyncio.to_thread(together.wait)
                played.append(await play_batch(batch))
            return played
        finally:
            await user.aclose()

    progress.put("ready")
    start.wait()
    progress.put(asyncio.run(go()))


def play(args, url: str, processes: int) -> list[list[dict]]:
    """Every runner process's figures, per batch; the dialogues dealt out in contiguous shares. All start together once
    every runner is set up; one that dies stops the benchmark with an error instead of a wait."""
    ctx = multiprocessing.get_context("fork")  # the shares start from this process's imports, not anew
    start, together, progress = ctx.Event(), ctx.Barrier(processes), ctx.Queue()
    bounds = [round(k * args.dialogues / processes) for k in range(processes + 1)]
    runners = [
        ctx.Process(target=play_share, args=(range(a, b), url, args, start, together, progress), daemon=True)
        for a, b in zip(bounds, bounds[1:])
    ]

    def next_message():
        while True:
            try:
                return progress.get(timeout=1.0)
            except queue.Empty:
                # exit code 0: a runner that sent its figures and ended while the others still play
                if dead := [r.pid for r in runners if r.exitcode not in (None, 0)]:
                    raise RuntimeError(f"runner process(es) {dead} died; the error is printed above") from None

    try:
        for r in runners:
            r.start()
        for _ in runners:
            next_message()  # "ready"
        start.set()
        figures = []
        with Progress() as bar:
            task = bar.add_task("dialogues", total=args.dialogues * args.batches)
            while len(figures) < len(runners):
                message = next_message()
                if message is None:
                    bar.advance(task)
                else:
                    figures.append(message)
        return figures
    finally:
        for r in (r for r in runners if r.pid is not None):
            r.join(timeout=5)  # with their figures sent, runners exit at once; after an error they wait for start
            if r.is_alive():
                r.terminate()
                r.join()


def measure(args, server: str, processes: int) -> dict:
    """One run: every batch of dialogues, `processes` runner processes, against a fresh fake simulator of kind
    `server`. With several batches, the figures are those of the batches after the first (the processes' caches
    and connections already made, as in a training run's later steps); the first batch's are kept beside them."""
    # The user finishes one turn before the limit, so every dialogue has turns-1 user calls.
    with simulator_server(args.latency, args.turns - 1, server == "threaded") as (url, server_pid):
        load_before = round(os.getloadavg()[0], 2)
        server_cpu0 = process_cpu_s(server_pid)
        figures = play(args, url, processes)
        server_cpu = process_cpu_s(server_pid) - server_cpu0
    batches = [[runner[k] for runner in figures] for k in range(args.batches)]
    user_calls = sum(u for batch in batches for f in batch for u in f["user_calls"])
    return {
        "load_avg_1min_before": load_before,
        "dialogues": args.dialogues,
        "runner_processes": processes,
        "server": server,
        "batches": args.batches,
        "figures_of": "the batches after the first" if args.batches > 1 else "the one batch",
        **batch_figures(batches[1:] or batches, args.latency, processes),
        "first_batch": batch_figures(batches[:1], args.latency, processes),
        # The fake server's CPU over every batch; it shares the machine's cores (a real simulator runs on its GPUs).
        "server_cpu_ms_per_user_call": round(1000 * server_cpu / max(1, user_calls), 3),
    }


def batch_figures(batches: list[list[dict]], latency: float, processes: int) -> dict:
    """Wall time against ideal, and where the runners' CPU went, over these batches (each a list of the runner
    processes' figures for it)."""
    turns = [t for batch in batches for f in batch for t in f["turns"]]
    wall = sum(max(f["end"] for f in batch) - min(f["start"] for f in batch) for batch in batches)
    # Ideal: per batch, the longest dialogue's sum of agent and user latencies.
    ideal = sum(max((t + u) * latency for f in batch for t, u in zip(f["turns"], f["user_calls"])) for batch in batches)
    runner_s = sum(f["runner_s"] for batch in batches for f in batch)
    turn_time = sum(f["turn_s"] for batch in batches for f in batch) / sum(turns)
    return {
        "turns_total": sum(turns),
        "wall_s": round(wall, 3),
        "ideal_s": round(ideal, 3),
        "wall_over_ideal": round(wall / ideal, 3),
        "runner_ms_per_turn": round(1000 * runner_s / sum(turns), 3),
        "runner_overhead_pct_of_turn": round(100 * runner_s / sum(turns) / turn_time, 2),
        "end_reasons": sorted({r for batch in batches for f in batch for r in f["end_reasons"]}),
        # The runner processes' CPU (runner, fake agent, HTTP client).
        "client_cpu_ms_per_turn": round(1000 * sum(f["cpu_s"] for batch in batches for f in batch) / sum(turns), 3),
        # A perfectly concurrent run leaves each runner process this much of its own core per turn.
        "cpu_budget_ms_per_turn_per_process": round(1000 * ideal * processes / sum(turns), 3),
    }


def summary(run: dict) -> str:
    first = run["first_batch"]
    warm = (
        f" (batches after the first; the first: wall/ideal {first['wall_over_ideal']:.3f}, runners' CPU "
        f"{first['client_cpu_ms_per_turn']:.3f} ms per turn)"
        if run["batches"] > 1
        else ""
    )
    return (
        f"{run['server']} server, {run['runner_processes']} runner process(es){warm}: wall/ideal "
        f"{run['wall_over_ideal']:.3f} (target <= 1.2; 1-min load {run['load_avg_1min_before']} before); runners' "
        f"CPU {run['client_cpu_ms_per_turn']:.3f} ms per turn (each has {run['cpu_budget_ms_per_turn_per_process']:.2f}"
        f" of its core per turn in a perfectly concurrent run), their own work {run['runner_ms_per_turn']:.2f} ms "
        f"({run['runner_overhead_pct_of_turn']:.2f} % of a turn, target < 5 %); the fake simulator's CPU "
        f"{run['server_cpu_ms_per_user_call']:.2f} ms per call on these cores (a real one runs on its own)"
    )


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dialogues", type=int, default=256)
    ap.add_argument("--latency", type=float, default=0.05, help="seconds, for the user server and for the agent")
    ap.add_argument("--turns", type=int, default=15)
    ap.add_argument(
        "--processes",
        type=int,
        nargs="+",
        default=[1],
        help="runner processes sharing the dialogues (verl's agent workers); several values are measured side by side",
    )
    ap.add_argument(
        "--server",
        choices=("lean", "threaded"),
        nargs="+",
        default=["lean"],
        help="the fake simulator: one event loop (lean) or FakeOpenAIServer's thread per connection, which costs "
        "these cores about 0.3 ms a call; several are measured side by side",
    )
    ap.add_argument(
        "--batches",
        type=int,
        default=1,
        help="batches of --dialogues each runner process plays in turn, as a training run's steps; with more than "
        "one, the figures are the later batches' (warm) and the first batch's beside them",
    )
    ap.add_argument("--rounds", type=int, default=1, help="each setting this many times, interleaved")
    ap.add_argument("--out", type=Path, help="write every run's figures here as JSON")
    args = ap.parse_args(argv)
    if args.batches < 1:
        ap.error(f"--batches must be at least 1, got {args.batches}")
    if not all(1 <= p <= args.dialogues for p in args.processes):
        ap.error(f"--processes must be between 1 and --dialogues ({args.dialogues}), got {args.processes}")

    cpu = cpu_info()
    # Which tree's runner is measured: run from another checkout without PYTHONPATH=., this imports the installed one.
    code = str(Path(sead.__file__).resolve().parent.parent)
    print(f"{cpu_line(cpu)}; {args.dialogues} dialogues x {args.latency * 1000:.0f} ms for the agent and the user")
    print(f"runner code: sead from {code}")
    runs = []
    for _ in range(args.rounds):
        for server in args.server:
            for processes in args.processes:
                run = measure(args, server, processes)
                runs.append(run)
                print(summary(run))
    result = {"cpu": cpu, "sead_from": code, "latency_s": args.latency, "turns": args.turns, "runs": runs}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
