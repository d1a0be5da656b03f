"""Contract tests against the installed verl 0.9.1, on CPU, in one process (Ray-local runs are in
test_verl_cpu_end_to_end.py). Each process pays about 12 s for `import verl` once.

What they pin: every verl symbol the adapter uses still exists where we import it; the plugin entry point
registers the agent loop; SEAD's agent loop inside verl's own AgentLoopWorker yields the ids and loss mask the
embedded runner yields for the same dialogue; the reward function runs through verl's reward manager; and
SEAD's overrides compose with verl's Hydra config and pass verl's own config validation.
"""

import asyncio
import inspect

import numpy as np
import pytest
import torch

# verl is a hard dependency here (scripts/test.sh installs the `verl` extra): a missing one fails, never skips.
import verl
import yaml
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    AgentLoopWorker,
    _agent_loop_registry,
    register,
)
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.replica import TokenOutput
from verl_fakes import (
    ChatMLServer,
    agent_loop_batch,
    assert_matches_embedded_runner,
    episode_reward,
    trainer_and_verl_config,
    verl_run_config,
)

from sead.config import load_config
from sead.dialogue.runner import run_episode
from sead.policy.scripted import ReferenceAgent
from sead.verl_backend.agent_loop import AGENT_NAME, SEADDialogueAgentLoop
from sead.verl_backend.dataset import training_rows
from sead.verl_backend.episode_io import extra_fields, load_context
from sead.verl_backend.launcher import compose_verl_config
from sead.verl_backend.outer_loop import VerlTrainer


def test_the_verl_symbols_the_adapter_relies_on():
    assert verl.__version__ == "0.9.1"
    assert issubclass(SEADDialogueAgentLoop, AgentLoopBase) and callable(register)
    assert {
        "prompt_ids",
        "response_ids",
        "response_mask",
        "response_logprobs",
        "num_turns",
        "extra_fields",
        "metrics",
    } <= set(AgentLoopOutput.model_fields)
    assert {"generate_sequences", "tool_calls"} <= set(AgentLoopMetrics.model_fields)
    assert {"token_ids", "log_probs"} <= set(TokenOutput.model_fields)
    params = inspect.signature(LLMServerClient.generate).parameters
    assert list(params)[:2] == ["self", "request_id"] and {"prompt_ids", "sampling_params"} <= set(params)
    # The plugin entry point of the installed sead package ran inside `import verl` and registered the loop.
    assert _agent_loop_registry[AGENT_NAME]["_target_"] == "sead.verl_backend.agent_loop.SEADDialogueAgentLoop"


@pytest.mark.parametrize("v1_step", [None, 1], ids=["legacy_trainer", "v1_trainer"])
def test_agent_loop_in_verl_worker_matches_the_embedded_runner(tmp_path, v1_step):
    """What either of verl's trainers hands the workers: the legacy one passes nothing but the rows (the step and
    each play's place in its group come from SEAD's rows and play count), the V1 one also its own step and session
    index, which the loop does not need."""
    cfg, scenario = verl_run_config(tmp_path)
    trainer, config = trainer_and_verl_config(cfg, "actor_rollout_ref.rollout.n=2")
    ctx = load_context(trainer.layout.config)
    tokenizer = AutoTokenizer.from_pretrained(cfg.model.path)
    server = ChatMLServer(scenario, tokenizer, TokenOutput)
    worker = AgentLoopWorker(config, llm_client=server, reward_loop_worker_handles=None)
    step = 3  # a SEAD step of a later iteration: verl's own count would start at 1
    rows = training_rows({step: trainer.controller.sample(3)}, **trainer.row_format)
    batch = agent_loop_batch(rows, n=2, v1_step=v1_step)
    out = asyncio.run(worker.generate_sequences(batch))

    embedded = assert_matches_embedded_runner(out, batch, ctx=ctx, tokenizer=tokenizer, step=step, n=2)
    assert len(embedded) == 6
    assert max(len(ep.turns) for ep in embedded) >= 2  # user turns (mask 0) sit between agent turns somewhere
    # Every request the fake server saw was a prompt the embedded runner builds (ids, not re-tokenised text).
    assert all(r["sampling_params"]["max_tokens"] == cfg.dialogue.max_new_tokens for r in server.requests)
    assert len({r["request_id"] for r in server.requests}) == 6


