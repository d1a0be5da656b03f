"""Loading the Hydra config and turning it into SEAD objects. Errors name the config field at fault."""

from __future__ import annotations

import dataclasses
import importlib
import logging
import operator
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sead.errors import SEADInputError, read_user_text
from sead.yaml_loading import UniqueKeyLoader

SHIPPED_CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"  # the checkout's, beside the package


def config_dir() -> Path:
    """`SEAD_CONFIG_DIR`, else the `configs/` folder next to the package (the repository checkout)."""
    env = os.environ.get("SEAD_CONFIG_DIR")
    path = Path(env) if env else SHIPPED_CONFIG_DIR
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
        message = str(e).split("Config search path:")[0].strip()  # where Hydra looked is noise to a user
        if match := re.match(r"Could not override '([\w.]+)'", message):
            from sead.config_docs import unknown_key_hint

            # Hydra's next line, "To append to your config use +KEY=...", is dropped: every group's keys are fixed
            # by its schema or its simulator, so appending one only moves the error.
            message = message.partition("\n")[0] + unknown_key_hint(match[1], config_dir())
        raise SEADInputError(f"bad config or override: {message}") from None
    except (UnicodeDecodeError, yaml.YAMLError):
        for f in sorted(config_dir().rglob("*.yaml")):  # Hydra does not say which file it could not read
            check_yaml_file(f)
        raise
    if cfg.get("resume") and config_name == "sead":
        from sead.run.frozen_config import with_saved_settings

        # Against the defaults: a preset or group named on a resume sets what it changes, like a key=value does,
        # and the resume accepts or refuses that change; it is never dropped for the run's own values unsaid.
        cfg = with_saved_settings(cfg, load_config([]), overrides)
    return cfg


def check_yaml_file(path: Path) -> None:
    """Raise SEADInputError naming `path` and the line where it is not UTF-8 text or not YAML."""
    text = read_user_text(path, "config file")
    try:
        yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SEADInputError(
            f"not valid YAML: {problem}", path=path, line=mark.line + 1 if mark is not None else None
        ) from None


MAX_SEED = 2**31 - 1  # a seed a user sets; the seeds derived from it (sead.dialogue.seeds) stay within 64 bits
# The temperatures sampling takes besides 0 (greedy): logits are divided by it, and past these bounds the division
# overflows (1e-9) or flattens every distribution to noise (inf).
MIN_TEMPERATURE, MAX_TEMPERATURE = 0.01, 10.0


@dataclasses.dataclass(frozen=True)
class Domain:
    """The values a config field accepts. None (an optional field switched off) always passes; a list field's
    items and a dict field's values are checked one by one. Every numeric field has an upper bound as well as a
    lower one: a finite but absurd value (an lr of 1e30) fails at load, not as weights of 1e30 saved with exit 0.
    `also`: single values accepted outside the range (a temperature of 0, greedy, below the least sampled one)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] = ()
    also: tuple[float, ...] = ()

    def _bounds(self):
        return [
            (sign, bound, op)
            for sign, bound, op in (
                (">=", self.ge, operator.ge),
                (">", self.gt, operator.gt),
                ("<=", self.le, operator.le),
                ("<", self.lt, operator.lt),
            )
            if bound is not None
        ]

    def describe(self) -> str:
        """What the field takes, as the error says it: `one of a, b`, `>= 0 and < 1` or `>= 0.01 and <= 10 (or 0)`.
        An integer bound is written out whole (`<= 2147483647`), a float one short (`<= 1e+06`)."""
        if self.choices:
            return f"one of {', '.join(self.choices)}"
        besides = f" (or {', '.join(_number(a) for a in self.also)})" if self.also else ""
        return " and ".join(f"{sign} {_number(bound)}" for sign, bound, _ in self._bounds()) + besides

    def problem(self, value: Any) -> str | None:
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
        for v in items:
            if v is None or v in self.also:
                continue
            if self.choices and v not in self.choices:
                return f"must be {self.describe()}, got {v!r}"
            # "not inside" rather than "outside": NaN compares false to everything and is refused too
            if any(not op(v, bound) for _, bound, op in self._bounds()):
                return f"must be {self.describe()}, got {v}"
        return None


def _number(bound: float) -> str:
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def number(
    default: Any = dataclasses.MISSING,
    *,
    default_factory: Any = dataclasses.MISSING,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    also: tuple[float, ...] = (),
):
    """A numeric config field with its domain, e.g. `max_batch: int = number(8, ge=1, le=65536)`; `to_schema`
    checks it."""
    domain = Domain(ge=ge, gt=gt, le=le, lt=lt, also=also)
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"domain": domain})


def one_of(*choices: str):
    """A string config field that takes one of `choices`; the first is its default."""
    return dataclasses.field(default=choices[0], metadata={"domain": Domain(choices=choices)})


def to_schema(cls, node: Any, field: str):
    """Check a config node against a dataclass schema: unknown keys, wrong types and values outside a field's
    domain (in nested dataclasses too) raise a SEADInputError naming the field."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(cls), node if node is not None else {})
    except OmegaConfBaseException as e:
        key = _join(field, getattr(e, "full_key", None) or "")
        message = str(e).splitlines()[0]
        if message.startswith("Key ") and " not in " in message:  # a key the schema does not have
            from sead.config_docs import unknown_key_hint

            message += unknown_key_hint(key, config_dir())
        raise SEADInputError(message, field=key or None) from None
    _check_domains(merged, field)  # before the dataclasses' own checks, which compare fields already in range
    return OmegaConf.to_object(merged)


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix and key else prefix or key


