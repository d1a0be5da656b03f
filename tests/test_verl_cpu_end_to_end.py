"""verl's own Ray pieces on a local CPU Ray cluster, end to end: SEAD's plugin reaching Ray workers, SEAD's agent
loop in verl's AgentLoopManager streaming to verl's reward workers, and one update of verl's FSDP2 engine on the
dialogues that came back.

The cluster starts as `verl.trainer.main_ppo` starts it, with the runtime environment SEAD's overrides give it,
and with setuptools entry points turned off in its workers: SEAD reaches them only through that environment, the
path multi-node runs depend on. Generation is `ChatMLServer` (there is no vLLM on CPU); the rest is verl's own
process layout: the agent-loop worker and the reward worker are Ray actors, each in its own process.
"""

import os
import sys
import time
from functools import partial

import psutil
import pytest
import ray
import ray.cloudpickle
import torch
import verl_fakes
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.experimental.agent_loop.agent_loop import AgentLoopManager
from verl.experimental.reward_loop.reward_loop import RewardLoopManager
from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
from verl.workers.rollout.replica import TokenOutput
from verl_fakes import (
    ChatMLServer,
    agent_loop_batch,
    assert_matches_embedded_runner,
    episode_reward,
    trainer_and_verl_config,
    verl_run_config,
)

from sead.verl_backend.agent_loop import AGENT_NAME
from sead.verl_backend.dataset import training_rows
from sead.verl_backend.episode_io import load_context

