"""Seeds and seeded draws: each formula keeps the values runs were made with (a changed formula would replay other
dialogues on resume), and the two training backends seed a training rollout and draw the held-out profiles alike."""

import asyncio
import json

import pytest
from omegaconf import OmegaConf
from verl_fakes import verl_run_config

from sead.config import build_scenario, check_config, load_config
from sead.dialogue.seeds import (
    MAX_GROUP_MEMBERS,
    MAX_SEEDED_GROUPS,
    eval_episode_seed,
    group_agent_seed,
    train_episode_seed,
    turn_seed,
    validation_episode_seed,
    warmup_episode_seed,
)
from sead.errors import SEADInputError
from sead.eval.testset import sample_testset
from sead.policy.scripted import ReferenceAgent
from sead.run.layout import RunLayout
from sead.trainer.loop import train
from sead.verl_backend.episode_io import RunPlays, load_context, play_row
from sead.verl_backend.outer_loop import VerlTrainer


def test_each_formula_keeps_its_values():
    assert train_episode_seed(3, 5, 2, 1, 4) == 3 * 1_000_003 + 5 * 10_007 + 2 * 4 + 1 == 3_050_053
    assert validation_episode_seed(4242, 3, 1) == 4242 * 7919 + 3 * 31 + 1 == 33_592_492
    assert eval_episode_seed(7, 12, 2) == 7 * 1_000_003 + 12 * 101 + 2 == 7_001_235
    assert warmup_episode_seed(77, 5) == 77 * 104_729 + 5 == 8_064_138
    assert turn_seed(12345, 3) == 12_345_003
    assert group_agent_seed(3, 5, 2, 1) == -(3 * 1_000_003 + 5 * 10_007 + 2 * 101 + 1 + 1) == -3_050_248


def test_members_of_groups_of_different_sizes_never_share_an_agent_seed():
    # a step's shared-user groups of 5, then its branched groups of 4 (numbered after them)
    full = {group_agent_seed(7, 3, g, k) for g in range(3) for k in range(5)}
    branched = {group_agent_seed(7, 3, g, k) for g in range(3, 9) for k in range(4)}
    assert len(full) == 15 and len(branched) == 24 and not full & branched
    next_step = {group_agent_seed(7, 4, g, k) for g in range(9) for k in range(5)}
    assert not next_step & (full | branched)


def test_groups_wider_than_the_member_stride_are_refused_when_the_config_is_checked():
    wide = MAX_GROUP_MEMBERS + 1
    for overrides, field in (
        (["trainer.group_user=shared", f"trainer.rollouts_per_profile={wide}"], "rollouts_per_profile"),
        ([f"trainer.branch.size={wide}"], "branch.size"),
    ):
        with pytest.raises(SEADInputError) as e:
            check_config(load_config(overrides))
        assert e.value.field == f"trainer.{field}"
    # own users: each rollout takes a training seed, so a wide group is fine
    check_config(load_config([f"trainer.rollouts_per_profile={wide}"]))


def test_a_step_of_the_most_groups_allowed_keeps_its_seeds_apart_from_the_next_step():
    this = {group_agent_seed(7, 3, g, k) for g in range(MAX_SEEDED_GROUPS) for k in range(MAX_GROUP_MEMBERS)}
    assert len(this) == MAX_SEEDED_GROUPS * MAX_GROUP_MEMBERS
    assert not this & {group_agent_seed(7, 4, g, k) for g in range(MAX_SEEDED_GROUPS) for k in range(MAX_GROUP_MEMBERS)}
    # one group more, and its last members would take the next step's first group's seeds
    assert group_agent_seed(7, 3, MAX_SEEDED_GROUPS, MAX_GROUP_MEMBERS - 1) in {
        group_agent_seed(7, 4, 0, k) for k in range(MAX_GROUP_MEMBERS)
    }


