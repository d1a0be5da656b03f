"""Checks before a verl run, cheapest and most likely to fail first, each with a message that says what to do.

Also `python -m sead.verl_backend.preflight plan OVERRIDES...`: prints, as shell assignments, which GPUs serve
the user simulator and which train, for scripts/train_verl.sh.
"""

from __future__ import annotations

import asyncio
import sys

from omegaconf import DictConfig

from sead.config import build_scenario, build_usersim, group_config, load_config
from sead.controller.plausibility import check_endpoint
from sead.errors import SEADInputError
from sead.verl_backend import require_verl
from sead.verl_backend.launcher import VerlSettings, check_sead_config, verl_settings


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_gpus(vs: VerlSettings, found: int) -> None:
    if found == 0:
        raise SEADInputError(
            "backend=verl needs NVIDIA GPUs and this machine has none (torch sees no CUDA device). "
            "Train here with backend=embedded (bash scripts/main.sh), or run on a GPU node",
            field="backend",
        )
    if found < vs.n_gpus_per_node:
        raise SEADInputError(
            f"asks for {vs.n_gpus_per_node} training GPUs per node but {found} are visible "
            "(CUDA_VISIBLE_DEVICES); lower it or free GPUs",
            field="verl.n_gpus_per_node",
        )


def check_user_simulator(cfg: DictConfig) -> None:
    async def probe():
        user = build_usersim(cfg, build_scenario(cfg))
        try:
            await user.check_health()
        finally:
            await user.aclose()

    try:
        asyncio.run(probe())
    except SEADInputError:
        raise
    except Exception as e:  # connection refused, wrong model name, timeouts: all say the same thing to the user
        raise SEADInputError(
            f"the user simulator is not reachable: {e}. Start it with scripts/serve_user_sim.sh, "
            "or let scripts/main.sh start it (leave usersim.base_urls unset)",
            field="usersim.base_urls",
        ) from None


def preflight(cfg: DictConfig, *, gpus: int | None = None) -> None:
    vs = verl_settings(cfg)
    check_gpus(vs, visible_gpus() if gpus is None else gpus)
    check_sead_config(cfg, vs)
    require_verl()
    check_user_simulator(cfg)
    asyncio.run(check_endpoint(group_config(cfg, "controller").plausibility))


def gpu_plan(cfg: DictConfig, total: int) -> dict[str, str]:
    """Which of GPUs 0..total-1 serve the user simulator (verl.usersim_gpus) and which train: the others first,
    then shared ones where too few are left (gpu1: one GPU does both)."""
    vs = verl_settings(cfg)
    bad = [g for g in vs.usersim_gpus if not 0 <= g < total]
    if bad:
        raise SEADInputError(f"GPUs {bad} do not exist on this node ({total} visible)", field="verl.usersim_gpus")
    order = [g for g in range(total) if g not in vs.usersim_gpus] + list(vs.usersim_gpus)
    if len(order) < vs.n_gpus_per_node:
        raise SEADInputError(
            f"{vs.n_gpus_per_node} training GPUs asked, {total} on this node", field="verl.n_gpus_per_node"
        )
    train = order[: vs.n_gpus_per_node]
    return {
        "USERSIM_GPUS": ",".join(map(str, vs.usersim_gpus)),
        "TRAIN_GPUS": ",".join(map(str, train)),
        "USERSIM_PORT": str(vs.usersim_port),
        "USERSIM_MEMORY": str(vs.usersim_gpu_memory),
        "USERSIM_MODEL": vs.usersim_model,
        "USERSIM_NAME": str(cfg.usersim.name),
    }


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "plan" or not argv[1].isdigit():
        print("usage: python -m sead.verl_backend.preflight plan NUM_GPUS [key=value ...]", file=sys.stderr)
        return 2
    try:
        plan = gpu_plan(load_config(argv[2:]), int(argv[1]))
    except SEADInputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for key, value in plan.items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
