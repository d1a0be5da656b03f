"""The multi-GPU backend: SEAD's loop on top of the pinned PyPI release verl 0.9.1 (Ray, FSDP, vLLM rollout).

This is the only package that imports verl, and only in the modules that need it (`plugin`, `agent_loop`,
`launcher.compose_verl_config`), so `import sead` and the embedded backend never load it. Pieces:

- `agent_loop`: `SEADDialogueAgentLoop`, SEAD's own episode runner inside verl's agent-loop workers;
- `reward_fn`: the function verl's reward workers call (`reward.custom_reward_function`), over `sead.reward`;
- `dataset`: the parquet rows verl's RLHFDataset reads (one row per profile);
- `launcher`: SEAD config -> verl Hydra overrides, and the `python -m verl.trainer.main_ppo` subprocess;
- `outer_loop`: one verl run per curriculum iteration, controller feedback in between, SEAD's run layout;
- `plugin`: what verl imports in every process (the `verl.plugins` entry point).
"""

VERL_VERSION = "0.9.1"


def require_verl() -> None:
    """Fail with an instruction instead of an ImportError deep inside a Ray worker."""
    import importlib.metadata

    from sead.errors import SEADInputError

    try:
        found = importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        raise SEADInputError(
            f"backend=verl needs verl {VERL_VERSION}: pip install -e '.[verl]' (CPU checks) or "
            "run scripts/main.sh backend=verl on a GPU machine",
            field="backend",
        ) from None
    if found != VERL_VERSION:
        raise SEADInputError(f"backend=verl is built against verl {VERL_VERSION}, found {found}", field="backend")
