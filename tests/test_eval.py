"""The evaluation suite: seeded test sets, reproducible and resumable runs, results, errors before dialogues."""

import json
import shutil

import pytest
from dialogue_fixtures import SPACE, agent, user

from sead.cli.main import main
from sead.dialogue.episode import Episode, Turn
from sead.eval.results import cr_by_state, pass_hat
from sead.eval.testset import content_hash, load_testset, make_testset
from sead.models.precision import compute_dtype
from sead.run.layout import RunLayout
from sead.scenario.profiles import Profile, write_profiles
from sead.scenario.tags import AGENT_READING_VERSION

SMALL = ["eval.limit=6", "eval.trials=2"]


def run_eval(tmp_path, out, *args):
    return main(["eval", *args, f"eval.out_dir={tmp_path / out}", f"eval.testset_dir={tmp_path / 'testsets'}", *SMALL])


def records(path):
    """Dialogue records without wall-clock timings, which legitimately differ between runs."""
    out = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        r["meta"].pop("timing")
        out.append(r)
    return sorted(out, key=lambda r: r["meta"]["episode_id"])


def comparable(results):
    return {k: results[k] for k in ("counts", "metrics", "end_reasons", "tokens", "pass_hat_k", "cr_by_state")}


def test_testset_is_seeded_and_its_hash_follows_the_content(restaurant, tmp_path, capsys):
    a = make_testset(restaurant, 50, 7, tmp_path / "a.parquet")
    b = make_testset(restaurant, 50, 7, tmp_path / "b.parquet")
    assert a.hash == b.hash and a.profiles == b.profiles
    assert make_testset(restaurant, 50, 8, tmp_path / "c.parquet").hash != a.hash
    write_profiles(a.profiles, tmp_path / "a.jsonl")  # same profiles in another format: same hash
    assert load_testset(tmp_path / "a.jsonl", restaurant).hash == a.hash
    changed = [
        Profile.make(
            {**a.profiles[0].values, "trust": 1 + a.profiles[0].values["trust"] % 4}, a.profiles[0].behaviours
        ),
        *a.profiles[1:],
    ]
    assert content_hash(changed) != a.hash
    out = tmp_path / "cli.parquet"
    assert main(["testset", "make", f"eval.testset={out}", "eval.testset_size=50", "eval.testset_seed=7"]) == 0
    assert a.hash in capsys.readouterr().out and load_testset(out, restaurant).hash == a.hash


def test_same_seed_same_results_with_the_tiny_model(tmp_path, tiny_model_dir):
    shutil.copytree(tiny_model_dir, tmp_path / "tiny")  # the results folder is named after the model folder
    for out in ("one", "two"):
        assert run_eval(tmp_path, out, str(tmp_path / "tiny"), "preset=tiny", "eval.max_new_tokens=12") == 0
    one, two = (json.loads((tmp_path / o / "tiny" / "results.json").read_text()) for o in ("one", "two"))
    assert one["counts"]["dialogues"] == 12 and comparable(one) == comparable(two)
    assert records(tmp_path / "one" / "tiny" / "dialogues.jsonl") == records(
        tmp_path / "two" / "tiny" / "dialogues.jsonl"
    )
    frozen = one["settings"]
    assert frozen["agent"]["sampling"] == {"temperature": 0.7, "top_p": 0.9, "top_k": 0}
    # a local model runs in the precision this machine takes (model.dtype=auto), and the results say which
    assert frozen["agent"]["dtype"] == compute_dtype("auto", "cpu")
    assert frozen["dialogue"]["max_new_tokens"] == 12 and frozen["testset"]["evaluated"] == 6
    assert one["versions"]["torch"] and one["agent_params"] > 0


