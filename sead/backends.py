"""Which training backend reads which config key: one table, read by the verl backend's check (it refuses a run
that sets a feature only the embedded trainer has) and by the configuration reference. A config leaf: no torch."""

from __future__ import annotations

# Features of the embedded trainer alone: backend=verl refuses a run that sets one away from its default. -> why
VERL_REFUSES = {
    "trainer.lora.enabled": "verl's FSDP actor trains every weight",
    "trainer.warmup.dialogues": "the warm-up plays and imitates the reference agent inside the embedded loop",
    "dialogue.response_cache.enabled": "verl's agent-loop workers are separate processes: they cannot share one cache",
    "trainer.validation.every": "verl validates after every iteration",
    "trainer.update.refill_rounds": "verl refills flat groups by its own rule (filter_groups)",
    "trainer.update.loss_tokens": "verl refills the batch instead",
    "trainer.branch.groups": "a second round of dialogues inside the step, from the first round's prefixes",
    "trainer.group_user": "verl's agent loop seeds each rollout of a group apart (train_episode_seed)",
    "trainer.weight_ema": "verl's actor keeps no second copy of the weights to average into",
    "trainer.update.imitation_coef": "verl's actor loss has no imitation term (and the warm-up it reads is embedded)",
    "trainer.update.policy_gradient": "the imitation anchor's control, embedded as the anchor is",
}

# Keys (or whole sections) only the embedded trainer reads; under backend=verl its own settings (verl.*) do their
# work, or nothing does, and a set value is ignored. The sections of VERL_REFUSES' switches are here too.
EMBEDDED_ONLY = (
    "trainer.lora",
    "trainer.warmup",
    "trainer.branch",
    "dialogue.response_cache",
    "dialogue.concurrency",  # verl: verl.agent_workers
    "trainer.update.imitation_dialogues",
    "trainer.update.gamma",  # gamma, lam, vf_coef, value_clip: PPO's critic; verl runs GRPO
    "trainer.update.lam",
    "trainer.update.vf_coef",
    "trainer.update.value_clip",
    "trainer.update.micro_batch",  # verl: verl.micro_batch_per_gpu
    "trainer.max_batch",  # batched generation, the turn cache and CUDA graphs: verl generates with vLLM
    "trainer.turn_cache_mb",
    "trainer.cuda_graph",
    "trainer.max_minutes",
    "trainer.fit_minutes",  # the verl recipe runs as set
    "trainer.save_every",  # verl saves at the end of each iteration
    "trainer.validation.at_start",  # verl validates before its first iteration always
    "trainer.validation.before_warmup",
    "trainer.logging.wandb",  # verl: verl.logger
    "trainer.logging.wandb_mode",
    "model.dtype",  # verl: FSDP and vLLM choose
    "model.device",
    "model.hidden",  # hidden .. init_seed: the tiny preset's random model; verl trains a model folder
    "model.layers",
    "model.heads",
    "model.kv_heads",
    "model.intermediate",
    "model.init_seed",
)
VERL_ONLY = ("verl",)
NOT_TRAINING = {"eval": "sead eval", "profiles": "sead profiles sample"}  # sections no training backend reads


def _under(key: str, sections) -> bool:
    return any(key == s or key.startswith(s + ".") for s in sections)


def backend_of(key: str) -> str:
    """embedded, verl or both: which training backend honours `key`; for a section no training reads, the command
    that does."""
    top = key.split(".")[0]
    if top in NOT_TRAINING:
        return NOT_TRAINING[top]
    if _under(key, VERL_ONLY):
        return "verl"
    if _under(key, EMBEDDED_ONLY) or key in VERL_REFUSES:
        return "embedded"
    return "both"
