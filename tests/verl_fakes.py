"""Stand-ins for the GPU parts of a verl run, and the checks the verl tests share. No verl import at the top:
the outer-loop tests use this module without verl.

`ChatMLServer` plays verl's server client token-in/token-out: it decodes the prompt ids it is sent, reads the
ChatML turns back out of them, lets SEAD's scripted reference agent answer, and returns that answer's ids. A
loop that sent wrong prompt ids would therefore get a different dialogue, not just different bookkeeping.
`assert_matches_embedded_runner` is the check that matters: what verl got from SEAD's agent loop is what the
embedded runner yields for the same row.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from sead.config import build_scenario, load_config, reward_weights
from sead.dialogue.episode import Episode
from sead.dialogue.runner import run_episode
from sead.dialogue.seeds import train_episode_seed
from sead.policy.scripted import ReferenceAgent
from sead.reward import compute_reward
from sead.run.layout import RunLayout

TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", re.S)
FAKE_LOGPROB = -0.5


@dataclass
class FakeTokenOutput:
    token_ids: list[int]
    log_probs: list[float] | None


class ChatMLServer:
    def __init__(self, scenario, tokenizer, output_type=FakeTokenOutput):
        self.agent, self.tokenizer, self.output_type = ReferenceAgent(scenario, tokenizer), tokenizer, output_type
        self.requests: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        self.requests.append(
            {"request_id": request_id, "prompt_ids": list(prompt_ids), "sampling_params": dict(sampling_params)}
        )
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        messages = [{"role": r, "content": c} for r, c in TURN.findall(text)]
        reply = await self.agent.reply(messages, seed=0)
        limit = sampling_params["max_tokens"]
        ids = self.tokenizer.encode(reply, add_special_tokens=False)[: limit - 1] + [self.tokenizer.eos_token_id]
        return self.output_type(token_ids=ids, log_probs=[FAKE_LOGPROB] * len(ids))


def tiny_model_dir(root: Path) -> Path:
    """SEAD's tiny preset (random weights, SmolLM2 tokenizer) as an HF folder: what verl reads from model.path."""
    from sead.models.loading import ModelConfig, load_model

    out = root / "tiny-model"
    if not (out / "config.json").exists():
        model, tok, _ = load_model(ModelConfig(preset="tiny", dtype="float32"))
        model.save_pretrained(out)
        tok.save_pretrained(out)
    return out


SMALL_DIALOGUES = [
    "dialogue.max_turns=5",
    "dialogue.max_new_tokens=200",
    "dialogue.max_total_tokens=2400",
    "dialogue.max_context_tokens=8192",
    "verl.max_prompt_length=2048",
    "verl.max_response_length=3072",
]


def verl_run_config(tmp: Path, *extra: str):
    """A backend=verl config on the scripted user, its resolved copy written where the agent loop reads it (with the
    simulator record a start writes beside it, so a trainer started there takes it for a start to take over)."""
    model = tiny_model_dir(tmp)
    cfg = load_config(
        ["preset=gpu1", "usersim=scripted", f"model.path={model}", f"run_dir={tmp / 'run'}", *SMALL_DIALOGUES, *extra]
    )
    layout = RunLayout(tmp / "run")
    layout.path.mkdir(parents=True, exist_ok=True)
    layout.config.write_text(OmegaConf.to_yaml(cfg))
    layout.usersim.write_text('{"name": "scripted"}')
    return cfg, build_scenario(cfg)


def trainer_and_verl_config(cfg, *overrides: str):
    """The outer loop's first iteration, prepared, and the verl config its overrides (then `overrides`) compose."""
    from sead.verl_backend.launcher import compose_verl_config
    from sead.verl_backend.outer_loop import VerlTrainer

    trainer = VerlTrainer(cfg, runner=None)
    return trainer, compose_verl_config([*trainer.prepare_iteration(0), *overrides])


def agent_loop_batch(rows: list[dict], *, n: int = 1, v1_step: int | None = None):
    """What verl's trainers hand the agent-loop workers: every dataset row n times in a row, with the row's `index`
    and a `uid` per row. Its legacy trainer passes nothing else; its V1 trainer (`v1_step`: the step of its own
    count) also passes `global_steps` and `session_id`, the play's place in its group."""
    import numpy as np
    import torch
    from verl import DataProto

    plays = [(row, k) for row in rows for k in range(n)]

    def column(values):
        out = np.empty(len(plays), dtype=object)
        out[:] = values
        return out

    v1 = (
        {}
        if v1_step is None
        else {"global_steps": np.full(len(plays), v1_step), "session_id": np.array([k for _, k in plays])}
    )
    return DataProto.from_dict(
        tensors={"dummy": torch.zeros(len(plays), 1)},
        non_tensors={
            "raw_prompt": column([r["prompt"] for r, _ in plays]),
            "extra_info": column([r["extra_info"] for r, _ in plays]),
            "reward_model": column([r["reward_model"] for r, _ in plays]),
            "data_source": column([r["data_source"] for r, _ in plays]),
            "agent_name": column([r["agent_name"] for r, _ in plays]),
            "index": np.array([r["extra_info"]["index"] for r, _ in plays]),
            "uid": column([f"uid-{r['extra_info']['index']}" for r, _ in plays]),
            **v1,
        },
    )