STEP, GROUP = 1, 2  # the rows' SEAD step; rollouts per profile (GRPO needs two to have an advantage)
# The training engine's worker runs verl on the CPU platform (verl_fakes.use_cpu_training_engine); the plugin check
# asks for the same environment so that Ray can hand that worker on instead of starting (and importing) another.
CPU_WORKER = {"env_vars": {"VERL_PLATFORM": "cpu"}}
PROMPT_TAIL = 64
# What the actor needs on CPU: FSDP1 wants an accelerator; flash-attention, torch.compile and bf16 are GPU choices.
CPU_ACTOR = [
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A gpu1 run's first iteration: one agent-loop worker, one reward worker; stage progress in the reward, so
    that short scripted dialogues differ in reward."""
    cfg, scenario = verl_run_config(
        tmp_path_factory.mktemp("verl_ray"), "reward.stage_progress=1.0", "verl.gradient_checkpointing=false"
    )
    trainer, config = trainer_and_verl_config(
        cfg,
        f"actor_rollout_ref.rollout.n={GROUP}",
        "reward.num_workers=1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        *CPU_ACTOR,
    )
    return cfg, scenario, trainer, config


@pytest.fixture(scope="module")
def cluster(run):
    config = run[3]
    # main_ppo's runtime environment: verl's defaults merged with ray_kwargs.ray_init.runtime_env (SEAD's overrides).
    env = OmegaConf.to_container(
        OmegaConf.merge(get_ppo_ray_runtime_env(config), config.ray_kwargs.ray_init.runtime_env)
    )
    env["env_vars"]["VERL_USE_EXTERNAL_PLUGINS"] = "none"
    ours = [verl_fakes, sys.modules[__name__]]  # workers cannot import tests/: ship these by value
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=env)
    for module in ours:
        ray.cloudpickle.register_pickle_by_value(module)
    try:
        yield env
    finally:
        for module in ours:
            ray.cloudpickle.unregister_pickle_by_value(module)
        ray.shutdown()
        deadline, left = time.monotonic() + 20, None
        while left is None or (left and time.monotonic() < deadline):
            left = [
                p
                for p in psutil.Process().children(recursive=True)
                if p.pid not in before and p.is_running() and p.status() != psutil.STATUS_ZOMBIE
            ]
            time.sleep(0.2 if left else 0)
        assert not left, f"Ray left processes behind: {[p.name() for p in left]}"


def _registered_agent_loops():
    import verl  # noqa: F401  (imports the plugins, as in every verl process)
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    return os.getpid(), dict(_agent_loop_registry), os.environ.get("VERL_USE_EXTERNAL_PLUGINS")


def test_the_launchers_runtime_env_registers_sead_in_ray_workers(cluster):
    pid, registry, plugins = ray.get(ray.remote(_registered_agent_loops).options(runtime_env=CPU_WORKER).remote())
    assert pid != os.getpid() and plugins == "none"  # another process, with entry points off
    assert registry[AGENT_NAME]["_target_"] == "sead.verl_backend.agent_loop.SEADDialogueAgentLoop"


@pytest.fixture(scope="module")
def rollout(run, cluster):
    """One profile, GROUP dialogues, through verl's managers: as RayPPOTrainer builds them, minus vLLM."""
    cfg, scenario, trainer, config = run
    tokenizer = AutoTokenizer.from_pretrained(cfg.model.path)
    rewards = RewardLoopManager(config)
    agents = AgentLoopManager.create(
        config,
        llm_client=ChatMLServer(scenario, tokenizer, TokenOutput),
        reward_loop_worker_handles=rewards.reward_loop_worker_handles,
    )
    batch = agent_loop_batch(training_rows({STEP: trainer.controller.sample(1)}, **trainer.row_format), n=GROUP)
    return batch, agents.generate_sequences(batch)


def test_agent_loop_and_reward_workers_as_ray_actors_match_the_embedded_runner(run, rollout):
    cfg, _, trainer, _ = run
    batch, out = rollout
    ctx = load_context(trainer.layout.config)
    tokenizer = AutoTokenizer.from_pretrained(cfg.model.path)
    embedded = assert_matches_embedded_runner(out, batch, ctx=ctx, tokenizer=tokenizer, step=STEP, n=GROUP)
    # The reward worker scored each dialogue from the agent loop's extra fields, on its last token.
    n_prompt = len(ctx.first_prompt(tokenizer))
    for j, ep in enumerate(embedded):
        expected = torch.zeros(out.batch["rm_scores"].shape[1])
        expected[len(ep.segments[0].ids) - n_prompt - 1] = episode_reward(ep, ctx)
        assert torch.allclose(out.batch["rm_scores"][j], expected)
        stage_progress = ctx.score(ep)["components"]["stage_progress"]
        assert out.non_tensor_batch["reward_stage_progress"][j] == pytest.approx(stage_progress)
        assert out.non_tensor_batch["sim_error"][j] == 0
    assert "reward_stage_progress" in out.meta_info["reward_extra_keys"]


def _one_update(config, batch: dict, groups):
    """verl's actor update, in a Ray worker, on `batch` (the rollout's tensors; `groups` says whose dialogue each
    row is): old log-probs from the engine, GRPO advantages from the reward workers' scores, one train_batch with
    SEAD's actor settings (the reference is the policy itself, as at step 0). Returns the loss, grad norm, which
    parameters moved, and how the advantage-weighted log-prob of the trained tokens changed."""
    import tempfile

    import torch.distributed as dist

    verl_fakes.use_cpu_training_engine()
    from tensordict import TensorDict
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine import EngineRegistry
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    model = omega_conf_to_dataclass(config.actor_rollout_ref.model)
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    actor.model_config = model
    mask = batch["response_mask"]
    advantages, _ = compute_grpo_outcome_advantage(
        batch["rm_scores"], mask, groups, norm_adv_by_std_in_grpo=config.algorithm.norm_adv_by_std_in_grpo
    )

    def tensors(**extra):  # what RayPPOTrainer hands the actor, with TrainingWorker's defaults filled in
        keys = ["input_ids", "attention_mask", "response_mask", "position_ids", "prompts", "responses"]
        td = left_right_2_no_padding(TensorDict({**{k: batch[k] for k in keys}, **extra}, batch_size=len(mask)))
        tu.assign_non_tensor(
            td,
            temperature=config.actor_rollout_ref.rollout.temperature,
            calculate_entropy=False,
            use_remove_padding=model.use_remove_padding,
            use_fused_kernels=False,
            use_dynamic_bsz=actor.use_dynamic_bsz,
            global_batch_size=len(mask),
            max_token_len_per_gpu=actor.ppo_max_token_len_per_gpu,
            micro_batch_size_per_gpu=actor.ppo_micro_batch_size_per_gpu,
        )
        return td

    def log_probs():
        td = tensors()
        with engine.eval_mode():
            return no_padding_2_padding(engine.infer_batch(td)["model_output"]["log_probs"], td).float()

    dist.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/pg", rank=0, world_size=1)
    try:
        engine = EngineRegistry.new(
            model_type="language_model",
            backend=actor.strategy,
            model_config=model,
            engine_config=actor.engine,
            optimizer_config=actor.optim,
            checkpoint_config=actor.checkpoint,
        )
        engine.initialize()

        def weights():
            return {n: p.full_tensor().detach().clone() for n, p in engine.module.named_parameters()}

        before, old = weights(), log_probs()
        with engine.train_mode():
            out = engine.train_batch(
                tensors(old_log_probs=old, ref_log_prob=old, advantages=advantages),
                loss_function=partial(ppo_loss, config=actor),
            )
        after, new = weights(), log_probs()
    finally:
        dist.destroy_process_group()
    return {
        "loss": float(sum(out["loss"])),
        "grad_norm": out["metrics"]["grad_norm"],
        "moved": sorted(n for n in before if not torch.equal(before[n], after[n])),
        "params": sorted(before),
        "advantage_gain": float((advantages * (new - old) * mask).sum()),
        "devices": sorted({str(p.device) for p in after.values()}),
    }


def test_one_fsdp2_update_on_cpu_from_the_rollout(run, rollout):
    config = run[3]
    batch, out = rollout
    rewards = out.batch["rm_scores"].sum(-1).view(-1, GROUP)
    assert (rewards.max(-1).values > rewards.min(-1).values).any()  # some group has an advantage to learn from
    tensors = dict(out.batch.items())  # tensors, not the DataProto: unpickling one asks verl for its platform
    # The update sees the SOP prompt's last PROMPT_TAIL tokens only: on CPU the LM head over a 49k vocabulary costs
    # per token, and the prompt, never trained, is most of each sequence. Prompts are left-padded: this pads more.
    mask = tensors["attention_mask"].clone()
    mask[:, : tensors["prompts"].shape[1] - PROMPT_TAIL] = 0
    tensors.update(attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0))
    task = ray.remote(_one_update).options(runtime_env=CPU_WORKER)
    result = ray.get(task.remote(config, tensors, batch.non_tensor_batch["index"]))
    assert result["devices"] == ["cpu"]
    assert torch.isfinite(torch.tensor(result["loss"])) and 0 < result["grad_norm"] < float("inf")
    assert result["moved"] == result["params"]  # every weight took the step
    assert result["advantage_gain"] > 0  # toward the better dialogues of each group