def test_interrupted_evaluation_resumes_without_redoing_finished_dialogues(tmp_path, caplog):
    assert run_eval(tmp_path, "full", "scripted:reference") == 0
    full = tmp_path / "full" / "scripted-reference"
    part = tmp_path / "part" / "scripted-reference"
    part.mkdir(parents=True)
    shutil.copy(full / "settings.json", part / "settings.json")
    lines = (full / "dialogues.jsonl").read_text().splitlines()
    # Five finished dialogues and one torn line: the process died while writing the sixth.
    (part / "dialogues.jsonl").write_text("\n".join(lines[:5]) + "\n" + lines[5][:40])
    assert run_eval(tmp_path, "part", "scripted:reference") == 0
    assert "dialogues.jsonl:6: skipping the last line" in caplog.text  # and played again
    resumed = json.loads((part / "results.json").read_text())
    assert resumed["dialogues_resumed"] == 5 and resumed["dialogues_played"] == 7
    assert comparable(resumed) == comparable(json.loads((full / "results.json").read_text()))
    assert records(part / "dialogues.jsonl") == records(full / "dialogues.jsonl")


def test_other_settings_in_the_same_folder_are_refused_unless_fresh(tmp_path, capsys):
    assert run_eval(tmp_path, "o", "scripted:reference") == 0
    before = (tmp_path / "o" / "scripted-reference" / "dialogues.jsonl").read_text()
    assert run_eval(tmp_path, "o", "scripted:reference", "eval.seed=5") == 2
    assert "seed differ" in capsys.readouterr().out
    assert (tmp_path / "o" / "scripted-reference" / "dialogues.jsonl").read_text() == before
    assert run_eval(tmp_path, "o", "scripted:reference", "eval.seed=5", "eval.fresh=true") == 0
    assert json.loads((tmp_path / "o" / "scripted-reference" / "results.json").read_text())["settings"]["seed"] == 5


def test_an_evaluation_whose_agent_turns_were_read_by_older_rules_is_not_resumed(tmp_path, capsys):
    assert run_eval(tmp_path, "o", "scripted:reference") == 0
    folder = tmp_path / "o" / "scripted-reference"
    settings = json.loads((folder / "settings.json").read_text())
    assert settings["user_simulator"]["agent_reading"] == AGENT_READING_VERSION
    settings["user_simulator"]["agent_reading"] = AGENT_READING_VERSION - 1  # before the rule of 2026-11-28
    (folder / "settings.json").write_text(json.dumps(settings))
    before = (folder / "dialogues.jsonl").read_text()
    assert run_eval(tmp_path, "o", "scripted:reference") == 2
    assert "user_simulator differ" in capsys.readouterr().out
    assert (folder / "dialogues.jsonl").read_text() == before


def test_dead_user_simulator_exits_2_naming_each_url(tmp_path, capsys):
    dead = ["http://127.0.0.1:9/v1", "http://127.0.0.1:11/v1"]
    code = run_eval(tmp_path, "o", "scripted:reference", "usersim=openai", f"usersim.base_urls=[{','.join(dead)}]")
    out = capsys.readouterr().out
    assert code == 2 and all(f"user simulator at {url} is unreachable" in out for url in dead)
    assert not list((tmp_path / "o").glob("*/dialogues.jsonl"))


def test_rerun_replays_dialogues_the_simulator_failed_and_counts_each_once(tmp_path):
    """Dialogues that ended as sim_error are no results: a rerun plays them again, and the new record replaces
    the failed one in dialogues.jsonl and in results.json."""
    from sead.testing import FakeOpenAIServer

    folder = tmp_path / "o" / "scripted-reference"
    with FakeOpenAIServer() as server:
        # No retries: each injected HTTP 500 ends one dialogue as sim_error.
        common = [
            "usersim=openai",
            f"usersim.base_urls=[{server.url}]",
            "usersim.model=fake-user-sim",
            "dialogue.user_retries=0",
        ]
        server.inject("http500", n=3)
        assert run_eval(tmp_path, "o", "scripted:reference", *common) == 0
        first = json.loads((folder / "results.json").read_text())
        assert first["counts"]["sim_error"] == 3
        assert run_eval(tmp_path, "o", "scripted:reference", *common) == 0
    again = json.loads((folder / "results.json").read_text())
    assert again["dialogues_played"] == 3 and again["dialogues_resumed"] == 9
    assert again["counts"]["sim_error"] == 0 and again["counts"]["dialogues"] == 12
    logged = [json.loads(line) for line in (folder / "dialogues.jsonl").read_text().splitlines()]
    assert len({r["meta"]["episode_id"] for r in logged}) == len(logged) == 12
    assert not any(r["end_reason"] == "sim_error" for r in logged)


