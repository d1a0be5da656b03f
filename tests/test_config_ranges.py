"""Every number and fixed-choice string in the config schemas has a declared domain, checked when the config is
turned into its dataclass; the group files of configs/ agree with the dataclass defaults they restate."""

import dataclasses
import types
import typing

import pytest
from omegaconf import OmegaConf

from sead.config import SCHEMAS, check_config, config_dir, load_config, schema_of, to_schema
from sead.errors import SEADInputError


def _leaf_type(tp):
    """int for `int`, `int | None`, `list[int]` and `dict[str, int]`; the annotation itself otherwise."""
    if typing.get_origin(tp) in (list, dict):
        return _leaf_type(typing.get_args(tp)[-1])
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _leaf_type(args[0]) if len(args) == 1 else tp
    return tp


def _schema_fields(cls, prefix):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _schema_fields(hints[f.name], f"{prefix}.{f.name}")
        else:
            yield f"{prefix}.{f.name}", f, hints[f.name]


FIELDS = [row for group in SCHEMAS for row in _schema_fields(schema_of(group), group)]


# Fields whose whole range holds only beside another field's value: a step of one profile leaves room for the most
# branched groups its seeds keep apart.
BESIDE = {  # what a field needs beside it to be valid at all
    "trainer.branch.groups": {"profiles_per_step": 1},
    "trainer.update.imitation_coef": {"warmup": {"dialogues": 2}},  # the anchor imitates the warm-up's dialogues
}


def _check(path: str, value):
    """The config group of `path` with only that field set (and what BESIDE names), through the schema check."""
    group, *keys = path.split(".")
    node = value
    for key in reversed(keys):
        node = {key: node}
    return to_schema(schema_of(group), {**BESIDE.get(path, {}), **node}, group)


def test_every_numeric_field_declares_its_domain_with_an_upper_bound():
    """An upper bound on every number: a finite but absurd value (lr=1e30, a reward weight of 1e300) is refused at
    load, as a non-finite one is, instead of training on it."""
    numeric = [(path, f) for path, f, hint in FIELDS if _leaf_type(hint) in (int, float)]
    assert len(numeric) > 80  # every group's schema was walked, nested ones included
    assert [path for path, f in numeric if "domain" not in f.metadata] == []
    domains = {path: f.metadata["domain"] for path, f in numeric}
    assert [path for path, d in domains.items() if d.le is None and d.lt is None] == []


def _boundary_cases():
    """(field, a value on the boundary that must pass, one just outside that must not) for every declared bound."""
    for path, f, hint in FIELDS:
        domain = f.metadata.get("domain")
        if domain is None:
            continue
        # a list's items and a dict's values are checked
        wrap = {list: lambda v: [v], dict: lambda v: {0: v}}.get(typing.get_origin(hint), lambda v: v)
        if domain.choices:
            yield pytest.param(path, domain.choices[-1], domain.choices[0] + "2", id=f"{path} in choices")
        step = 1 if _leaf_type(hint) is int else 1e-6
        for sign, bound, inside, outside in (
            (">=", domain.ge, 0, -step),
            (">", domain.gt, step, 0),
            ("<=", domain.le, 0, step),
            ("<", domain.lt, -step, 0),
        ):
            if bound is not None:
                yield pytest.param(path, wrap(bound + inside), wrap(bound + outside), id=f"{path} {sign} {bound}")


@pytest.mark.parametrize("path,inside,outside", list(_boundary_cases()))
def test_each_declared_domain_refuses_just_outside_and_accepts_its_boundary(path, inside, outside):
    obj = _check(path, inside)
    for key in path.split(".")[1:]:
        obj = getattr(obj, key)
    assert (
        obj.items() >= inside.items() if isinstance(inside, dict) else obj == inside
    )  # a dict merges into the default
    with pytest.raises(SEADInputError) as e:
        _check(path, outside)
    assert e.value.field == path and "must be" in e.value.detail


