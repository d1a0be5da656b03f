"""Dataclass schema of the `trainer` config group: config keys map 1:1 to these fields. A config leaf: it imports
no torch, so checking a config (and `sead --help`) stays light; the modules that do the work import it."""

from __future__ import annotations

from dataclasses import dataclass, field

from sead.config import MAX_SEED, MAX_TEMPERATURE, MIN_TEMPERATURE, number, one_of
from sead.dialogue.seeds import MAX_GROUP_MEMBERS, MAX_SEEDED_GROUPS
from sead.errors import SEADInputError
from sead.policy.settings import SamplingConfig
from sead.trainer.lora import LoraSettings


@dataclass
class RolloutSampling(SamplingConfig):
    # Greedy rollouts would make every member of a GRPO group alike (nothing to learn from), and the update takes
    # log-probs at this temperature (`Updater(temperature=)`), dividing the logits by it.
    temperature: float = number(1.2, ge=MIN_TEMPERATURE, le=MAX_TEMPERATURE)


@dataclass
class UpdateConfig:
    lr: float = number(1e-6, gt=0, le=1)  # AdamW's learning rate (the learning-curve recipe: 5e-5 on SmolLM2-135M)
    warmup_steps: int = number(5, ge=0, le=1_000_000)  # optimiser steps of linear learning-rate warm-up
    weight_decay: float = number(0.0, ge=0, le=1)  # AdamW's
    grad_clip: float = number(1.0, gt=0, le=1e6)  # a max gradient norm: 0 would zero every gradient
    kl_coef: float = number(0.001, ge=0, le=10)  # low_var_kl to the frozen reference; 0 disables the reference pass
    # weight of an entropy bonus; 0 computes the logged entropy off the graph
    entropy_coef: float = number(0.0, ge=0, le=10)
    clip_low: float = number(0.2, ge=0, lt=1)  # the ratio's floor is 1 - clip_low
    clip_high: float = number(0.2, ge=0, le=10)  # > clip_low: DAPO clip-higher
    # GRPO (r - mean) / std; False: Dr.GRPO-style centring only, so small reward differences stay small advantages
    # (development seed, 2026-11-24: std-normalised groups of near-equal shaped rewards cost 13 points)
    normalise_std: bool = True
    dynamic_sampling: bool = False  # drop groups whose rewards are all equal
    # With dynamic_sampling: while no group of the step carries a gradient, play up to this many more rounds of
    # profiles_per_step new profiles (a lighter form of DAPO's refill, which fills the whole batch). 0: a step
    # whose groups are all flat skips its update.
    refill_rounds: int = number(0, ge=0, le=100)
    # What the policy loss's token mean divides by. `kept`: the tokens of the groups left in the update, so with
    # dynamic_sampling a step with two differing groups moves the weights as far as one with twenty. `played`: the
    # agent tokens of every dialogue the step played, flat groups and groups of one included, as if they had not
    # been dropped (their advantage is 0): plain GRPO's policy gradient without computing theirs, so a step moves
    # the weights in proportion to how much of it carried a signal. KL and entropy terms share the denominator;
    # the dropped dialogues' own share of those is not computed. Measured (2026-11-28, three run seeds):
    # `played` gained +9.5 points on average over the warm-up against +5.8, the worst run +4.5 against +0.5.
    loss_tokens: str = one_of("kept", "played")
    micro_batch: int = number(2, ge=1, le=4096)  # sequences per forward/backward
    # optimiser passes over each step's rollouts; more than 1 runs the old-log-prob pass first (development
    # seed, 2026-11-26: 2 epochs +1 point against +8 for 1)
    ppo_epochs: int = number(1, ge=1, le=100)
    # optimiser steps per epoch: the step's dialogues split into this many parts, each its own step (verl's
    # ppo_mini_batch_size = profiles_per_step / mini_batches). More than 1 runs the old-log-prob pass first.
    mini_batches: int = number(1, ge=1, le=4096)
    # Truncated importance sampling where the rollout engine's numbers differ from the trainer's (bf16 rollouts,
    # vLLM vs FSDP): each token's loss is weighted by min(p_trainer / p_rollout, threshold) (verl's
    # algorithm.rollout_correction, same names). The mismatch (rollout_kl, rollout_ratio_max) is logged either way.
    rollout_is: str = one_of("token", "off")
    rollout_is_threshold: float = number(2.0, ge=1, le=1000)  # the cap on p_trainer / p_rollout per token
    # grpo (group-relative advantages, no critic) | ppo (a linear value head on the policy + GAE). The names of
    # sead.trainer.estimators.ESTIMATORS, spelt here so the schema needs no torch (a test keeps them equal)
    estimator: str = one_of("grpo", "ppo")
    gamma: float = number(1.0, ge=0, le=1)  # ppo: discount over agent tokens
    lam: float = number(0.95, ge=0, le=1)  # ppo: GAE lambda
    vf_coef: float = number(0.1, ge=0, le=100)  # ppo: weight of the value loss
    value_clip: float = number(0.2, ge=0, le=100)  # ppo: how far a value prediction may move from its rollout value
    # An imitation anchor (InstructGPT's PPO-ptx, on the warm-up's data): each optimiser step adds imitation_coef x
    # the mean NLL of the agent tokens of `imitation_dialogues` dialogues the warm-up imitated, drawn anew each step.
    # It holds a reply the warm-up got right where RL rewards a similar reply elsewhere (measured 2026-11-29). It is
    # imitation: read a run's gain against the anchor alone. Needs a warm-up. 0 = off. Measured (2026-11-30, one run
    # seed): coef 1.0 gained +4.5 over the anchor alone (p = 0.004), whose own +19.0 over its warm-up is imitation;
    # under the +5 its rule asked, so the recipe does not set it.
    imitation_coef: float = number(0.0, ge=0, le=100)
    # the warm-up's dialogues the anchor imitates per optimiser step
    imitation_dialogues: int = number(4, ge=1, le=100_000)
    # false: the anchor alone, no dialogues played and no policy-gradient term (the same optimiser, schedule and
    # draws): the control a run with imitation_coef is measured against. Needs imitation_coef > 0.
    policy_gradient: bool = True