def test_damaged_files_of_an_earlier_evaluation_are_named(tmp_path, capsys):
    assert run_eval(tmp_path, "o", "scripted:reference") == 0
    folder = tmp_path / "o" / "scripted-reference"
    settings, log = folder / "settings.json", folder / "dialogues.jsonl"
    good_settings, lines = settings.read_text(), log.read_text().splitlines()
    capsys.readouterr()
    settings.write_text(good_settings[:30])  # cut short by a crash
    assert run_eval(tmp_path, "o", "scripted:reference") == 2
    assert f"{settings}:" in capsys.readouterr().out
    settings.write_text(good_settings)
    log.write_text("\n".join([lines[0], lines[1][:40], *lines[2:]]) + "\n")  # a damaged line that is not the last
    assert run_eval(tmp_path, "o", "scripted:reference") == 2
    assert f"{log}: unreadable dialogue log" in capsys.readouterr().out


@pytest.mark.parametrize(
    "make_spec, message",
    [
        (lambda p: str(p / "nowhere"), "no such model"),
        (lambda p: "openai:no-at-sign", "openai:MODEL@"),
        (lambda p: "scripted:genius", "unknown scripted agent"),
        (lambda p: _config_only(p), "no weights"),
        (lambda p: _run_without_checkpoint(p), "no complete checkpoint"),
        (lambda p: "openai:gpt-x@http://127.0.0.1:9/v1", "unreachable"),
    ],
)
def test_bad_model_fails_before_any_dialogue(tmp_path, capsys, make_spec, message):
    assert run_eval(tmp_path, "bad", make_spec(tmp_path)) == 2
    assert message in capsys.readouterr().out
    assert not list((tmp_path / "bad").glob("*/dialogues.jsonl"))


def _config_only(p):
    (p / "m").mkdir()
    (p / "m" / "config.json").write_text("{}")
    return str(p / "m")


def _run_without_checkpoint(p):
    RunLayout(p / "run").checkpoints_dir.mkdir(parents=True)
    return str(p / "run")


def test_out_of_range_testset_fails_naming_file_line_and_field(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"cooperation": 2, "emotion": 1, "trust": 3, "behaviours": []}\n'
        '{"cooperation": 2, "emotion": 9, "trust": 3, "behaviours": []}\n'
    )
    assert run_eval(tmp_path, "o", "scripted:reference", f"eval.testset={bad}") == 2
    out = capsys.readouterr().out
    assert f"{bad}:2" in out and "emotion" in out
    assert not (tmp_path / "o").exists()


def _ep(state, success, eid):
    final = user(3, 2, 3, status=1 if success else -1)
    return Episode(
        Profile.make(state, []),
        [Turn(agent(2, 1, 2, 0), final)],
        "user_success" if success else "user_hangup",
        meta={"episode_id": eid},
    )


def test_cr_per_state_value_joint_state_and_pass_k_by_hand():
    s1, s2 = {"cooperation": 1, "emotion": 1, "trust": 2}, {"cooperation": 3, "emotion": 1, "trust": 4}
    # profile 0 (s1): 2 of 3 trials succeed; profile 1 (s2): 3 of 3; profile 2 (s1): 0 of 3
    outcomes = [(s1, [True, True, False]), (s2, [True, True, True]), (s1, [False, False, False])]
    eps, index = [], []
    for i, (state, wins) in enumerate(outcomes):
        for k, w in enumerate(wins):
            eps.append(_ep(state, w, f"p{i}-t{k}"))
            index.append(i)
    eps.append(Episode(Profile.make(s2, []), [Turn(agent(2, 1, 2, 0))], "sim_error"))  # excluded everywhere
    index.append(1)
    by = cr_by_state(eps, SPACE)
    assert by["per_value"]["cooperation"]["1"]["mean"] == pytest.approx(2 / 6)
    assert by["per_value"]["cooperation"]["3"]["mean"] == 1.0 and by["per_value"]["cooperation"]["3"]["n"] == 3
    assert by["per_value"]["emotion"]["1"]["n"] == 9
    assert by["per_joint_state"] == {"1-1-2": {"CR": pytest.approx(2 / 6), "n": 6}, "3-1-4": {"CR": 1.0, "n": 3}}
    p = pass_hat(eps, index, 3)
    # pass^1 = mean(2/3, 1, 0); pass^2 = mean(C(2,2)/C(3,2), 1, 0) = mean(1/3, 1, 0); pass^3 = mean(0, 1, 0)
    assert p["pass^1"] == pytest.approx(5 / 9)
    assert p["pass^2"] == pytest.approx(4 / 9)
    assert p["pass^3"] == pytest.approx(1 / 3)