@pytest.mark.parametrize(
    "path,refused,accepted,message",
    [
        ("trainer.max_batch", 0, 1, "must be >= 1 and <= 65536, got 0"),  # 0 rows per generation call spun forever
        ("trainer.profiles_per_step", 0, 1, "must be >= 1 and <= 1000000, got 0"),  # an empty step
        ("eval.max_batch", 0, 1, "must be >= 1 and <= 65536, got 0"),
        # training rollouts must be sampled: greedy ones make a group alike, and the update divides logits by it
        ("trainer.sampling.temperature", 0, 0.1, "must be >= 0.01 and <= 10, got 0"),
        ("trainer.validation.sampling.temperature", -0.5, 0, "must be >= 0.01 and <= 10 (or 0)"),  # 0 is greedy
        # logits divided by 1e-9 overflow; at inf every token is as likely as any other
        ("trainer.sampling.temperature", 1e-9, 0.01, "must be >= 0.01 and <= 10, got 1e-09"),
        ("trainer.sampling.temperature", float("inf"), 10, "must be >= 0.01 and <= 10, got inf"),
        ("eval.sampling.temperature", 1e-9, 0.01, "must be >= 0.01 and <= 10 (or 0), got 1e-09"),
        ("trainer.update.lr", 1e30, 1, "must be > 0 and <= 1, got 1e+30"),  # once saved weights of about 1e30
        ("reward.completion", float("inf"), 1000, "must be >= 0 and <= 1000, got inf"),  # once made every reward NaN
        ("trainer.update.kl_coef", float("inf"), 10, "must be >= 0 and <= 10, got inf"),
        ("trainer.update.weight_decay", float("inf"), 1, "must be >= 0 and <= 1, got inf"),
        ("trainer.validation.sampling.top_p", 0, 1, "must be > 0 and <= 1"),
        ("eval.sampling.top_p", 1.5, 0.9, "must be > 0 and <= 1"),
        ("trainer.update.lr", 0, 1e-7, "must be > 0"),
        ("trainer.update.kl_coef", -0.1, 0, "must be >= 0"),  # 0 turns the reference off
        ("trainer.update.clip_low", 1, 0.5, "must be >= 0 and < 1"),  # the ratio's floor 1 - clip_low must stay > 0
        ("trainer.update.gamma", 1.5, 1, "must be >= 0 and <= 1"),
        ("trainer.turn_cache_mb", -1, 0, "must be >= 0"),  # 0 switches the cache off
        ("trainer.max_minutes", 0, None, "must be > 0"),  # None: no budget
        ("trainer.warmup.dialogues", -1, 0, "must be >= 0"),  # 0: no warm-up
        ("eval.limit", 0, None, "must be >= 1"),
        ("dialogue.user_retries", -1, 0, "must be >= 0"),
        ("dialogue.response_cache.hit_rates", {0: 0.5, 2: 1.5}, {0: 0.0, 2: 1.0}, "must be >= 0 and <= 1, got 1.5"),
        ("dialogue.response_cache.min_entries", 0, 1, "must be >= 1"),
        ("controller.plausibility.timeout", 0, 0.5, "must be > 0"),
        ("dialogue.max_turns", 0, 1, "must be >= 1"),
        ("controller.eps", 0, 1, "must be > 0 and <= 1"),
        ("verl.usersim_port", 70000, 8000, "must be >= 1 and <= 65535"),
        ("reward.completion", -1.0, 0.0, "must be >= 0"),
        ("trainer.update.estimator", "ppo2", "ppo", "must be one of grpo, ppo, got 'ppo2'"),
        ("dialogue.on_malformed", "stop", "end", "must be one of feedback, end"),
        ("dialogue.agent_sees", "think", "think_and_reply", "must be one of reply, think_and_reply"),
        ("model.dtype", "float8", "bfloat16", "must be one of"),
        ("verl.rollout_engine", "trtllm", "sglang", "must be one of vllm, sglang"),
        ("eval.backend", "tgi", "vllm", "must be one of transformers, vllm"),
    ],
)
def test_the_domains_are_the_settings_real_ones(path, refused, accepted, message):
    _check(path, accepted)
    with pytest.raises(SEADInputError) as e:
        _check(path, refused)
    assert str(e.value).startswith(f"[{path}]: {message}")


def test_nan_is_outside_every_range():
    with pytest.raises(SEADInputError, match=r"\[trainer.update.lr\]: must be > 0 and <= 1, got nan"):
        check_config(load_config(["trainer.update.lr=nan"]))