def _check_domains(node: DictConfig, prefix: str) -> None:
    """Every field of a structured config node (a dataclass schema merged with the config) against its domain."""
    for f in dataclasses.fields(OmegaConf.get_type(node)):
        value, name = node[f.name], _join(prefix, f.name)
        if isinstance(value, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(value)):
            _check_domains(value, name)
        elif "domain" in f.metadata:
            plain = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
            if problem := f.metadata["domain"].problem(plain):
                raise SEADInputError(problem, field=name)


# The config groups that have a dataclass schema. Imported when used: some schemas' modules pull in torch.
SCHEMAS = {
    "controller": "sead.config:ControllerConfig",
    "dialogue": "sead.dialogue.runner:RunnerConfig",
    "eval": "sead.eval.settings:EvalConfig",
    "model": "sead.models.loading:ModelConfig",
    "reward": "sead.reward:RewardWeights",
    "trainer": "sead.trainer.schema:TrainerConfig",
    "verl": "sead.verl_backend.launcher:VerlSettings",
}


def schema_of(group: str) -> type:
    module, name = SCHEMAS[group].split(":")
    return getattr(importlib.import_module(module), name)


def group_config(cfg: DictConfig, group: str):
    """The config group `group` as its checked dataclass."""
    return to_schema(schema_of(group), cfg.get(group), group)


@dataclasses.dataclass
class ProfilesConfig:
    n: int = number(100, ge=1, le=10_000_000)  # profiles `sead profiles sample` draws from the controller
    out: str = "outputs/profiles.jsonl"  # where it writes them: .jsonl or .parquet


@dataclasses.dataclass
class TopLevelConfig:
    """The keys of configs/sead.yaml outside the groups (each group below has a schema of its own)."""

    seed: int = number(0, ge=0, le=MAX_SEED)  # the run's seed: profiles drawn, every dialogue's sampling and user draws
    # embedded: torch + transformers on this machine (CPU or one GPU) | verl: multi-GPU (Ray, FSDP, vLLM rollouts)
    backend: str = one_of("embedded", "verl")
    run_dir: str = "outputs/runs/${now:%Y%m%d-%H%M%S}"  # a new folder per run; pass run_dir=... to name it
    # continue the run in run_dir from its newest checkpoint that verifies, under the settings it was started with
    # (keys not given come from its config.yaml; free to change: trainer.iterations, max_minutes, save_every,
    # logging, eval.*, profiles.*)
    resume: bool = False
    # with resume: continue even where a setting that defines the run changed; the new config is saved beside the
    # original as config.resume_NNNNNN.yaml and the change logged (never the backend, model.preset, trainer.lora or
    # the estimator: the checkpoint was made under them)
    resume_allow_changes: bool = False
    profiles: ProfilesConfig = dataclasses.field(default_factory=ProfilesConfig)
    scenario: Any = None  # checked when built: Scenario.from_config names every bad key
    usersim: Any = None  # its keys are the chosen simulator's constructor arguments, checked when it is built
    controller: Any = None
    dialogue: Any = None
    eval: Any = None
    model: Any = None
    reward: Any = None
    trainer: Any = None
    verl: Any = None


