"""What a training step plays: `profiles_per_step` GRPO groups from the controller (with dynamic sampling, refill
rounds while no group carries a gradient), and the branched groups cut from them (`trainer.branch`)."""

from __future__ import annotations

from dataclasses import replace

from sead.controller.plausibility import training_profiles
from sead.dialogue import EpisodeJob
from sead.dialogue.seeds import group_agent_seed, train_episode_seed
from sead.policy.scripted import ReferenceAgent
from sead.scenario.profiles import Profile
from sead.trainer.branching import branch_jobs


def rollout_jobs(
    profiles: list[Profile], *, run_seed: int, step: int, group_size: int, first: int = 0, shared_user: bool = False
) -> list[EpisodeJob]:
    """A training step's dialogues: `group_size` rollouts of each profile, one GRPO group per profile. `first`
    numbers the profiles of a refill round after those already played in the step. `shared_user`: every rollout
    of a profile meets the user its first rollout meets, and the agent samples from a seed of its own."""
    return [
        EpisodeJob(
            p,
            seed=train_episode_seed(run_seed, step, i, 0 if shared_user else k, group_size),
            episode_id=f"s{step}-p{i}-r{k}",
            group=i,
            agent_seed=group_agent_seed(run_seed, step, i, k) if shared_user else None,
        )
        for i, p in enumerate(profiles, start=first)
        for k in range(group_size)
    ]


def groups_with_gradient(episodes) -> int:
    """GRPO groups whose scored rollouts do not all share one reward."""
    rewards: dict[int, set[float]] = {}
    for e in episodes:
        if e.meta["reward"] is not None:
            rewards.setdefault(e.meta["group"], set()).add(e.meta["reward"]["total"])
    return sum(len(r) > 1 for r in rewards.values())


class StepPlays:
    """The dialogues of a step, as methods of the `Trainer` (which holds the controller, the policy and the run
    directory these read, and `_play`)."""

    async def _rollouts(self, progress) -> tuple[list, dict | None, int]:
        """The step's dialogues, the plausibility pass's counts (None where off) and the refill rounds played:
        `profiles_per_step` profiles from the controller, and with dynamic sampling more rounds of new ones while
        no group carries a gradient, up to `refill_rounds` (DAPO refills until its whole batch has a gradient;
        one group is enough for an update, at a fraction of the rollouts)."""
        u, run_seed = self.tc.update, int(self.cfg.seed)
        eps, checked, refills = [], None, 0
        while True:
            profiles, counts = await training_profiles(
                self.controller,
                self.tc.profiles_per_step,
                self.scenario,
                self.plausibility,
                run_seed=run_seed,
                step=self.step,
            )
            checked = counts if checked is None else counts and {k: v + counts[k] for k, v in checked.items()}
            jobs = rollout_jobs(
                profiles,
                run_seed=run_seed,
                step=self.step,
                group_size=self.tc.rollouts_per_profile,
                first=refills * self.tc.profiles_per_step,
                shared_user=self.tc.group_user == "shared",
            )
            label = f"step {self.step} rollouts" + (f" (refill {refills})" if refills else "")
            log = self.layout.rollouts(self.step)
            eps += await self._play(jobs, self.policy, log, progress, label, self.cache, fresh=not refills)
            if not u.dynamic_sampling or refills == u.refill_rounds:
                return eps, checked, refills
            if groups_with_gradient(eps):
                return eps, checked, refills
            refills += 1

    async def _reference_dialogues(self, eps, progress) -> list:
        """The reference agent's dialogues with the users (profile and draws) of the step's dialogues `eps`: the
        sources of `branch.source=reference` cuts. Its replies get the warm-up's room for a full tag block."""
        jobs = [
            EpisodeJob(e.profile, seed=e.meta["seed"], episode_id=f"{e.meta['episode_id']}-ref", group=e.meta["group"])
            for e in eps
        ]
        return await self._play(
            jobs,
            ReferenceAgent(self.scenario, self.tokenizer),
            self.layout.branch_sources(self.step),
            progress,
            f"step {self.step} reference dialogues",
            runner_cfg=replace(self.runner_cfg, max_new_tokens=self.tc.warmup.max_new_tokens),
        )

    async def _branches(self, eps, progress) -> list:
        """The step's branched groups (trainer.branch), cut from its own dialogues `eps` or the reference agent's
        with the same users; [] where off."""
        if not self.tc.branch.groups:
            return []
        own = self.tc.branch.source == "own"
        jobs = branch_jobs(
            eps if own else await self._reference_dialogues(eps, progress),
            self.tc.branch,
            run_seed=int(self.cfg.seed),
            step=self.step,
            first_group=1 + max(e.meta["group"] for e in eps),
        )
        if not jobs:
            return []
        log = self.layout.branch_rollouts(self.step)
        return await self._play(jobs, self.policy, log, progress, f"step {self.step} branches")