def test_several_models_give_a_comparison_table(tmp_path):
    assert run_eval(tmp_path, "cmp", "scripted:reference", "scripted:sop_ignoring") == 0
    md = (tmp_path / "cmp" / "comparison.md").read_text().splitlines()
    assert md[0].startswith("| Method | Params | CR % |")
    rows = {l.split("|")[1].strip(): l.split("|")[3].strip() for l in md[2:4]}
    ref = json.loads((tmp_path / "cmp" / "scripted-reference" / "results.json").read_text())
    assert rows["scripted-reference"] == f"{100 * ref['metrics']['CR']['mean']:.1f}"
    assert rows["scripted-sop_ignoring"] == "0.0"
    assert "<table" in (tmp_path / "cmp" / "comparison.html").read_text()
    # the concerns by kind, one column per model, each cell the model's own count from its results
    at = md.index("Concerns by kind: answered / voiced (scripted user)")
    assert md[at + 2].startswith("| concern | scripted-reference | scripted-sop_ignoring |")
    kinds = ref["funnel"]["concerns"]
    cells = {l.split("|")[1].strip(): l.split("|")[2].strip() for l in md[at + 4 :] if l.startswith("|")}
    assert kinds and set(cells) >= set(kinds)
    for kind, c in kinds.items():
        assert cells[kind] == f"{c['answered']} / {c['voiced']} ({c['answered'] / c['voiced']:.0%})"
    assert sum(c["answered"] for c in kinds.values()) > 0


def test_api_agent_against_an_api_user_simulator(tmp_path, restaurant, capsys):
    from sead.testing import FakeOpenAIServer, scripted_user_turn

    said = restaurant.tags.format_agent(
        "Hello, this is Alex with a free advertising credit.",
        {"cooperation": 3, "emotion": 2, "trust": 3, "noise": 0},
        0,
        0,
    )
    with (
        FakeOpenAIServer(lambda body: said, model="agent-x") as agent_api,
        FakeOpenAIServer(scripted_user_turn(finish_after=2), model="user-y") as user_api,
    ):
        common = ["usersim=openai", f"usersim.base_urls=[{user_api.url}]", "usersim.model=user-y"]
        assert run_eval(tmp_path, "api", f"openai:agent-z@{agent_api.url}", *common) == 2
        assert "not 'agent-z'" in capsys.readouterr().out  # a wrong model name, caught before any dialogue
        assert run_eval(tmp_path, "api", f"openai:agent-x@{agent_api.url}", *common) == 0
        sent = agent_api.requests
    results = json.loads((tmp_path / "api" / "agent-x" / "results.json").read_text())
    assert results["counts"]["completed"] == 12 and results["metrics"]["ADT"]["mean"] == 2.0
    assert results["settings"]["user_simulator"]["model"] == "user-y"
    assert sent[0]["temperature"] == 0.7 and sent[0]["top_p"] == 0.9 and sent[0]["max_tokens"] == 512
    assert sent[0]["messages"][0]["role"] == "system"  # the SOP prompt, then the dialogue as chat turns


