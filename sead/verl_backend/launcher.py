"""From SEAD's config to one `python -m verl.trainer.main_ppo` run: the overrides, their check, the subprocess.

SEAD keeps one set of numbers (trainer.*, dialogue.*, model.*); `verl_overrides` translates them into verl's
keys, and the `verl` config node (VerlSettings) holds only what SEAD has no name for: GPU layout, rollout
engine, memory knobs. `verl.overrides` passes any further verl key through unchanged, last, so it wins.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from sead.backends import VERL_REFUSES
from sead.config import number, one_of, runner_config, to_schema
from sead.dialogue.runner import RunnerConfig
from sead.errors import SEADInputError
from sead.run.layout import Entry
from sead.trainer.schema import TrainerConfig
from sead.verl_backend.dataset import AGENT_NAME

PLUGIN_MODULE = "sead.verl_backend.plugin"


@dataclass
class VerlSettings:
    # verl's trainer: its V1 trainer (TransferQueue), what verl 0.9.1 runs by default; false: its legacy
    # RayPPOTrainer, which verl's development branch makes the only one (there, true fails at start). SEAD's agent
    # loop reads everything it needs from its own rows, so it runs under either.
    use_v1: bool = True
    nnodes: int = number(1, ge=1, le=10_000)  # machines in the Ray cluster
    # training GPUs per node; GPUs serving the user simulator are not counted
    n_gpus_per_node: int = number(8, ge=1, le=1024)
    # scripts/main.sh serves the user simulator here
    usersim_gpus: list[int] = number(default_factory=list, ge=0, le=1023)
    usersim_port: int = number(8000, ge=1, le=65535)  # the first user-simulator server's port (one per GPU)
    usersim_model: str = ""  # what scripts/main.sh serves there (becomes usersim.model)
    usersim_gpu_memory: float = number(0.85, gt=0, le=1)  # vLLM memory fraction of each user-simulator instance
    rollout_engine: str = one_of("vllm", "sglang")  # what generates the agent's turns in verl
    tensor_parallel: int = number(1, ge=1, le=1024)  # rollout tensor parallelism
    gpu_memory_utilization: float = number(0.5, gt=0, le=1)  # the rollout engine's share of each training GPU
    max_prompt_length: int = number(2048, ge=1, le=10_000_000)  # the SOP prompt must fit
    # everything after the prompt: all agent and user turns
    max_response_length: int = number(9216, ge=1, le=10_000_000)
    # sequences per forward/backward (actor, reference, log-probs)
    micro_batch_per_gpu: int = number(1, ge=1, le=65_536)
    use_dynamic_bsz: bool = True  # pack micro-batches by tokens (max_token_len_per_gpu) instead of by count
    max_token_len_per_gpu: int = number(16384, ge=1, le=100_000_000)  # tokens per micro-batch with use_dynamic_bsz
    param_offload: bool = False  # FSDP: keep the weights in CPU memory between uses
    optimizer_offload: bool = False  # FSDP: keep the optimiser state in CPU memory
    gradient_checkpointing: bool = True  # recompute activations in the backward pass: less memory, more time
    agent_workers: int = number(8, ge=1, le=10_000)  # agent-loop Ray actors
    reward_workers: int = number(2, ge=1, le=10_000)  # reward Ray actors (the rule-based reward is cheap)
    logger: list[str] = field(default_factory=lambda: ["console", "file"])  # verl's loggers (wandb, tensorboard too)
    overrides: list[str] = field(default_factory=list)  # raw verl Hydra overrides, appended last (so they win)


def verl_settings(cfg: DictConfig) -> VerlSettings:
    vs = to_schema(VerlSettings, cfg.get("verl"), "verl")
    if vs.n_gpus_per_node % vs.tensor_parallel:
        raise SEADInputError(
            f"{vs.tensor_parallel} does not divide verl.n_gpus_per_node={vs.n_gpus_per_node}",
            field="verl.tensor_parallel",
        )
    return vs


def _get(obj, path: list[str]):
    for name in path:
        obj = getattr(obj, name)
    return obj


def check_sead_config(cfg: DictConfig, vs: VerlSettings) -> TrainerConfig:
    """What the verl backend cannot do, said before any GPU is touched."""
    tc: TrainerConfig = to_schema(TrainerConfig, cfg.trainer, "trainer")
    if str(cfg.model.preset) != "path" or not cfg.model.path:
        raise SEADInputError(
            "backend=verl trains a local HF model: model.preset=path model.path=/models/NAME", field="model.path"
        )
    if tc.update.estimator != "grpo":
        raise SEADInputError(
            "backend=verl runs GRPO; the PPO value head is embedded-only", field="trainer.update.estimator"
        )
    defaults = {"trainer": TrainerConfig(), "dialogue": RunnerConfig()}
    settings = {"trainer": tc, "dialogue": runner_config(cfg)}
    for name, why in VERL_REFUSES.items():
        group, *path = name.split(".")
        if _get(settings[group], path) != _get(defaults[group], path):
            raise SEADInputError(f"{name} is embedded-only ({why}); turn it off for backend=verl", field=name)
    if tc.profiles_per_step % tc.update.mini_batches:
        raise SEADInputError(
            f"verl splits a step's {tc.profiles_per_step} profiles (trainer.profiles_per_step) into equal "
            f"mini-batches: {tc.update.mini_batches} must divide it",
            field="trainer.update.mini_batches",
        )
    budget = int(cfg.dialogue.max_total_tokens) + int(cfg.dialogue.max_new_tokens)
    if budget > vs.max_response_length:
        raise SEADInputError(
            f"dialogue.max_total_tokens + dialogue.max_new_tokens = {budget} exceeds "
            f"verl.max_response_length={vs.max_response_length}: verl would cut dialogues short",
            field="verl.max_response_length",
        )
    if int(cfg.dialogue.max_context_tokens) < vs.max_prompt_length + vs.max_response_length:
        # The runner would start a second token segment that verl's single sequence cannot hold.
        raise SEADInputError(
            f"must be >= verl.max_prompt_length + verl.max_response_length "
            f"({vs.max_prompt_length + vs.max_response_length})",
            field="dialogue.max_context_tokens",
        )
    return tc


@dataclass
class RunFiles:
    """Where one verl run (one SEAD iteration) reads and writes: its own folder of the run directory (`path`), the
    model it starts from, and SEAD's config in effect (a resume with allowed changes has its own file)."""

    path: Path
    model_path: str
    validate_first: bool
    sead_config: Path
    train_file = Entry("train.parquet")
    val_file = Entry("val.parquet")
    agent_loop_config = Entry("agent_loop.yaml")
    plays_file = Entry("plays.txt")  # how often each row was played (`episode_io.RunPlays`)
    checkpoint_dir = Entry("checkpoints")
    metrics_file = Entry("metrics.jsonl")  # verl's file logger
    log_file = Entry("verl.log")

    def hf_model(self, step: int) -> Path:
        """The HF export verl writes with the checkpoint of `step` (hf_model in checkpoint.save_contents)."""
        return self.checkpoint_dir / f"global_step_{step}" / "actor" / "huggingface"


