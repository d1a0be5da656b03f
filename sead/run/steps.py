"""What every training step ends with, in both backends: the controller sees the step's dialogues (phase 4), and
the step's numbers become one line of metrics.jsonl. The embedded trainer adds its update's numbers and timings;
the verl outer loop adds verl's own. Validation and the controller's state after an iteration are written here too,
so the two backends' run directories hold the same files with the same content."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sead.controller import ProfileController, write_controller_report
from sead.dialogue.episode import Episode
from sead.hack_monitor import HackMonitor
from sead.metrics import compute_metrics
from sead.run.layout import RunLayout
from sead.scenario.profile_space import ProfileSpace


@dataclass
class StepRecord:
    """One training step's line in metrics.jsonl. Rewards are those stored in the rollout records; dialogues the
    simulator broke off count in `sim_errors` and nowhere else."""

    reward: float | None
    reward_components: dict[str, float]
    CR: float | None
    turns: float | None
    UPA: float | None
    sim_errors: int
    dialogues: int
    controller_marginals: dict[str, dict[str, float]]  # the sampling shares this step's profiles were drawn with
    controller_update: str | None = None  # the reason, where the controller reweighted after this step
    update: dict = field(default_factory=dict)  # the backend's numbers of the update, written at the top level
    gen_tokens_per_s: float | None = None
    time: dict[str, float] | None = None  # seconds per phase
    hack_monitors: dict | None = None  # sead.hack_monitor.HackMonitor on this step's dialogues (scenarios with rules)
    ACK: float | None = None  # user-side measures (sead.metrics), where the simulator reports them
    CAR: float | None = None
    plausibility: dict | None = None  # {checked, swapped, failed} of the pass over the step's profiles, where on
    response_cache: dict | None = None  # {hits, misses, entries} of the user-response cache, where on

    def to_dict(self) -> dict:
        out = {
            "reward": self.reward,
            "reward_components": self.reward_components,
            "CR": self.CR,
            "turns": self.turns,
            "UPA": self.UPA,
            "sim_errors": self.sim_errors,
            "dialogues": self.dialogues,
            **self.update,
        }
        optional = {
            "gen_tokens_per_s": self.gen_tokens_per_s,
            "time": self.time,
            "hack_monitors": self.hack_monitors,
            "ACK": self.ACK,
            "CAR": self.CAR,
            "plausibility": self.plausibility,
            "response_cache": self.response_cache,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        out["controller_marginals"] = self.controller_marginals
        if self.controller_update is not None:
            out["controller_update"] = self.controller_update
        return out


def finish_step(
    episodes: list[Episode],
    *,
    controller: ProfileController,
    space: ProfileSpace,
    layout: RunLayout,
    monitor: HackMonitor | None = None,
) -> StepRecord:
    """Feed the step's dialogues to the controller, count the step (writing the update report where it reweights)
    and return the step's record. Rewards come from each episode's `meta["reward"]` (None: a simulator error);
    `monitor` adds the reward-hacking monitors, so a policy learning to game the user shows in the log."""
    scores = [ep.meta.get("reward") for ep in episodes]
    for ep, score in zip(episodes, scores):
        controller.observe(ep.profile, None if score is None else ep.success)
    scored = [s for s in scores if s is not None]
    result = compute_metrics(episodes, space, monitor=monitor)
    m = result["metrics"]
    record = StepRecord(
        reward=_mean([s["total"] for s in scored]),
        reward_components={k: _mean([s["components"][k] for s in scored]) for k in scored[0]["components"]}
        if scored
        else {},
        CR=m["CR"]["mean"],
        turns=m["ADT"]["mean"],
        UPA=m["UPA"]["mean"],
        sim_errors=result["counts"]["sim_error"],
        dialogues=len(episodes),
        controller_marginals=sampling_shares(controller),
        hack_monitors=result.get("hack_monitors"),
        ACK=m["ACK"]["mean"],
        CAR=m["CAR"]["mean"],
    )
    report = controller.end_step()
    if report is not None:
        write_controller_report(report, space, layout.controller_dir)
        record.controller_update = report["reason"]
    return record


def sampling_shares(controller: ProfileController) -> dict[str, dict[str, float]]:
    """The shares the controller samples each dimension's values with, as a step's line logs them."""
    return {d: {str(v): p for v, p in mm.items()} for d, mm in controller.marginals().items()}


def unplayed_step(controller: ProfileController, update: dict, seconds: float) -> StepRecord:
    """The record of a step that played no dialogue (the imitation anchor's control): its update and time."""
    return StepRecord(
        reward=None,
        reward_components={},
        CR=None,
        turns=None,
        UPA=None,
        sim_errors=0,
        dialogues=0,
        controller_marginals=sampling_shares(controller),
        update=update,
        time={"rollout_s": 0.0, "update_s": seconds, "step_s": seconds},
    )


def write_controller_state(controller: ProfileController, layout: RunLayout, iteration: int) -> None:
    layout.controller_state(iteration).write_text(json.dumps(controller.state_dict(), indent=1))


def write_validation_metrics(
    episodes: list[Episode],
    *,
    space: ProfileSpace,
    seed: int,
    layout: RunLayout,
    iteration: int,
    step: int,
    train_minutes: float | None,
    averaged: dict | None = None,
) -> dict:
    """The metrics of validation `iteration` (bootstrap CIs seeded by the validation seed), and where on the
    training curve it lies: after `step` steps and `train_minutes` of training (None where not measured); `averaged`:
    which average of the policy's weights was measured (trainer.weight_ema), where one was."""
    m = compute_metrics(episodes, space, seed=seed)
    m["at"] = {"step": step, "train_minutes": train_minutes, **({"averaged": averaged} if averaged else {})}
    layout.validation_metrics(iteration).write_text(json.dumps(m, indent=2))
    return m


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None