def episode_reward(ep, ctx) -> float:
    """`sead.reward` itself under the run's weights: what the verl side's scores must equal."""
    return compute_reward(
        ep,
        reward_weights(ctx.cfg),
        ctx.scenario.space,
        num_stages=len(ctx.scenario.stages),
        max_turns=ctx.runner_cfg.max_turns,
    ).total


def assert_matches_embedded_runner(out, batch, *, ctx, tokenizer, step: int, n: int) -> list:
    """Each trajectory of verl's output (`out`, for `batch`, rows of SEAD step `step`) carries the ids, loss mask and
    log-probs the embedded runner yields when the reference agent plays the same row with the same seed, and its
    rollout record and extra fields say the same; the n plays of a row are the n rollouts of its group. Returns the
    embedded episodes, in batch order."""
    import torch

    path = ctx.layout.rollouts(step)
    records = {r["meta"]["episode_id"]: r for r in map(json.loads, path.read_text().splitlines())}
    assert len(records) == len(batch)
    n_prompt = len(ctx.first_prompt(tokenizer))
    width = out.batch["responses"].shape[1]
    episodes, sessions = [], {}
    for j, info in enumerate(batch.non_tensor_batch["extra_info"]):
        rec = out.non_tensor_batch["sead_episode"][j]
        group, session = int(info["group"]), int(rec["meta"]["episode_id"].rsplit("-r", 1)[1])
        assert rec["meta"]["episode_id"] == f"train-s{step}-p{group}-r{session}" and info["step"] == step
        assert rec["meta"]["episode_id"] in records
        sessions.setdefault(group, []).append(session)
        profile = Episode.from_dict(rec).profile
        assert profile.to_dict() == json.loads(info["profile"])
        agent = ReferenceAgent(ctx.scenario, tokenizer)
        embedded = asyncio.run(
            run_episode(
                profile,
                scenario=ctx.scenario,
                agent=agent,
                user=ctx.user,
                tokenizer=tokenizer,
                cfg=ctx.runner_cfg,
                seed=train_episode_seed(int(ctx.cfg.seed), step, group, session, n),
            )
        )
        seg = embedded.segments[0]
        prompt = out.batch["prompts"][j]
        assert prompt[prompt.numel() - n_prompt :].tolist() == seg.ids[:n_prompt]
        n_resp = len(seg.ids) - n_prompt
        assert n_resp < width  # nothing cut
        assert out.batch["responses"][j][:n_resp].tolist() == seg.ids[n_prompt:]
        assert out.batch["response_mask"][j][:n_resp].tolist() == seg.mask[n_prompt:]
        assert out.batch["response_mask"][j][n_resp:].sum() == 0
        assert out.batch["attention_mask"][j].sum() == n_prompt + n_resp
        lp = out.batch["rollout_log_probs"][j][:n_resp]
        assert torch.allclose(lp, torch.tensor([FAKE_LOGPROB if m else 0.0 for m in seg.mask[n_prompt:]]))
        assert rec["end_reason"] == embedded.end_reason
        assert rec["meta"]["reward"]["total"] == episode_reward(embedded, ctx)
        assert out.non_tensor_batch["sead_end_reason"][j] == embedded.end_reason
        assert out.non_tensor_batch["sead_turns"][j] == len(embedded.turns)
        assert out.non_tensor_batch["sead_profile"][j] == profile.to_dict()
        episodes.append(embedded)
    assert all(sorted(s) == list(range(n)) for s in sessions.values())  # each group's rollouts, each once
    return episodes


def use_cpu_training_engine() -> None:
    """Let verl's FSDP2 engine train on this process's CPU. Call it with VERL_PLATFORM=cpu set, before anything
    imports verl.workers.engine (the engine module reads the device name when imported).

    Stock verl 0.9.1 has no CPU platform: with no accelerator its detection falls back to 'nvidia'
    (verl/plugin/platform/platform_manager.py:113-117), and it registers its FSDP engines for cuda and npu only
    (verl/workers/engine/fsdp/transformer_impl.py:1143). Both are added here through verl's own registries, as an
    out-of-tree hardware plugin would add them; the device is the CPU and the collective backend gloo.
    """
    import contextlib

    import torch
    from verl.plugin.platform import PlatformRegistry
    from verl.plugin.platform.platform_base import PlatformBase

    @PlatformRegistry.register("cpu")
    class PlatformCPU(PlatformBase):
        device_name = vendor_name = "cpu"
        device_module = torch.cpu

        def current_device(self):
            return "cpu"  # an int index would make torch look for an accelerator

        def communication_backend_name(self):
            return "gloo"

        def ray_resource_name(self):
            return "CPU"

        def visible_devices_envvar(self):
            return "SEAD_CPU_VISIBLE_DEVICES"

        def get_device_capability(self, device_index=0):
            return None, None

        def is_available(self):
            return True

        def device_count(self):
            return 1

        def manual_seed(self, seed):
            torch.manual_seed(seed)

        manual_seed_all = manual_seed

        def ray_noset_envvars(self):
            return []

        def is_ipc_supported(self):
            return False

        def cudart(self):
            return None

        @contextlib.contextmanager
        def nvtx_range(self, msg):
            yield

        def set_device(self, device_index):
            pass

        def synchronize(self, device_index=None):
            pass

        def set_allocator_settings(self, settings):
            pass

        def empty_cache(self):
            pass

        def profiler_start(self):
            pass

        def profiler_stop(self):
            pass

    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    EngineRegistry.register(model_type="language_model", backend="fsdp2", device="cpu")(FSDPEngineWithLMHead)
