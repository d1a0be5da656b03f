"""Loading the Hydra config and turning it into SEAD objects. Errors name the config field at fault."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sead.errors import SEADInputError


def config_dir() -> Path:
    """`SEAD_CONFIG_DIR`, else the `configs/` folder next to the package (the repository checkout)."""
    env = os.environ.get("SEAD_CONFIG_DIR")
    path = Path(env) if env else Path(__file__).resolve().parent.parent / "configs"
    if not (path / "sead.yaml").is_file():
        raise SEADInputError("no sead.yaml here; set SEAD_CONFIG_DIR to your configs folder", path=path)
    return path


def project_root() -> Path:
    """Relative file paths in configs (prompts, behaviour libraries) are taken from here."""
    return config_dir().parent


def load_config(overrides: Sequence[str] = (), config_name: str = "sead") -> DictConfig:
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=list(overrides))
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as e:
        raise SEADInputError(f"bad config or override: {e}".strip()) from None
    return cfg


def to_schema(cls, node: Any, field: str):
    """Check a config node against a dataclass schema: unknown keys and wrong types name the field."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(cls), node if node is not None else {})
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or ""
        raise SEADInputError(str(e).splitlines()[0], field=f"{field}.{key}" if key else field) from None
    return OmegaConf.to_object(merged)


@dataclass
class ControllerConfig:
    rule: str = "fixed"
    update_every: int = 10
    target: float = 0.5
    band: float = 0.1
    eps: float = 0.05
    min_count: int = 1
    marginals: Any = None


def build_scenario(cfg: DictConfig):
    from sead.scenario import Scenario

    return Scenario.from_config(OmegaConf.to_container(cfg.scenario), project_root())


def build_controller(cfg: DictConfig, scenario):
    from sead.controller import ProfileController, make_curriculum
    from sead.scenario.profile_space import normalise_distribution

    c = to_schema(ControllerConfig, cfg.get("controller"), "controller")
    marginals = dict(scenario.default_marginals)
    for name, dist in (c.marginals or {}).items():
        if name not in scenario.space.sampled_names:
            raise SEADInputError(f"{name!r} is not a sampled dimension of scenario {scenario.name!r}",
                                 field=f"controller.marginals.{name}")
        marginals[name] = normalise_distribution(dist, scenario.space[name], field=f"controller.marginals.{name}")
    rule = make_curriculum(c.rule, scenario.space, marginals, target=c.target, band=c.band, eps=c.eps,
                           min_count=c.min_count)
    return ProfileController(scenario, rule, seed=int(cfg.seed), update_every=c.update_every)


def reward_weights(cfg: DictConfig):
    from sead.reward import RewardWeights

    return to_schema(RewardWeights, cfg.get("reward"), "reward")


def runner_config(cfg: DictConfig):
    from sead.dialogue.runner import RunnerConfig

    try:
        return to_schema(RunnerConfig, cfg.get("dialogue"), "dialogue")
    except ValueError as e:
        if isinstance(e, SEADInputError):
            raise
        raise SEADInputError(str(e), field="dialogue") from None


def build_usersim(cfg: DictConfig, scenario):
    """The simulator named by `usersim.name`; the other keys are its constructor arguments."""
    from sead.usersim import SIMULATORS

    spec = OmegaConf.to_container(cfg.usersim) if cfg.get("usersim") is not None else {"name": "scripted"}
    name = spec.pop("name", None)
    if name not in SIMULATORS:
        raise SEADInputError(f"unknown user simulator {name!r}; choose one of {', '.join(sorted(SIMULATORS))}",
                             field="usersim.name")
    missing = [k for k, v in spec.items() if v == "???"]
    if missing:
        raise SEADInputError(f"set {', '.join('usersim.' + k for k in missing)}", field=f"usersim.{missing[0]}")
    try:
        return SIMULATORS[name](scenario, **spec)
    except TypeError as e:
        raise SEADInputError(f"bad settings for the {name} simulator: {e}", field="usersim") from None