@dataclass
class BranchConfig:
    """Branched GRPO groups (sead/trainer/branching.py): after a step's dialogues, `groups` of them (failed ones
    first) are cut at an agent turn and continued `size` times from there; those groups train only the turns after
    the cut. 0 = off."""

    # branched groups per step, with at least one profile per step; 0 = off (the learning-curve recipe: 16)
    groups: int = number(0, ge=0, le=MAX_SEEDED_GROUPS - 1)
    # continuations per group (a group of one has no advantage); development seed, 2026-11-26: 6 instead of 4
    # gained +7 points (p = 0.065), not kept
    size: int = number(4, ge=2, le=MAX_GROUP_MEMBERS)
    # where to cut: any turn, one after which the user lost ground, one that answers a concern the user voiced, or
    # one whose reply left that concern open (2026-11-30: `unanswered` 109/200 as `concern`, +2.5 over its
    # warm-up (p = 0.06), with more differing groups a step, 5.05 against 3.45; the recipe's)
    at: str = one_of("uniform", "setback", "concern", "unanswered")
    # what to cut: the step's own dialogues, or the scripted reference agent's with the same users and draws (no
    # model; their prefixes reach the states a policy that fails early never reaches)
    source: str = one_of("own", "reference")
    # agent turns each continuation plays after the cut (0: to the dialogue's end); its reward is then what those
    # turns earned on the user's side (the prefix's share is the same for every member, so it cancels)
    turns: int = number(0, ge=0, le=1000)
    # cuts one dialogue may give, each at another of its turns: with short continuations (`turns`), a step's few
    # dialogues can then feed many groups
    per_dialogue: int = number(1, ge=1, le=1000)


@dataclass
class WarmupConfig:
    # reference-agent dialogues played before RL and imitated (supervised fine-tuning on the agent's turns);
    # 0 = no warm-up. Measured 2026-11-29: four epochs of a 192-dialogue warm-up took SmolLM2-135M from 60 (one
    # epoch) to 104 of 200 held-out development dialogues completed
    dialogues: int = number(0, ge=0, le=1_000_000)
    epochs: int = number(1, ge=1, le=1000)  # passes over the imitated dialogues (the learning-curve recipe: 4)
    lr: float = number(1e-4, gt=0, le=1)  # the fine-tuning's learning rate
    micro_batch: int = number(2, ge=1, le=4096)  # imitated sequences per optimiser step
    successful_only: bool = True  # imitate only dialogues the reference agent won
    seed: int = number(77, ge=0, le=MAX_SEED)  # the warm-up's own profiles and draws, apart from the run's seed
    max_turns: int = number(15, ge=1, le=1000)  # the reference agent's dialogues run to their natural end ...
    # ... with room for its full tag block, whatever the RL settings are
    max_new_tokens: int = number(200, ge=1, le=1_000_000)
    # stop fine-tuning when the warm-up has taken this long (None = off)
    max_minutes: float | None = number(None, gt=0, le=1e6)
    # also save the model after each epoch but the last as warmup/epoch<k>/, a warm-up another run can reuse:
    # one run of N epochs gives the warm-ups of 1..N epochs, to choose the warm-up's length by what it measures
    keep_epochs: bool = False
    # An earlier run's `warmup/` directory: start from the model it saved instead of warming up again, and count
    # the minutes that warm-up took as this run's training time (RL settings can be tried from one warm-up).
    reuse: str | None = None


@dataclass
class ValidationConfig:
    profiles: int = number(30, ge=1, le=1_000_000)  # held-out profiles, the same at every validation point
    trials: int = number(1, ge=1, le=1000)  # dialogues per profile
    # draws the validation profiles and seeds their dialogues, apart from training
    seed: int = number(4242, ge=0, le=MAX_SEED)
    at_start: bool = True  # also validate before the first RL step (after any warm-up), not only after iterations
    before_warmup: bool = False  # also validate the base model before a warm-up: where imitation started from
    # validate after every `every`-th iteration and after the last (embedded trainer): with one controller update
    # per step, a held-out pass after each would cost more than the training (benchmarks/learning_curve.py)
    every: int = number(1, ge=1, le=1_000_000)
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=0.0, top_p=1.0))


