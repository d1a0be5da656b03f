"""Rollout concurrency: 256 dialogues against a local OpenAI-compatible user simulator with fixed latency.

Prints wall time / ideal, where ideal is the longest dialogue's sum of agent and user latencies (what a
perfectly concurrent runner would take; target <= 1.2), and the runner's own work per turn (parsing,
tokenising, masking) as a share of the turn time (target < 5%). Also the CPU this process and the fake server
spent: on a machine with busy cores, wall time says more about the neighbours than about the runner, while
this process's CPU per turn against the ideal time per turn says whether one process can keep up at all.

The fake agent answers with token ids, tokenised once per distinct reply, as a sampling backend (vLLM,
transformers) hands the runner ids it sampled on its own device. The fake simulator is the stdlib server in
its own process: its CPU shares this machine's cores, which a real simulator (on its own GPUs) would not.

    .venv/bin/python benchmarks/rollout_concurrency.py [--dialogues 256] [--latency 0.05] [--turns 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager

from rich.progress import Progress

from sead.config import build_scenario, build_usersim, load_config
from sead.dialogue import AgentOutput, AgentPolicy, EpisodeJob, RunnerConfig, run_batch
from sead.models.precision import cpu_info
from sead.models.smollm import load_tokenizer
from sead.scenario import Profile


@contextmanager
def simulator_server(latency: float, finish_after: int):
    """The fake simulator in its own process, as a real vLLM server would be."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sead.testing.fake_openai_server",
            "--latency",
            str(latency),
            "--finish-after",
            str(finish_after),
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dialogues", type=int, default=256)
    ap.add_argument("--latency", type=float, default=0.05, help="seconds, for the user server and for the agent")
    ap.add_argument("--turns", type=int, default=15)
    args = ap.parse_args()

    scenario = build_scenario(load_config([]))
    tok = load_tokenizer()
    agent = FixedLatencyAgent(tok, scenario, args.latency)
    jobs = [
        EpisodeJob(Profile.make({"cooperation": 2, "emotion": 1, "trust": 2}, []), seed=i, episode_id=str(i))
        for i in range(args.dialogues)
    ]
    cfg = RunnerConfig(max_turns=args.turns, concurrency=args.dialogues, user_timeout=30.0)
    # The user finishes one turn before the limit, so every dialogue has turns-1 user calls.
    with simulator_server(args.latency, args.turns - 1) as (url, server_pid), Progress() as progress:
        user = build_usersim(
            load_config(["usersim=openai", f"usersim.base_urls=[{url}]", "usersim.model=fake-user-sim"]), scenario
        )
        bar = progress.add_task("dialogues", total=len(jobs))

        async def go():
            try:
                return await run_batch(
                    jobs,
                    scenario=scenario,
                    agent=agent,
                    user=user,
                    tokenizer=tok,
                    cfg=cfg,
                    on_done=lambda ep: progress.advance(bar),
                )
            finally:
                await user.aclose()

        load_before = round(os.getloadavg()[0], 2)
        server_cpu0, t0, cpu0 = process_cpu_s(server_pid), time.perf_counter(), time.process_time()
        episodes = asyncio.run(go())
        wall, client_cpu = time.perf_counter() - t0, time.process_time() - cpu0
        server_cpu = process_cpu_s(server_pid) - server_cpu0
    turns = [len(e.turns) for e in episodes]
    user_calls = [sum(t.user is not None for t in e.turns) for e in episodes]
    ideal = max(t * args.latency + u * args.latency for t, u in zip(turns, user_calls))
    runner_s = sum(e.meta["timing"]["runner_s"] for e in episodes)
    turn_time = sum(e.meta["timing"]["total_s"] for e in episodes) / sum(turns)
    overhead = runner_s / sum(turns) / turn_time
    client_ms, ideal_ms = 1000 * client_cpu / sum(turns), 1000 * ideal / sum(turns)
    result = {
        "cpu": cpu_info()["model"],
        "cpus": os.cpu_count(),
        "load_avg_1min_before": load_before,
        "dialogues": len(episodes),
        "turns_total": sum(turns),
        "wall_s": round(wall, 3),
        "ideal_s": round(ideal, 3),
        "wall_over_ideal": round(wall / ideal, 3),
        "runner_ms_per_turn": round(1000 * runner_s / sum(turns), 3),
        "runner_overhead_pct_of_turn": round(100 * overhead, 2),
        "end_reasons": sorted({e.end_reason for e in episodes}),
        # Where the CPU went: this process (runner, fake agent, HTTP client) and the fake server, which
        # shares the machine's cores (a real simulator runs on its own GPUs).
        "client_cpu_ms_per_turn": round(client_ms, 3),
        "client_cpu_over_ideal": round(client_cpu / ideal, 3),
        "server_cpu_ms_per_user_call": round(1000 * server_cpu / max(1, sum(user_calls)), 3),
    }
    print(json.dumps(result, indent=2))
    print(
        f"wall/ideal = {wall / ideal:.3f} (target <= 1.2) on {result['cpu']} x {result['cpus']}, 1-min load "
        f"{load_before} before the run; a perfectly concurrent run on one core needs at most {ideal_ms:.2f} ms of "
        f"CPU per turn, this process spent {client_ms:.2f} (so on an idle core it could reach "
        f"{max(1.0, client_cpu / ideal):.2f} x ideal)"
    )
    print(f"runner overhead = {100 * overhead:.2f}% of turn time (target < 5%)")
    print(
        f"the fake simulator spent {result['server_cpu_ms_per_user_call']:.2f} ms of CPU per call on these same "
        "cores; a real simulator runs on its own GPUs and cores"
    )


if __name__ == "__main__":
    main()
