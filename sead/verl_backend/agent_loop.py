"""`SEADDialogueAgentLoop`: one SEAD dialogue per verl trajectory, played by SEAD's own episode runner.

verl gives each trajectory a fresh loop object with its token-in/token-out server client. The loop wraps that
client as an `AgentPolicy`, runs `run_episode` (the code the embedded trainer and evaluation run), and hands
verl the episode's ids with SEAD's loss mask as the response mask. The rollout record, with its reward, goes to
the run directory, where the outer loop reads it for the controller. verl is imported here: load this module
only inside verl processes (plugin.py does).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from sead.dialogue.agent import AgentOutput, AgentPolicy, AgentRequest
from sead.verl_backend.dataset import AGENT_NAME
from sead.verl_backend.episode_io import RunPlays, extra_fields, load_context, play_row


class ServerManagerPolicy(AgentPolicy):
    """The policy behind verl's server client. One request id per dialogue keeps it on one server, so the
    prefix cache of its earlier turns is reused."""

    name = "verl"

    def __init__(self, server_manager, sampling_params: dict[str, Any], request_id: str):
        self.server_manager, self.sampling_params, self.request_id = server_manager, sampling_params, request_id
        self.logprobs_complete = True  # False once any turn came back without log-probs

    async def generate(self, request: AgentRequest) -> AgentOutput:
        params = {**self.sampling_params, "max_tokens": request.max_new_tokens}
        out = await self.server_manager.generate(
            self.request_id, prompt_ids=list(request.prompt_ids), sampling_params=params
        )
        if out.log_probs is None:
            self.logprobs_complete = False
        return AgentOutput(list(out.token_ids), None if out.log_probs is None else list(out.log_probs))

    def identity(self) -> dict:
        return {"name": self.name, "sampling": {k: v for k, v in self.sampling_params.items() if k != "logprobs"}}


@register(AGENT_NAME)
class SEADDialogueAgentLoop(AgentLoopBase):
    """Reads which dialogue to play from the row SEAD wrote (`extra_info`), never from what one of verl's trainers
    alone passes (its V1 trainer's `global_steps` and `session_id`), so both trainers run it."""

    def __init__(
        self, *args, sead_config: str, plays_file: str, steps_per_iteration: int, validations: list[int], **kwargs
    ):
        super().__init__(*args, **kwargs)
        self.sead_config = sead_config
        self.plays = RunPlays(
            Path(plays_file),
            steps_per_iteration,
            tuple(validations),
            group_size=int(self.rollout_config.n),
            val_trials=int(self.rollout_config.val_kwargs.n),
        )

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        ctx = load_context(self.sead_config)
        policy = ServerManagerPolicy(self.server_manager, sampling_params, uuid.uuid4().hex)
        ep, tokens = await play_row(
            ctx,
            policy,
            self.tokenizer,
            extra_info=dict(kwargs["extra_info"]),
            plays=self.plays,
            response_length=int(self.rollout_config.response_length),
        )
        timing = ep.meta["timing"]
        return AgentLoopOutput(
            prompt_ids=tokens.prompt_ids,
            response_ids=tokens.response_ids,
            response_mask=tokens.response_mask,
            response_logprobs=tokens.response_logprobs if policy.logprobs_complete else None,
            # verl counts messages after the prompt: every agent turn plus every user (or feedback) turn
            num_turns=sum(1 + (t.user is not None or t.feedback is not None) for t in ep.turns),
            metrics=AgentLoopMetrics(generate_sequences=timing["agent_s"], tool_calls=timing["user_s"]),
            extra_fields=extra_fields(ep),
        )