def _sampling(prefix: str, s) -> list[str]:
    # SEAD's top_k 0 means off; vLLM's off is -1.
    return [
        f"{prefix}.temperature={s.temperature}",
        f"{prefix}.top_p={s.top_p}",
        f"{prefix}.top_k={s.top_k if s.top_k > 0 else -1}",
    ]


def verl_overrides(cfg: DictConfig, vs: VerlSettings, tc: TrainerConfig, files: RunFiles) -> list[str]:
    u, a, r = tc.update, "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    return [
        f"trainer.use_v1={vs.use_v1}",
        "algorithm.adv_estimator=grpo",
        f"algorithm.norm_adv_by_std_in_grpo={u.normalise_std}",
        f"algorithm.filter_groups.enable={u.dynamic_sampling}",
        f"data.train_files={files.train_file}",
        f"data.val_files={files.val_file}",
        f"data.train_batch_size={tc.profiles_per_step}",
        "data.shuffle=false",
        "data.dataloader_num_workers=0",
        f"data.max_prompt_length={vs.max_prompt_length}",
        f"data.max_response_length={vs.max_response_length}",
        "data.truncation=error",
        "data.filter_overlong_prompts=true",
        "data.return_raw_chat=true",
        f"actor_rollout_ref.model.path={files.model_path}",
        f"actor_rollout_ref.model.enable_gradient_checkpointing={vs.gradient_checkpointing}",
        f"{a}.optim.lr={u.lr}",
        f"{a}.optim.lr_warmup_steps={u.warmup_steps}",
        f"{a}.optim.weight_decay={u.weight_decay}",
        f"{a}.grad_clip={u.grad_clip}",
        f"{a}.ppo_mini_batch_size={tc.profiles_per_step // u.mini_batches}",  # in profiles: verl multiplies by n
        f"{a}.ppo_epochs={u.ppo_epochs}",
        # verl's own truncated IS against vLLM-vs-FSDP mismatch (it logs rollout_corr/* metrics every step)
        f"algorithm.rollout_correction.rollout_is={'token' if u.rollout_is == 'token' else 'null'}",
        f"algorithm.rollout_correction.rollout_is_threshold={u.rollout_is_threshold}",
        f"{a}.ppo_micro_batch_size_per_gpu={vs.micro_batch_per_gpu}",
        f"{a}.use_dynamic_bsz={vs.use_dynamic_bsz}",
        f"{a}.ppo_max_token_len_per_gpu={vs.max_token_len_per_gpu}",
        f"{a}.use_kl_loss={u.kl_coef > 0}",
        f"{a}.kl_loss_coef={u.kl_coef}",
        f"{a}.kl_loss_type=low_var_kl",
        f"{a}.entropy_coeff={u.entropy_coef}",
        f"{a}.clip_ratio_low={u.clip_low}",
        f"{a}.clip_ratio_high={u.clip_high}",
        f"{a}.loss_agg_mode=token-mean",
        f"{a}.fsdp_config.param_offload={vs.param_offload}",
        f"{a}.fsdp_config.optimizer_offload={vs.optimizer_offload}",
        f"{a}.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        f"{a}.checkpoint.load_contents=[model,optimizer,extra]",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={vs.micro_batch_per_gpu}",
        f"{r}.name={vs.rollout_engine}",
        f"{r}.mode=async",
        f"{r}.n={tc.rollouts_per_profile}",
        *_sampling(r, tc.sampling),
        *_sampling(f"{r}.val_kwargs", tc.validation.sampling),
        f"{r}.val_kwargs.n={tc.validation.trials}",
        f"{r}.val_kwargs.do_sample={tc.validation.sampling.temperature > 0}",
        f"{r}.tensor_model_parallel_size={vs.tensor_parallel}",
        f"{r}.gpu_memory_utilization={vs.gpu_memory_utilization}",
        f"{r}.max_model_len={vs.max_prompt_length + vs.max_response_length}",
        f"{r}.log_prob_micro_batch_size_per_gpu={vs.micro_batch_per_gpu}",
        f"{r}.calculate_log_probs=true",
        f"{r}.agent.num_workers={vs.agent_workers}",
        f"{r}.agent.default_agent_loop={AGENT_NAME}",
        f"{r}.agent.agent_loop_config_path={files.agent_loop_config}",
        f"reward.num_workers={vs.reward_workers}",
        "reward.custom_reward_function.path=pkg://sead.verl_backend.reward_fn",
        "reward.custom_reward_function.name=compute_score",
        f"+reward.custom_reward_function.reward_kwargs.sead_config={files.sead_config}",
        f"trainer.logger=[{','.join(vs.logger)}]",
        "trainer.project_name=sead",
        f"trainer.experiment_name={Path(str(cfg.run_dir)).name}",
        f"trainer.nnodes={vs.nnodes}",
        f"trainer.n_gpus_per_node={vs.n_gpus_per_node}",
        "trainer.total_epochs=1",
        f"trainer.total_training_steps={tc.steps_per_iteration}",
        f"trainer.save_freq={tc.steps_per_iteration}",
        f"trainer.test_freq={tc.steps_per_iteration}",
        f"trainer.val_before_train={files.validate_first}",
        f"trainer.default_local_dir={files.checkpoint_dir}",
        "trainer.resume_mode=disable",
        # Ray workers on other nodes do not inherit the driver's environment: hand them the plugin explicitly.
        f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES={PLUGIN_MODULE}",
        *vs.overrides,
    ]


def compose_verl_config(overrides: list[str]):
    """verl's own Hydra config (ppo_trainer) with our overrides: what main_ppo would run, without running it."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()  # SEAD's own compose may have left a Hydra instance behind
    with initialize_config_module("verl.trainer.config", version_base=None):
        return compose("ppo_trainer", overrides=list(overrides))


def verl_environment(metrics_file: Path, base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env.setdefault("VERL_USE_EXTERNAL_MODULES", PLUGIN_MODULE)
    env["VERL_FILE_LOGGER_PATH"] = str(metrics_file)
    env.setdefault("WANDB_MODE", "offline")
    return env


def run_verl(overrides: list[str], env: dict, log_file: Path) -> None:
    """One verl training run in a child process; its output goes to the terminal and to `log_file`."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]
    with open(log_file, "w", encoding="utf-8") as fh:
        fh.write(" ".join(cmd) + "\n\n")
        fh.flush()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            sys.stdout.write(line)
            fh.write(line)
        if proc.wait() != 0:
            raise RuntimeError(f"verl exited with status {proc.returncode}; its log: {log_file}")