@pytest.mark.parametrize("preset", sorted(p.stem for p in (config_dir() / "preset").glob("*.yaml")))
def test_every_preset_passes_the_checks(preset):
    check_config(load_config([f"preset={preset}"]))


# A group's variant files exist to change these keys; every other key they set restates the default.
VARIANT_KEYS = {
    "model/tiny.yaml": {"preset", "dtype"},  # the tiny model stays fp32 on every machine: its tests compare exactly
    "controller/sead_joint.yaml": {"rule", "min_count"},
    "controller/sead_marginal.yaml": {"rule", "min_count"},
}


def _differences(node: dict, default, prefix=""):
    for key, value in node.items():
        if key == "defaults":
            continue
        current = getattr(default, key)
        if dataclasses.is_dataclass(current):
            yield from _differences(value, current, f"{prefix}{key}.")
        elif value != current:
            yield f"{prefix}{key}"


@pytest.mark.parametrize("rel", sorted(f"{g}/{p.name}" for g in SCHEMAS for p in (config_dir() / g).glob("*.yaml")))
def test_group_files_agree_with_the_dataclass_defaults(rel):
    group = rel.split("/")[0]
    node = OmegaConf.to_container(OmegaConf.load(config_dir() / rel))
    assert set(_differences(node, schema_of(group)())) == VARIANT_KEYS.get(rel, set())


@pytest.mark.parametrize(
    "override, field, message",
    [
        ("+foo=1", "[foo]", "not in"),  # a misspelt top-level key used to pass silently
        ("backend=gpu", "[backend]", "must be one of embedded, verl"),
        ("seed=-1", "[seed]", "must be >= 0"),
        ("profiles.n=0", "[profiles.n]", "must be >= 1"),
    ],
)
def test_top_level_keys_are_checked_too(override, field, message):
    with pytest.raises(SEADInputError) as e:
        check_config(load_config([override]))
    assert str(e.value).startswith(field) and message in str(e.value)
    check_config(load_config([]))


@pytest.mark.parametrize(
    "override, hint",
    [
        ("+trainer.update.temperature=1.0", "set trainer.sampling.temperature"),
        ("+controller.update_every=3", "set trainer.steps_per_iteration"),
        ("+controller.concern_focus=2", "behaviours are drawn uniformly"),
    ],
)
def test_a_retired_setting_says_why(override, hint):
    with pytest.raises(SEADInputError) as e:
        check_config(load_config([override]))
    key = override[1:].split("=")[0]
    assert str(e.value).startswith(f"[{key}]: no longer a setting") and hint in str(e.value)


def test_the_schema_names_every_estimator_and_no_other():
    from sead.trainer.estimators import ESTIMATORS
    from sead.trainer.schema import UpdateConfig

    field = next(f for f in dataclasses.fields(UpdateConfig) if f.name == "estimator")
    assert set(field.metadata["domain"].choices) == set(ESTIMATORS)


def test_checking_a_config_imports_no_torch():
    """Config schemas are leaves: `sead --help`, `scenario check` and the load-time checks stay light."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom sead.config import SCHEMAS, check_config, load_config, schema_of\n"
        "check_config(load_config([]))\n[schema_of(g) for g in SCHEMAS]\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    "override, message",
    [
        ("usersim.timeout=0", "[usersim.timeout]: must be > 0 and <= 3600, got 0"),
        ("usersim.timeout=inf", "[usersim.timeout]: must be > 0 and <= 3600, got inf"),
        ("usersim.max_tokens=0", "[usersim.max_tokens]: must be >= 1 and <= 1000000, got 0"),
        ("usersim.max_tokens=many", "[usersim.max_tokens]: must be a number, got 'many'"),
        ("usersim.temperature=1e-9", "[usersim.temperature]: must be >= 0.01 and <= 10 (or 0), got 1e-09"),
    ],
)
def test_the_simulators_numbers_are_checked_when_it_is_built(override, message):
    """usersim.* are a simulator's constructor arguments, with no schema of their own: it checks them itself."""
    from sead.config import build_scenario, build_usersim

    cfg = load_config(["usersim=openai", override])
    with pytest.raises(SEADInputError) as e:
        build_usersim(cfg, build_scenario(cfg))
    assert str(e.value) == message
