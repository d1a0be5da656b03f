"""trainer.fit_minutes: a run sized to the machine it starts on.

Before anything is played, a probe of a few seconds times this machine's decoding (through the policy that will
play the dialogues) and a training forward + backward. The plan estimates every phase from those rates; where the
whole run would take longer than `fit_minutes`, it imitates fewer warm-up dialogues and validates on fewer
profiles, down to floors, and says so. It never plans fewer RL steps: those are what the run is for.

The estimate is a forecast, not a limit: it models a dialogue as a share of its turn and token limits, so it is
as good as those shares are for the model and scenario at hand (for the CPU demo they come from its own runs).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from omegaconf import DictConfig, OmegaConf

from sead.config import group_config
from sead.dialogue.agent import AgentRequest
from sead.trainer.estimators import Sequence
from sead.trainer.schema import TrainerConfig
from sead.trainer.scoring import masked_logprobs

PROBE_ROWS = 8  # rows the decoding probe samples at once: a CPU run's rollout batch
PROBE_TOKENS = (4, 20)  # two calls: the first also fills the prompt's keys/values, the second only decodes
TRAIN_PROBE_TOKENS = 512  # training probe: the prompt's first tokens, the last quarter scored as agent tokens
# A dialogue as a share of its limits, from the CPU demo's own dialogues (SmolLM2-135M after its warm-up, scripted
# user): turns played of dialogue.max_turns, tokens written of max_new_tokens, and the user's words per turn.
TURN_SHARE, TOKEN_SHARE, USER_TOKENS = 0.6, 0.8, 25
REFILL_SHARE = 0.5
REFERENCE_TURN_SHARE = 0.75  # the scripted reference agent's dialogues of the warm-up's max_turns
WON_SHARE = 0.6  # the reference agent's dialogues won, which a warm-up imitates
WARMUP_FLOOR, VALIDATION_FLOOR = 8, 8  # a warm-up of 8 dialogues (about 5 won) still teaches the format


@dataclass(frozen=True)
class MachineRates:
    step_s: float  # one decoding step of PROBE_ROWS rows
    prefill_s: float  # one prompt token through the model
    train_s: float  # one sequence token through a training forward and backward


@dataclass(frozen=True)
class Plan:
    warmup_dialogues: int
    validation_profiles: int
    phases: dict[str, float]  # expected seconds, by phase
    shrunk: tuple[str, ...] = ()  # what was cut to fit, in words

    @property
    def minutes(self) -> float:
        return sum(self.phases.values()) / 60


def probe(policy, model, prompt_ids: list[int], forward_context=contextlib.nullcontext) -> MachineRates:
    """Time `policy` decoding PROBE_ROWS rows after `prompt_ids`, and `model`'s forward and backward over a
    prompt-long sequence (inside `forward_context`, as the trainer's forwards run). Leaves no gradient and no
    dialogue in the policy's turn cache."""
    short, long = PROBE_TOKENS

    def sample(n: int) -> float:  # the first call also builds or loads the decoding kernels: not timed
        reqs = [AgentRequest(prompt_ids, [], n, seed=i) for i in range(PROBE_ROWS)]
        t0 = time.perf_counter()
        policy.sample(reqs)
        return time.perf_counter() - t0

    sample(1)
    policy.release()  # the prompt's keys and values are computed again, inside the timed call
    first = sample(short)
    step_s = sample(long) / long
    policy.release()
    prefill_s = max(first - short * step_s, 0.0) / len(prompt_ids)
    ids = torch.tensor(prompt_ids[:TRAIN_PROBE_TOKENS])
    mask = torch.zeros_like(ids)
    mask[-len(ids) // 4 :] = 1
    t0 = time.perf_counter()
    with forward_context():
        scored = masked_logprobs(model, [Sequence(ids, mask, 0.0)], 1.0, share_prefix=False)
    scored.logps[0].sum().backward()
    train_s = (time.perf_counter() - t0) / len(ids)
    model.zero_grad(set_to_none=True)
    return MachineRates(step_s, prefill_s, train_s)


def _step_s(rates: MachineRates, rows: int) -> float:
    """A decoding step of `rows` rows: reading the weights dominates few rows, arithmetic many (the exponents
    fit SEAD's decoding on a 2-core AVX2 CPU from 1 to 32 rows)."""
    exponent = 0.5 if rows <= PROBE_ROWS else 0.66
    return rates.step_s * (rows / PROBE_ROWS) ** exponent


def decode_seconds(rates: MachineRates, dialogues: int, *, prompt: int, max_turns: int, max_new: int, batch: int):
    """Dialogues `batch` at a time: the prompt once per call, each turn's user words, then its reply's steps."""
    total = 0.0
    for start in range(0, dialogues, batch):
        rows = min(batch, dialogues - start)
        turns = max(1.0, TURN_SHARE * max_turns)
        per_turn = rows * USER_TOKENS * rates.prefill_s + TOKEN_SHARE * max_new * _step_s(rates, rows)
        total += prompt * rates.prefill_s + turns * per_turn
    return total


def estimate(tc: TrainerConfig, runner, rates: MachineRates, prompt: int, warmup: int, profiles: int) -> dict:
    """Expected seconds of each phase of a run of `tc` from step 0, with `warmup` dialogues and `profiles`."""
    dialogue = dict(prompt=prompt, max_turns=runner.max_turns, max_new=runner.max_new_tokens, batch=tc.max_batch)
    turn_tokens = TOKEN_SHARE * runner.max_new_tokens + USER_TOKENS
    phases: dict[str, float] = {}
    one_validation = decode_seconds(rates, profiles * tc.validation.trials, **dialogue)
    validations = _validations(tc)
    if warmup and not tc.warmup.reuse:
        w = tc.warmup
        length = prompt + REFERENCE_TURN_SHARE * w.max_turns * (TOKEN_SHARE * w.max_new_tokens + USER_TOKENS)
        shared = prompt * (1 - 1 / w.micro_batch)  # the prompt runs once per micro-batch
        phases["warm-up"] = math.ceil(WON_SHARE * warmup) * w.epochs * (length - shared) * rates.train_s
    steps = tc.iterations * tc.steps_per_iteration
    if steps:
        n = tc.profiles_per_step * tc.rollouts_per_profile
        # dynamic sampling plays a refill round where a step's groups all scored alike: about every other step in
        # the CPU demo's runs
        refills = REFILL_SHARE * tc.update.refill_rounds if tc.update.dynamic_sampling else 0
        rollouts = (1 + refills) * decode_seconds(rates, n, **dialogue)
        # the prompt runs once per mini-batch of the update (`SharedContext`), each dialogue's own turns once
        tokens = tc.update.mini_batches * prompt + n * TURN_SHARE * runner.max_turns * turn_tokens
        passes = 1 + (1 / 3 if tc.update.kl_coef else 0)  # the reference's forward: a third of forward + backward
        phases["RL steps"] = steps * (rollouts + tokens * rates.train_s * passes)
    phases["validation"] = validations * one_validation
    return phases


def _validations(tc: TrainerConfig) -> int:
    its = tc.iterations
    after = sum(1 for i in range(1, its + 1) if i % tc.validation.every == 0 or i == its)
    warmed = tc.warmup.dialogues or tc.warmup.reuse
    return after + int(tc.validation.at_start) + int(bool(warmed and tc.validation.before_warmup))


def fit(tc: TrainerConfig, runner, rates: MachineRates, prompt: int, minutes: float) -> Plan:
    """The plan of `tc` within `minutes` where cutting the warm-up and validation to their floors allows it
    (otherwise the smallest), halving the warm-up first: on a CPU it is the costliest phase."""
    warm, profiles = tc.warmup.dialogues, tc.validation.profiles
    floor_w, floor_v = min(warm, WARMUP_FLOOR), min(profiles, VALIDATION_FLOOR)
    while True:
        phases = estimate(tc, runner, rates, prompt, warm, profiles)
        if sum(phases.values()) <= 60 * minutes or (warm, profiles) == (floor_w, floor_v):
            break
        if warm > floor_w:
            warm = max(floor_w, warm * 3 // 4)
        else:
            profiles = max(floor_v, profiles * 3 // 4)
    shrunk = tuple(
        f"{what} {now} (of {was})"
        for what, now, was in (
            ("warm-up dialogues", warm, tc.warmup.dialogues),
            ("validation profiles", profiles, tc.validation.profiles),
        )
        if now != was
    )
    return Plan(warm, profiles, phases, shrunk)


def describe(plan: Plan, tc: TrainerConfig, fit_minutes: float) -> list[str]:
    """The plan as the run prints it at its start: what it will do, how long that should take, what was cut."""
    steps = tc.iterations * tc.steps_per_iteration
    parts = [f"{plan.warmup_dialogues} warm-up dialogues"] if "warm-up" in plan.phases else []
    parts += [
        f"{steps} RL steps of {tc.profiles_per_step * tc.rollouts_per_profile} dialogues",
        f"{_validations(tc)} validations of {plan.validation_profiles} profiles",
    ]
    each = ", ".join(f"{name} {seconds / 60:.1f}" for name, seconds in plan.phases.items())
    lines = [f"plan: {', '.join(parts)}; expected {plan.minutes:.0f} min on this machine ({each} min)"]
    if plan.shrunk:
        over = " (still over: RL steps are never cut)" if plan.minutes > fit_minutes else ""
        lines.append(
            f"this machine is slower than trainer.fit_minutes={fit_minutes:g} allows: {', '.join(plan.shrunk)}{over}"
        )
    return lines


def fit_config(cfg: DictConfig, runner, rates: MachineRates, prompt: int, say: Callable[[str], object]) -> bool:
    """Plan the run of `cfg` (its trainer.fit_minutes) for `rates`, `say` the plan, and write what it cuts into
    `cfg`; True where it cut."""
    tc: TrainerConfig = group_config(cfg, "trainer")
    plan = fit(tc, runner, rates, prompt, tc.fit_minutes)
    for line in describe(plan, tc, tc.fit_minutes):
        say(line)
    if plan.shrunk:
        OmegaConf.update(cfg, "trainer.warmup.dialogues", plan.warmup_dialogues)
        OmegaConf.update(cfg, "trainer.validation.profiles", plan.validation_profiles)
    return bool(plan.shrunk)