@dataclass
class LoggingConfig:
    tensorboard: bool = True  # write the metrics as TensorBoard events in the run's tensorboard/
    wandb: bool = False  # also log to Weights & Biases (needs the wandb package)
    wandb_mode: str = one_of("offline", "online", "disabled")  # wandb's mode: offline keeps the log on disk


@dataclass
class TrainerConfig:
    # 0: measure the model only (validation before training; learning_curve.py)
    iterations: int = number(5, ge=0, le=1_000_000)
    # RL steps per iteration; the controller reweights once per iteration
    steps_per_iteration: int = number(10, ge=1, le=1_000_000)
    # profiles the controller samples per step, each played by a GRPO group
    profiles_per_step: int = number(60, ge=1, le=1_000_000)
    rollouts_per_profile: int = number(8, ge=1, le=4096)  # GRPO group size n
    # own: each rollout of a profile meets its own draw of the user (the original); shared: a group's rollouts meet
    # the same draws (the simulator's seed is the group's), so their rewards differ by the agent's choices alone
    group_user: str = one_of("own", "shared")
    save_every: int = number(5, ge=1, le=1_000_000)  # steps between checkpoints; the last step is always checkpointed
    max_batch: int = number(64, ge=1, le=65_536)  # dialogues' rows per batched generation call
    turn_cache_mb: float = number(4096, ge=0, le=1e7)  # memory for dialogues' keys/values kept between turns (0 = off)
    cuda_graph: bool = True  # on a GPU, each generation call's decoding steps replayed as one CUDA graph
    # training forwards keep each decoder layer's input only and recompute the rest in the backward pass
    # (sead/trainer/recompute.py): one more forward for a fraction of the activations' memory
    recompute_activations: bool = False
    # training-time budget (warm-up + RL steps, not validation); once one RL step has been timed, none is started
    # that would overrun it; None = off
    max_minutes: float | None = number(None, gt=0, le=1e6)
    # a fresh run sized to its machine (sead/trainer/plan.py): fewer warm-up dialogues and validation profiles
    # where the run would take longer, never fewer RL steps; the plan is printed at the start. None = as set
    fit_minutes: float | None = number(None, gt=0, le=1e6)
    # Validation and checkpoints' model/ are an exponential moving average of the policy's weights over RL updates,
    # this much of the average kept at each (sead/trainer/weight_average.py); rollouts sample from the live policy.
    # 0 = off: the live policy throughout. Measured (2026-11-28, d = 0.8, three run seeds): the average
    # beat its own live policy by +10, 0 and +3.5 points and never lost; the learning-curve recipe sets 0.8.
    weight_ema: float = number(0.0, ge=0, lt=1)
    sampling: RolloutSampling = field(default_factory=RolloutSampling)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    branch: BranchConfig = field(default_factory=BranchConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def __post_init__(self):
        if self.group_user == "shared" and self.rollouts_per_profile > MAX_GROUP_MEMBERS:
            # the members' sampling seeds are `group_agent_seed`s, one stride of MAX_GROUP_MEMBERS per group
            raise SEADInputError(
                f"trainer.group_user=shared takes at most {MAX_GROUP_MEMBERS} rollouts per profile",
                field="trainer.rollouts_per_profile",
            )
        if self.weight_ema > 0 and self.lora.enabled:
            raise SEADInputError(
                "trainer.weight_ema averages the full weights; it does not work with trainer.lora.enabled",
                field="trainer.weight_ema",
            )
        u = self.update
        if u.imitation_coef and not (self.warmup.dialogues or self.warmup.reuse):
            raise SEADInputError(
                "trainer.update.imitation_coef imitates the warm-up's dialogues; this run has no warm-up "
                "(set trainer.warmup.dialogues or trainer.warmup.reuse)",
                field="trainer.update.imitation_coef",
            )
        if not (u.policy_gradient or u.imitation_coef):
            raise SEADInputError(
                "trainer.update.policy_gradient=false trains on the imitation anchor alone, and "
                "trainer.update.imitation_coef is 0: nothing would train",
                field="trainer.update.policy_gradient",
            )
        groups = self.profiles_per_step * (1 + (u.refill_rounds if u.dynamic_sampling else 0)) + self.branch.groups
        if (self.group_user == "shared" or self.branch.groups) and groups > MAX_SEEDED_GROUPS:
            # the same stride keeps one step's group seeds apart from the next step's
            raise SEADInputError(
                f"a step with shared-user or branched groups takes at most {MAX_SEEDED_GROUPS} groups; this one has "
                f"{groups} (profiles_per_step x (1 + refill_rounds with dynamic sampling) + branch.groups)",
                field="trainer.profiles_per_step",
            )
