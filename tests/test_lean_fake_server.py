"""The lean fake simulator (`serve_lean`) answers as FakeOpenAIServer does, and `rollout_concurrency.py` plays
every dialogue through it from several runner processes."""

import asyncio
import json
import time
from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark

import sead
from sead.testing.fake_openai_server import FakeOpenAIServer, scripted_user_turn, serve_lean
from sead.usersim.http_client import KeepAliveClient

CHAT = {
    "model": "fake-user-sim",
    "messages": [
        {"role": "system", "content": "you are a customer"},
        {"role": "user", "content": "<response>Hello there</response> and more words"},
    ],
}


async def exchange(url: str) -> list[tuple[int, dict]]:
    """A chat request, the model list, an unknown route and a second chat request on one client."""
    client = KeepAliveClient(url, {})
    answers = []
    for path, body in [("/chat/completions", CHAT), ("/models", None), ("/nowhere", {}), ("/chat/completions", CHAT)]:
        if body is None:
            answers.append(await get(url, path))
            continue
        status, raw, _ = await client.post_json(path, json.dumps(body).encode())
        answers.append((status, json.loads(raw)))
    await client.aclose()
    return answers


async def get(url: str, path: str) -> tuple[int, dict]:
    host, port = url.split("/")[2].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET /v1{path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    length = int(head.lower().split("content-length:")[1].split("\r\n")[0])
    body = await reader.readexactly(length)
    writer.close()
    return int(head.split(" ")[1]), json.loads(body)


def comparable(answers):
    """The answers without what differs by the moment (ids, timestamps)."""
    for status, body in answers:
        body.pop("id", None), body.pop("created", None)
        yield status, body


@pytest.mark.asyncio
async def test_the_lean_server_answers_what_the_threaded_server_answers():
    responder = scripted_user_turn(1)
    with FakeOpenAIServer(responder) as threaded:
        expected = await exchange(threaded.url)
    server = await serve_lean(responder, latency=0.0)
    try:
        got = await exchange(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
    finally:
        server.close()
    assert [s for s, _ in got] == [200, 200, 404, 200]
    assert list(comparable(got)) == list(comparable(expected))
    assert "<user_status>1</user_status>" in got[0][1]["choices"][0]["message"]["content"]


@pytest.mark.asyncio
async def test_a_request_in_pieces_is_answered_once_after_the_latency_and_a_failing_responder_gives_500():
    def responder(body):
        if body["messages"][-1]["content"] == "boom":
            raise ValueError("broken responder")
        return "fine"

    server = await serve_lean(responder, latency=0.2)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for content in ("hi", "boom"):
            body = json.dumps({"messages": [{"role": "user", "content": content}]}).encode()
            request = b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            sent = time.monotonic()
            for i in range(0, len(request), 7):  # the head and the body arrive split across reads
                writer.write(request[i : i + 7])
                await writer.drain()
                await asyncio.sleep(0)
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            waited = time.monotonic() - sent
            answer = json.loads(await reader.readexactly(int(head.lower().split("content-length:")[1].split()[0])))
            if content == "hi":
                assert head.startswith("HTTP/1.1 200") and answer["choices"][0]["message"]["content"] == "fine"
                assert waited >= 0.2
            else:
                assert head.startswith("HTTP/1.1 500") and "broken responder" in answer["error"]["message"]
        writer.close()
    finally:
        server.close()


@pytest.mark.asyncio
async def test_a_request_it_cannot_read_gets_400_and_the_connection_closes():
    server = await serve_lean(scripted_user_turn(), latency=0.0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        writer.write(b"NONSENSE\r\nContent-Length: x\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 5)  # to the end: the server closes the connection
        assert answer.startswith(b"HTTP/1.1 400") and b"cannot read the request" in answer
        writer.close()
    finally:
        server.close()


def test_several_runner_processes_play_every_dialogue_to_its_end_against_either_server(tmp_path, capsys):
    module = load_benchmark("rollout_concurrency")
    argv = ["--dialogues", "6", "--latency", "0.01", "--turns", "4", "--processes", "1", "2"]
    result = module.main([*argv, "--server", "lean", "threaded", "--out", str(tmp_path / "runs.json")])
    runs = result["runs"]
    assert [(r["server"], r["runner_processes"]) for r in runs] == [
        ("lean", 1),
        ("lean", 2),
        ("threaded", 1),
        ("threaded", 2),
    ]
    for run in runs:
        assert run["dialogues"] == 6 and run["end_reasons"] == ["user_success"]
        assert run["turns_total"] == 6 * 3  # the user ends after 3 agent turns
        assert run["wall_s"] >= run["ideal_s"] > 0 and run["client_cpu_ms_per_turn"] > 0
    assert json.loads((tmp_path / "runs.json").read_text())["runs"] == runs
    assert result["sead_from"] == str(Path(sead.__file__).resolve().parent.parent)
    assert "threaded server, 2 runner process(es): wall/ideal" in capsys.readouterr().out


def test_batches_after_the_first_are_measured_apart_from_it(capsys):
    module = load_benchmark("rollout_concurrency")
    argv = ["--dialogues", "4", "--latency", "0.01", "--turns", "4", "--processes", "2", "--batches", "3"]
    (run,) = module.main(argv)["runs"]
    assert run["batches"] == 3 and run["figures_of"] == "the batches after the first"
    assert run["turns_total"] == 2 * 4 * 3 and run["first_batch"]["turns_total"] == 4 * 3  # two warm batches, one first
    assert run["ideal_s"] == pytest.approx(2 * run["first_batch"]["ideal_s"])
    assert run["wall_s"] >= run["ideal_s"] and run["end_reasons"] == ["user_success"]
    assert "(batches after the first; the first: wall/ideal" in capsys.readouterr().out


def test_a_runner_process_that_dies_stops_the_benchmark_with_an_error(monkeypatch):
    module = load_benchmark("rollout_concurrency")
    monkeypatch.setattr(module, "load_tokenizer", lambda: (_ for _ in ()).throw(OSError("no tokenizer here")))
    with pytest.raises(RuntimeError, match="runner process"):
        module.main(["--dialogues", "2", "--latency", "0.01", "--turns", "3", "--processes", "2"])