def test_reward_function_through_verls_reward_manager(tmp_path):
    cfg, scenario = verl_run_config(tmp_path)
    trainer, config = trainer_and_verl_config(cfg)
    ctx = load_context(trainer.layout.config)
    tokenizer = AutoTokenizer.from_pretrained(cfg.model.path)
    profile = trainer.controller.sample(1)[0]
    ep = asyncio.run(
        run_episode(
            profile,
            scenario=scenario,
            agent=ReferenceAgent(scenario, tokenizer),
            user=ctx.user,
            tokenizer=tokenizer,
            cfg=ctx.runner_cfg,
            seed=5,
        )
    )
    seg, n = ep.segments[0], len(ctx.first_prompt(tokenizer))
    prompts, responses = torch.tensor(seg.ids[:n]), torch.tensor(seg.ids[n:])
    data = DataProto.from_dict(  # the shapes AgentLoopWorker._compute_score hands a reward worker
        tensors={
            "prompts": prompts[None],
            "responses": responses[None],
            "attention_mask": torch.ones(1, len(seg.ids), dtype=torch.int64),
            "input_ids": torch.tensor(seg.ids)[None],
        },
        non_tensors={
            "data_source": np.array(["sead"], dtype=object),
            "reward_model": np.array([{"ground_truth": ""}], dtype=object),
            "extra_info": np.array([{"index": 0, "split": "train"}], dtype=object),
            "tool_extra_fields": np.array([extra_fields(ep)], dtype=object),
            "__num_turns__": np.array([ep.num_turns]),
        },
    )

    async def score():  # the manager binds the event loop it is built in, as inside a reward worker
        return await NaiveRewardManager(config.reward, tokenizer, get_custom_reward_fn(config)).run_single(data)

    result = asyncio.run(score())
    assert result["reward_score"] == episode_reward(ep, ctx)
    info = result["reward_extra_info"]
    assert info["sim_error"] == 0 and info["reward_completion"] == float(ep.success)
    with pytest.raises(ValueError, match="sead_episode"):
        get_custom_reward_fn(config)("other", "text", "", {"index": 0})


@pytest.mark.parametrize(
    "preset,gpus,mini_batches,use_v1", [("gpu8", 6, 4, True), ("gpu1", 1, 1, True), ("gpu1", 1, 1, False)]
)
def test_overrides_compose_with_verls_config_and_pass_its_validation(tmp_path, preset, gpus, mini_batches, use_v1):
    """Under either of verl's trainers: the V1 one (0.9.1's default) or the legacy one (`verl.use_v1=false`, the
    only one on verl's development branch)."""
    run = tmp_path / "run"
    settings = [f"preset={preset}", "usersim=scripted", f"model.path={tmp_path}", f"run_dir={run}"]
    cfg = load_config([*settings, f"trainer.update.mini_batches={mini_batches}", f"verl.use_v1={use_v1}"])
    trainer = VerlTrainer(cfg, runner=None)
    config = compose_verl_config(trainer.prepare_iteration(0))
    OmegaConf.resolve(config)  # every interpolation, ours and verl's, resolves
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    tc = trainer.tc
    assert config.trainer.use_v1 is use_v1
    assert config.trainer.n_gpus_per_node == gpus and not need_critic(config) and need_reference_policy(config)
    assert rollout.n == tc.rollouts_per_profile and rollout.temperature == tc.sampling.temperature
    assert config.data.train_batch_size == tc.profiles_per_step
    # optimiser steps per step: verl's mini-batch counts profiles (each with its n rollouts)
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size * mini_batches == tc.profiles_per_step
    assert config.actor_rollout_ref.actor.optim.lr == tc.update.lr
    assert config.actor_rollout_ref.actor.kl_loss_coef == tc.update.kl_coef
    assert config.trainer.total_training_steps == tc.steps_per_iteration
    # the same truncated IS as the embedded update, through verl's own config class
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    correction = omega_conf_to_dataclass(config.algorithm.rollout_correction, RolloutCorrectionConfig)
    assert (correction.rollout_is, float(correction.rollout_is_threshold)) == ("token", tc.update.rollout_is_threshold)
    assert config.actor_rollout_ref.rollout.calculate_log_probs
    assert config.reward.custom_reward_function.reward_kwargs.sead_config == str(trainer.layout.config)
    loops = yaml.safe_load(open(config.actor_rollout_ref.rollout.agent.agent_loop_config_path))
    assert loops[0]["name"] == AGENT_NAME and loops[0]["sead_config"] == str(trainer.layout.config)
    assert loops[0]["validations"] == [0, 1] and loops[0]["steps_per_iteration"] == tc.steps_per_iteration
    if preset == "gpu8":  # the numbers
        assert (rollout.n, tc.profiles_per_step, tc.update.lr, rollout.temperature) == (8, 60, 1e-6, 1.2)
        assert config.actor_rollout_ref.actor.kl_loss_type == "low_var_kl" and cfg.dialogue.max_turns == 15
        assert cfg.dialogue.max_new_tokens == 500 and tc.steps_per_iteration == 10