# Keys that once existed and are now derived from another or gone; a config or command line that still sets one is
# told why, and a saved run config's copy is dropped on resume (sead/run/frozen_config.py).
RETIRED = {
    "trainer.update.temperature": "the update uses the rollouts' own temperature: set trainer.sampling.temperature",
    "controller.update_every": "the controller reweights once per iteration: set trainer.steps_per_iteration",
    "controller.concern_focus": "behaviours are drawn uniformly (a focus on the kinds answered least measured no "
    "better than without it)",
}


def check_config(cfg: DictConfig) -> None:
    """Every key against its schema: a misspelt top-level key, a bad key or number in a group fails at once, not
    after a model has loaded or a run folder was written by whichever part reads it first."""
    for key, where in RETIRED.items():
        if OmegaConf.select(cfg, key, default=None) is not None:
            raise SEADInputError(f"no longer a setting: {where}", field=key)
    groups = {f.name for f in dataclasses.fields(TopLevelConfig) if f.type == "Any"}
    # The groups are left out here: each is checked below or where it is built (usersim may hold a `???` that
    # build_usersim names), so reading them whole would only raise OmegaConf's own error first.
    to_schema(TopLevelConfig, OmegaConf.masked_copy(cfg, [k for k in cfg if k not in groups]), "")
    for group in SCHEMAS:
        group_config(cfg, group)


@dataclasses.dataclass
class PlausibilityConfig:
    """`controller.plausibility`: an LLM pass over each training step's profiles (sead/controller/plausibility.py)."""

    # an LLM checks each step's sampled profiles and may swap a behaviour for another library entry that fits the
    # sampled state better (never the numbers); `sead train` checks the endpoint before it starts
    enabled: bool = False
    base_url: str = "http://127.0.0.1:8000/v1"  # an OpenAI-compatible endpoint
    model: str = "Qwen/Qwen2.5-14B-Instruct"  # the model name the endpoint serves
    api_key: str = "EMPTY"  # vLLM ignores it
    timeout: float = number(60.0, gt=0, le=3600)  # seconds per call
    candidates: int = number(30, ge=1, le=10_000)  # library entries offered as replacements per profile
    concurrency: int = number(8, ge=1, le=10_000)  # calls in flight at once


@dataclasses.dataclass
class ControllerConfig:
    # the curriculum rule (sead/controller/curriculum.py): fixed (the marginals as given) | sead_joint (the paper's:
    # p(state) ~ max(eps, 1 - |CR(state) - target|)) | sead_marginal (the original code's, per dimension)
    rule: str = "fixed"
    target: float = number(0.5, ge=0, le=1)  # the completion rate the adaptive rules steer sampling toward
    band: float = number(0.1, ge=0, le=1)  # sead_marginal: a CR within target +- band counts as on target
    eps: float = number(0.05, gt=0, le=1)  # sead_joint: floor of a state's weight (at 0 all could vanish)
    # dialogues a rule needs before it reweights: sead_marginal in all, sead_joint per state (fewer: at target)
    min_count: int = number(1, ge=1, le=1_000_000)
    # updates whose dialogues the rule reads (this one and window - 1 before it)
    window: int = number(1, ge=1, le=1_000_000)
    marginals: Any = None  # null: the scenario's default_marginals; else {cooperation: {1: 0.3, ...}, ...}
    plausibility: PlausibilityConfig = dataclasses.field(default_factory=PlausibilityConfig)


