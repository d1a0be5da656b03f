"""LLM-backed user simulators: the OpenAI-compatible client against a real (fake) HTTP server with injected
faults, the in-process HF simulator on a tiny random model, and the vLLM launcher script."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sead.errors import SEADInputError
from sead.scenario.profiles import Profile
from sead.testing import FakeOpenAIServer, scripted_user_turn
from sead.usersim import openai_sim
from sead.usersim.base import Exchange, SimulatorError
from sead.usersim.openai_sim import OpenAIUserSimulator, build_user_messages

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "serve_user_sim.sh"
MODEL = "fake-user-sim"
FIRST_USER_TURN = (
    "<user_think>who?</user_think>\n<user_reply>Yeah?</user_reply>\n<user_cooperation>2"
    "</user_cooperation>\n<user_emotion>1</user_emotion>\n<user_trust>2</user_trust>\n"
    "<user_noise>1</user_noise>\n<user_status>0</user_status>"
)


@pytest.fixture
def profile(restaurant):
    behaviours = [b.text for b in restaurant.library.behaviours[:2]]
    return Profile.make({"cooperation": 1, "emotion": 3, "trust": 4}, behaviours)


def make_sim(restaurant, *servers, **kw):
    kw.setdefault("timeout", 5.0)
    return OpenAIUserSimulator(restaurant, base_urls=[s.url for s in servers], model=MODEL, **kw)


@pytest.mark.asyncio
async def test_server_receives_system_prompt_agent_turns_and_own_turns_in_full(restaurant, profile):
    history = [Exchange("Hi, is this the owner?", FIRST_USER_TURN), Exchange("  I'm from the platform.  ", "raw 2")]
    with FakeOpenAIServer() as server:
        sim = make_sim(restaurant, server)
        reply = await sim.respond(profile, history, "You have a free ad credit.", seed=7)
        await sim.aclose()
    (body,) = server.requests
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    system = body["messages"][0]["content"]
    assert system == restaurant.user_system_prompt(profile)
    assert "Cooperation at the start: 1" in system and "Emotion at the start: 3" in system
    assert all(f"- {b}" in system for b in profile.behaviours) and "${" not in system
    assert body["messages"][1]["content"] == "<response>Hi, is this the owner?</response>"
    assert body["messages"][2]["content"] == FIRST_USER_TURN  # own earlier turn, think and numbers included
    assert body["messages"][3]["content"] == "<response>I'm from the platform.</response>"
    assert body["messages"][4]["content"] == "raw 2"
    last = body["messages"][5]["content"]
    assert last.startswith("<response>You have a free ad credit.</response>\n\n") and "<user_status>" in last
    assert reply.text == scripted_user_turn()(body) and "<user_status>1</user_status>" in reply.text  # 3rd turn
    assert reply.prompt_tokens > 100 and reply.completion_tokens > 0
    assert reply.meta["base_url"] == server.url


@pytest.mark.asyncio
async def test_the_request_carries_exactly_the_built_messages_for_each_profile(restaurant, profile):
    other = Profile.make({"cooperation": 4, "emotion": 0, "trust": 1}, [])
    history = [Exchange("Hello, caf\u00e9 owner?", FIRST_USER_TURN), Exchange('Second "quoted" turn', None)]
    calls = [(profile, [], "hi"), (other, history, "third"), (profile, history, "again")]
    with FakeOpenAIServer() as server:
        sim = make_sim(restaurant, server)
        for who, past, said in calls:
            await sim.respond(who, past, said, seed=1)
        await sim.aclose()
    # The system message's JSON is encoded once per prompt: each profile must still get its own.
    sent = [body["messages"] for body in server.requests]
    assert sent == [build_user_messages(restaurant, who, past, said) for who, past, said in calls]


@pytest.mark.asyncio
async def test_rounds_encoded_once_per_dialogue_still_send_exactly_the_built_messages(restaurant, profile, monkeypatch):
    monkeypatch.setattr(openai_sim, "ROUNDS_KEPT", 2)  # evictions happen too
    history, other = [], [Exchange("Hello, caf\u00e9 owner?", FIRST_USER_TURN)]
    with FakeOpenAIServer() as server:
        sim = make_sim(restaurant, server)
        sent = []

        async def call(past, said):
            expected = build_user_messages(restaurant, profile, past, said)
            await sim.respond(profile, past, said, seed=1)
            sent.append((server.requests[-1]["messages"], expected))

        for turn in range(4):  # one dialogue's list growing between its turns, another dialogue in between
            await call(history, f'turn {turn} "quoted"')
            await call(other, "other dialogue")
            history.append(Exchange(f" said {turn} ", f"<user_reply>heard {turn}</user_reply>"))
        await call(history[:2] + [Exchange("a different third", "answer")], "branch")  # a new list, same start
        await call(history, "five")
        history[1] = Exchange("rewritten in place", "changed")  # the same list, an earlier round replaced
        await call(history, "six")
        await call(history + [Exchange("unanswered", None)], "seven")
        await call([], "fresh")
        await sim.aclose()
    assert len(sent) == 13 and all(got == expected for got, expected in sent)
    assert [len(got) for got, _ in sent[:8:2]] == [2, 4, 6, 8]
    assert sent[10][0][3]["content"] == "<response>rewritten in place</response>"


def test_unanswered_agent_turns_merge_so_roles_alternate(restaurant, profile):
    history = [Exchange("first", None), Exchange("second", "mine")]
    messages = build_user_messages(restaurant, profile, history, "third")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"] == "<response>first</response>\n<response>second</response>"


@pytest.mark.asyncio
async def test_sampling_settings_arrive_in_the_request(restaurant, profile):
    with FakeOpenAIServer(model="m1") as server:
        sim = OpenAIUserSimulator(
            restaurant, base_urls=[server.url], model="m1", temperature=0.7, top_p=0.8, top_k=20, max_tokens=77
        )
        hosted = OpenAIUserSimulator(restaurant, base_urls=[server.url], model="m1", top_k=None)
        await sim.respond(profile, [], "hello", seed=3)
        await sim.respond(profile, [], "hello", seed=3)
        await sim.respond(profile, [Exchange("hello", "hi")], "again", seed=3)
        await hosted.respond(profile, [], "hello", seed=3)
        await sim.aclose()
        await hosted.aclose()
    first, rerun, next_turn, plain = server.requests
    assert (first["model"], first["temperature"], first["top_p"], first["top_k"], first["max_tokens"]) == (
        "m1",
        0.7,
        0.8,
        20,
        77,
    )
    assert first["seed"] == rerun["seed"] != next_turn["seed"]  # reproducible per episode, fresh per turn
    assert "top_k" not in plain and plain["temperature"] == 0.9 and plain["max_tokens"] == 512
    assert sim.identity() == {
        "name": "openai",
        "model": "m1",
        "base_urls": [server.url],
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
        "max_tokens": 77,
        "timeout": 60.0,
    }


@pytest.mark.asyncio
async def test_requests_round_robin_across_servers(restaurant, profile):
    with FakeOpenAIServer() as a, FakeOpenAIServer() as b:
        sim = make_sim(restaurant, a, b)
        replies = await asyncio.gather(*(sim.respond(profile, [], f"turn {i}", seed=i) for i in range(6)))
        await sim.aclose()
    assert [r.meta["base_url"] for r in replies] == [a.url, b.url] * 3
    assert len(a.requests) == len(b.requests) == 3


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "fault,cause",
    [
        ("delay", "no answer within 0.3 s"),
        ("trickle", "no answer within 0.3 s"),
        ("http500", "HTTP 500"),
        ("http429", "HTTP 429"),
        ("drop", "connection failed"),
        ("empty", "empty content"),
        ("no_choices", "no choices"),
    ],
)
async def test_each_fault_raises_naming_the_url_then_the_next_call_works(restaurant, profile, fault, cause):
    with FakeOpenAIServer() as server:
        sim = make_sim(restaurant, server, timeout=0.3)
        server.inject(fault, seconds=3.0)
        start = time.monotonic()
        with pytest.raises(SimulatorError) as err:
            await sim.respond(profile, [], "hello", seed=0)
        assert time.monotonic() - start < 1.5
        assert server.url in str(err.value) and cause in str(err.value)
        assert "<user_reply>" in (await sim.respond(profile, [], "hello", seed=0)).text
        await sim.aclose()


@pytest.mark.asyncio
async def test_faults_queue_in_order_and_garbage_is_returned_as_is(restaurant, profile):
    with FakeOpenAIServer() as server:
        sim = make_sim(restaurant, server)
        server.inject("garbage", n=2)
        server.inject("http500")
        texts = [(await sim.respond(profile, [], "hello", seed=0)).text for _ in range(2)]
        with pytest.raises(SimulatorError):
            await sim.respond(profile, [], "hello", seed=0)
        await sim.aclose()
    assert texts == ["uh, what? who is this, I'm busy"] * 2
    with pytest.raises(ValueError, match="unknown fault"):
        server.inject("explode")


@pytest.mark.asyncio
async def test_health_check_passes_live_and_names_dead_url_and_wrong_model(restaurant):
    with FakeOpenAIServer() as server:
        await make_sim(restaurant, server).check_health()
        wrong = OpenAIUserSimulator(restaurant, base_urls=[server.url], model="other-model")
        with pytest.raises(SEADInputError, match="usersim.model"):
            await wrong.check_health()
    with pytest.raises(SEADInputError) as err:
        await make_sim(restaurant, server).check_health()
    message = str(err.value)
    assert f"user simulator at {server.url} is unreachable" in message and "serve_user_sim.sh" in message


@pytest.mark.asyncio
async def test_a_killed_server_fails_inflight_and_later_calls(restaurant, profile):
    with FakeOpenAIServer() as server:
        idle, busy = make_sim(restaurant, server, timeout=10.0), make_sim(restaurant, server, timeout=10.0)
        await idle.respond(profile, [], "hello", seed=0)  # leaves a keep-alive connection that kill() must cut
        server.inject("delay", seconds=10.0)
        inflight = asyncio.create_task(busy.respond(profile, [], "hello", seed=0))
        while len(server.requests) < 2:  # the request must be on the server when it dies
            await asyncio.sleep(0.01)
        start = time.monotonic()
        server.kill()
        with pytest.raises(SimulatorError, match="connection failed"):
            await inflight
        for sim in (idle, busy):
            with pytest.raises(SimulatorError) as err:
                await sim.respond(profile, [], "hello", seed=0)
            assert server.url in str(err.value)
            await sim.aclose()
        assert time.monotonic() - start < 2.0


def test_config_errors_name_the_field(restaurant):
    with pytest.raises(SEADInputError, match=r"usersim\.base_urls"):
        OpenAIUserSimulator(restaurant, base_urls=[], model=MODEL)
    with pytest.raises(SEADInputError, match=r"usersim\.model"):
        OpenAIUserSimulator(restaurant, base_urls=["http://127.0.0.1:1/v1"], model="")


@pytest.mark.parametrize("make", [lambda p: p / "nowhere", lambda p: p])  # absent; a folder with no model in it
def test_hf_simulator_without_a_model_names_the_path(tmp_path, restaurant, make):
    from sead.usersim.hf_sim import HFUserSimulator

    with pytest.raises(SEADInputError) as e:
        HFUserSimulator(restaurant, model_path=str(make(tmp_path)))
    assert e.value.field == "usersim.model_path" and str(make(tmp_path)) in str(e.value)


@pytest.mark.asyncio
async def test_hf_simulator_is_reproducible_per_seed_and_counts_tokens(restaurant, profile, tiny):
    from sead.usersim.hf_sim import HFUserSimulator

    model, tokenizer = tiny
    sim = HFUserSimulator(restaurant, model=model, tokenizer=tokenizer, max_new_tokens=12)
    history = [Exchange("Hi, is this the owner?", FIRST_USER_TURN)]
    a, b, c = await asyncio.gather(*(sim.respond(profile, history, "Got a minute?", seed=s) for s in (5, 5, 6)))
    assert a.text and a.text == b.text != c.text
    assert a.completion_tokens == 12  # a random model practically never samples end-of-turn in 12 steps
    messages = build_user_messages(restaurant, profile, history, "Got a minute?")
    expected_prompt = len(
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
    )
    assert a.prompt_tokens == expected_prompt > 500
    assert sim.identity()["name"] == "hf" and sim.identity()["max_new_tokens"] == 12
    with pytest.raises(SEADInputError, match=r"usersim\.model_path"):
        HFUserSimulator(restaurant)


def run_script(*args, **kw):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=30, **kw)


def test_serve_script_parses_and_dry_run_prints_one_command_per_gpu(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    r = run_script("--dry-run", "--gpus", "6,7", "--port", "8100", "--venv", str(tmp_path / "v"), "some/model")
    assert r.returncode == 0, r.stderr
    serves = [line for line in r.stdout.splitlines() if "vllm serve some/model" in line]
    assert len(serves) == 2
    assert "CUDA_VISIBLE_DEVICES=6 " in serves[0] and "--port 8100" in serves[0]
    assert "CUDA_VISIBLE_DEVICES=7 " in serves[1] and "--port 8101" in serves[1]
    assert "usersim.base_urls=[http://127.0.0.1:8100/v1,http://127.0.0.1:8101/v1]" in r.stdout.splitlines()[-1]
    assert "requirements_vllm.txt" in r.stdout  # a missing venv would be created first
    assert not (tmp_path / "v").exists()
    bad = run_script("--dry-run", "--gpus", "0,1,2", "--instances", "2", "m")
    assert bad.returncode == 2 and "must divide" in bad.stderr
    assert "--gpu-memory-utilization" in run_script("--help").stdout


FAKE_VLLM = """#!{python}
# Stands in for `vllm serve MODEL --port P ...`: answers GET /v1/models until terminated.
import http.server, json, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        data = json.dumps({{"data": [{{"id": sys.argv[2]}}]}}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(data))); self.end_headers()
        self.wfile.write(data)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), Models).serve_forever()