def test_steps_with_more_seeded_groups_than_the_stride_holds_are_refused():
    fits = MAX_SEEDED_GROUPS - 10
    check_config(load_config([f"trainer.profiles_per_step={fits}", "trainer.branch.groups=10"]))
    for overrides in (
        [f"trainer.profiles_per_step={fits}", "trainer.branch.groups=11"],
        ["trainer.group_user=shared", f"trainer.profiles_per_step={MAX_SEEDED_GROUPS + 1}"],
        [  # refill rounds number their profiles' groups after the first round's
            "trainer.group_user=shared",
            f"trainer.profiles_per_step={MAX_SEEDED_GROUPS // 2 + 1}",
            "trainer.update.dynamic_sampling=true",
            "trainer.update.refill_rounds=1",
        ],
    ):
        with pytest.raises(SEADInputError, match="at most 99 groups") as e:
            check_config(load_config(overrides))
        assert e.value.field == "trainer.profiles_per_step"
    # own users and no branches: every rollout takes a training seed, so many groups are fine
    check_config(load_config([f"trainer.profiles_per_step={MAX_SEEDED_GROUPS + 1}"]))


@pytest.fixture(scope="module")
def embedded_run(tmp_path_factory):
    """One step of the embedded trainer on the tiny model, after its start-of-run validation."""
    run = tmp_path_factory.mktemp("seeds") / "run"
    return train(
        load_config(
            [
                "preset=tiny",
                "trainer.iterations=1",
                "trainer.steps_per_iteration=1",
                "trainer.validation.profiles=3",
                "seed=5",
                f"run_dir={run}",
            ]
        )
    )


def test_both_backends_seed_a_training_rollout_alike(embedded_run, tmp_path, smollm_tokenizer):
    layout = RunLayout(embedded_run)
    embedded = {r["meta"]["episode_id"]: r for r in map(json.loads, layout.rollouts(1).read_text().splitlines())}
    assert len(embedded) == 4  # 2 profiles x 2 rollouts
    # verl's agent loop, with the same run seed, plays the same rows of the same step
    verl_run = RunLayout(tmp_path / "verl")
    verl_run.path.mkdir()
    verl_run.config.write_text(
        OmegaConf.to_yaml(OmegaConf.merge(OmegaConf.load(layout.config), {"run_dir": str(verl_run.path)}))
    )
    ctx = load_context(verl_run.config)
    agent = ReferenceAgent(ctx.scenario, smollm_tokenizer)
    seeds = {}
    plays = RunPlays(tmp_path / "plays", steps_per_iteration=1, validations=(), group_size=2, val_trials=1)
    for i in range(2):
        for k in range(2):  # the row's k-th play in its step is its k-th rollout
            record = embedded[f"s1-p{i}-r{k}"]
            row = {"split": "train", "step": 1, "group": i, "profile": json.dumps(record["profile"])}
            ep, _ = asyncio.run(
                play_row(ctx, agent, smollm_tokenizer, extra_info=row, plays=plays, response_length=4096)
            )
            assert ep.meta["seed"] == record["meta"]["seed"]
            seeds[i, k] = ep.meta["seed"]
    assert seeds == {(i, k): train_episode_seed(5, 1, i, k, 2) for i in range(2) for k in range(2)}


def test_both_backends_and_eval_draw_the_held_out_profiles_alike(embedded_run, tmp_path):
    layout = RunLayout(embedded_run)
    validated = [json.loads(line)["profile"] for line in layout.validation_dialogues(0).read_text().splitlines()]
    cfg, _ = verl_run_config(tmp_path, "trainer.validation.profiles=3")
    verl = VerlTrainer(cfg, runner=None)
    assert [p.to_dict() for p in verl.val_profiles] == validated  # one trial per profile, in order
    seed = cfg.trainer.validation.seed
    restaurant = build_scenario(load_config([]))
    assert [p.to_dict() for p in sample_testset(restaurant, 3, seed)] == validated