def test_an_endpoint_under_evaluation_gets_no_seed_it_could_map_to_a_profile(tmp_path, restaurant):
    """The default test set and the seed formulas are public: a seed derived from a dialogue's test-set index would let
    the endpoint rebuild the user, profile and dice, without reading a message. Each evaluation sends seeds drawn
    with a secret of its own: none is a dialogue's seed, and two evaluations of the same dialogues share none."""
    from sead.dialogue.seeds import eval_episode_seed, turn_seed
    from sead.policy.scripted import mid_portrait
    from sead.testing import FakeOpenAIServer

    said = restaurant.tags.format_agent("Hello, this is Alex.", mid_portrait(restaurant.space), 0, 0)
    sent = {}
    with FakeOpenAIServer(lambda body: said, model="agent-x") as agent_api:
        for out in ("first", "second"):
            assert run_eval(tmp_path, out, f"openai:agent-x@{agent_api.url}") == 0
            sent[out] = [r["seed"] for r in agent_api.requests[sum(map(len, sent.values())) :]]
    first, second = sent.values()
    assert len(first) == len(second) > 12 and len(set(first)) == len(first)  # one seed per turn
    public = {turn_seed(eval_episode_seed(0, i, k), t) % 2**31 for i in range(6) for k in range(2) for t in range(99)}
    assert not public & (set(first) | set(second))
    assert not set(first) & set(second)


def test_the_cpu_preset_shortens_evaluation():
    from sead.config import load_config

    assert load_config([]).eval.limit is None and load_config([]).eval.max_new_tokens == 512
    cpu = load_config(["preset=cpu"]).eval
    assert cpu.limit == 16 and cpu.max_new_tokens == 144 and cpu.max_turns == 8 and cpu.sampling.temperature == 0.7


def test_the_cpu_eval_preset_lets_the_reference_agent_complete(tmp_path):
    """preset=cpu (what scripts/eval.sh adds without a GPU): a turn limit the SOP fits in, not the demo's 4."""
    args = ["eval", "preset=cpu", "scripted:reference", f"eval.out_dir={tmp_path}", f"eval.testset_dir={tmp_path}"]
    assert main(args) == 0
    results = json.loads((tmp_path / "scripted-reference" / "results.json").read_text())
    assert results["metrics"]["CR"]["n"] == 16 and results["metrics"]["CR"]["mean"] >= 0.5
    short_args = [*args[:-2], f"eval.out_dir={tmp_path / 'short'}", f"eval.testset_dir={tmp_path}", "eval.max_turns=4"]
    assert main(short_args) == 0
    short = json.loads((tmp_path / "short" / "scripted-reference" / "results.json").read_text())
    assert short["metrics"]["CR"]["mean"] == 0.0 < results["metrics"]["CR"]["mean"]


def test_one_writer_per_evaluation_folder(tmp_path, capsys):
    """A second `sead eval` into a folder another is writing once crashed with a KeyError on its dialogues."""
    from sead.run.lock import folder_lock

    with folder_lock(tmp_path / "o" / "scripted-reference"):
        assert run_eval(tmp_path, "o", "scripted:reference") == 2
        out = capsys.readouterr().out
        assert "is writing this evaluation folder" in out and "eval.out_dir" in out
    assert run_eval(tmp_path, "o", "scripted:reference") == 0


def test_ctrl_c_in_eval_keeps_what_is_finished_and_says_how_to_finish(tmp_path, capsys, monkeypatch):
    import sead.eval.run

    play = sead.eval.run.run_batch

    async def interrupted(jobs, **kwargs):  # three dialogues finish, then the user presses Ctrl-C
        await play(jobs[:3], **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(sead.eval.run, "run_batch", interrupted)
    assert run_eval(tmp_path, "o", "scripted:reference") == 130
    out = capsys.readouterr().out
    assert "interrupted; every finished dialogue is kept" in out and "run the same command again" in out
    assert len((tmp_path / "o" / "scripted-reference" / "dialogues.jsonl").read_text().splitlines()) == 3
    monkeypatch.setattr(sead.eval.run, "run_batch", play)
    assert run_eval(tmp_path, "o", "scripted:reference") == 0
    assert json.loads((tmp_path / "o" / "scripted-reference" / "results.json").read_text())["dialogues_resumed"] == 3