"""


@pytest.fixture
def fake_vllm_venv(tmp_path):
    venv = tmp_path / "venv-usersim"
    (venv / "bin").mkdir(parents=True)
    exe = venv / "bin" / "vllm"
    exe.write_text(FAKE_VLLM.format(python=sys.executable))
    exe.chmod(0o755)
    yield venv
    # If the test failed half-way, end what it started: the script and fake servers name this unique path.
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if str(venv).encode() in (proc / "cmdline").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:
            pass


def free_port_pair() -> int:
    for _ in range(20):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port + 1)) != 0:
                return port
    raise RuntimeError("no free pair of ports")


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # a zombie has already exited
    except FileNotFoundError:
        return False


@pytest.mark.asyncio
async def test_serve_script_starts_waits_for_health_and_stops_exactly_its_pids(tmp_path, restaurant, fake_vllm_venv):
    venv, pid_file, port = fake_vllm_venv, tmp_path / "run" / "vllm.pids", free_port_pair()
    common = ["--venv", str(venv), "--pid-file", str(pid_file), "--wait", "20"]
    r = run_script(*common, "--detach", "--gpus", "0,1", "--port", str(port), MODEL)
    assert r.returncode == 0, r.stderr
    pids = [int(p) for p in pid_file.read_text().split()]
    assert len(pids) == 2 and all(alive(p) for p in pids)
    overrides = dict(kv.split("=", 1) for kv in r.stdout.split())
    urls = overrides["usersim.base_urls"].strip("[]").split(",")
    assert urls == [f"http://127.0.0.1:{port}/v1", f"http://127.0.0.1:{port + 1}/v1"]
    await OpenAIUserSimulator(restaurant, base_urls=urls, model=overrides["usersim.model"]).check_health()
    assert run_script(*common, "--stop").returncode == 0
    assert not any(alive(p) for p in pids) and not pid_file.exists()

    # Foreground: SIGTERM to the script (as Ctrl-C would) stops its instances through the trap.
    proc = subprocess.Popen(
        ["bash", str(SCRIPT), *common, "--gpus", "3", "--port", str(port), MODEL],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    with proc.stdout:
        assert proc.stdout.readline().startswith("usersim.base_urls=[")
        (pid,) = [int(p) for p in pid_file.read_text().split()]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 130
    assert not alive(pid) and not pid_file.exists()


def test_serve_script_stop_leaves_a_reused_pid_alone(tmp_path):
    pid_file = tmp_path / "vllm.pids"
    with subprocess.Popen(["sleep", "30"]) as bystander:  # stands in for an unrelated process that got the PID
        pid_file.write_text(f"{bystander.pid}\n")
        r = run_script("--stop", "--pid-file", str(pid_file))
        assert r.returncode == 0 and alive(bystander.pid) and not pid_file.exists()
        bystander.kill()