def build_scenario(cfg: DictConfig):
    from sead.scenario import Scenario

    return Scenario.from_config(OmegaConf.to_container(cfg.scenario), project_root())


def build_controller(cfg: DictConfig, scenario):
    from sead.controller import ProfileController, make_curriculum
    from sead.scenario.profile_space import normalise_distribution

    c = group_config(cfg, "controller")
    marginals = dict(scenario.default_marginals)
    for name, dist in (c.marginals or {}).items():
        if name not in scenario.space.sampled_names:
            raise SEADInputError(
                f"{name!r} is not a sampled dimension of scenario {scenario.name!r}",
                field=f"controller.marginals.{name}",
            )
        marginals[name] = normalise_distribution(dist, scenario.space[name], field=f"controller.marginals.{name}")
    rule = make_curriculum(
        c.rule, scenario.space, marginals, target=c.target, band=c.band, eps=c.eps, min_count=c.min_count
    )
    # One reweighting per iteration, derived rather than set twice: the verl backend writes an iteration's profiles
    # before it starts, so the controller can only change between iterations, and both backends must agree.
    every = group_config(cfg, "trainer").steps_per_iteration
    return ProfileController(scenario, rule, seed=int(cfg.seed), update_every=every, window=c.window)


def reward_weights(cfg: DictConfig):
    weights = group_config(cfg, "reward")
    for term in ("stage_progress", "concerns_answered"):
        warn_if_not_scripted(cfg, f"reward.{term}", getattr(weights, term), "so the term is 0")
    return weights


def warn_if_not_scripted(cfg: DictConfig, setting: str, value, consequence: str) -> None:
    """Settings that read what the user acknowledged (SOP stages, answered concerns): only the scripted user
    reports it (see sead/reward.py), so under another simulator a set value does nothing."""
    simulator = (cfg.get("usersim") or {}).get("name", "scripted")
    if value and simulator != "scripted":
        logging.getLogger(__name__).warning(
            "%s=%s has no effect with the %s simulator: it reports no acknowledged SOP stages or answered concerns, %s",
            setting,
            value,
            simulator,
            consequence,
        )


def needs_rules(cfg: DictConfig) -> list[str]:
    """The parts this config runs that read the scenario's rules file (`sead.usersim.rules_file.scenario_rules`):
    the scripted user, and the scripted reference agent where the trainer plays it."""
    trainer = group_config(cfg, "trainer")
    parts = {
        "the scripted user (usersim=scripted)": (cfg.get("usersim") or {}).get("name", "scripted") == "scripted",
        "the warm-up's reference agent (trainer.warmup.dialogues > 0)": trainer.warmup.dialogues > 0,
        "reference branches (trainer.branch.source=reference)": trainer.branch.groups > 0
        and trainer.branch.source == "reference",
    }
    return [part for part, used in parts.items() if used]


def runner_config(cfg: DictConfig):
    return group_config(cfg, "dialogue")


def build_usersim(cfg: DictConfig, scenario):
    """The simulator named by `usersim.name`; the other keys are its constructor arguments."""
    from sead.usersim import SIMULATORS

    spec = OmegaConf.to_container(cfg.usersim) if cfg.get("usersim") is not None else {"name": "scripted"}
    name = spec.pop("name", None)
    if name not in SIMULATORS:
        raise SEADInputError(
            f"unknown user simulator {name!r}; choose one of {', '.join(sorted(SIMULATORS))}", field="usersim.name"
        )
    missing = [k for k, v in spec.items() if v == "???"]
    if missing:
        raise SEADInputError(f"set {', '.join('usersim.' + k for k in missing)}", field=f"usersim.{missing[0]}")
    try:
        return SIMULATORS[name](scenario, **spec)
    except TypeError as e:
        message = f"bad settings for the {name} simulator: {e}"
        if unexpected := re.search(r"unexpected keyword argument '(\w+)'", str(e)):  # `+usersim.KEY=` of another
            from sead.config_docs import unknown_key_hint

            message += unknown_key_hint(f"usersim.{unexpected[1]}", config_dir())
        raise SEADInputError(message, field="usersim") from None
