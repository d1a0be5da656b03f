"""A fake OpenAI-compatible chat server on 127.0.0.1, for tests and benchmarks of the user-simulator path.

It is a real HTTP server (stdlib, one thread per connection), so the openai client, httpx and the episode
runner are exercised exactly as against vLLM. It records every chat request, answers with a pluggable
`responder(body) -> str`, and can be told to misbehave on the next requests:

    with FakeOpenAIServer(latency=0.05) as server:
        server.inject("http500", n=2)          # the next two chat requests fail with HTTP 500
        server.inject("delay", seconds=5)      # then one answers only after 5 s
        ...
        server.kill()                          # dies now: in-flight requests drop, new ones are refused
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson

Responder = Callable[[dict], str]

# What each fault does to one chat request; see _Handler.do_POST.
# "trickle" sends the answer in small pieces spread over `seconds`: no single read is slow, the whole is.
# "oversized" answers with a reply of OVERSIZED_BYTES, more than a client reads (a server gone wrong).
FAULTS = ("delay", "trickle", "http500", "http429", "drop", "empty", "no_choices", "garbage", "oversized")
OVERSIZED_BYTES = 2 * 1024 * 1024
TRICKLE_PIECES = 20
GARBAGE_TEXT = "uh, what? who is this, I'm busy"


def scripted_user_turn(finish_after: int = 3, state: Mapping[str, int] | None = None) -> Responder:
    """A well-formed user turn in SEAD's tag format: status 0 until the conversation holds `finish_after`
    agent turns (closing `</response>` tags; the simulator's reminder line names only the opening tag),
    then status 1. The state tags default to the restaurant scenario's."""
    state = dict(state or {"cooperation": 3, "emotion": 2, "trust": 3, "noise": 0})

    def respond(body: dict) -> str:
        heard = sum(
            str(m.get("content", "")).count("</response>") for m in body.get("messages", []) if m.get("role") == "user"
        )
        status = 1 if heard >= finish_after else 0
        lines = ["<user_think>Fine, let's hear it.</user_think>", f"<user_reply>Okay, go on ({heard}).</user_reply>"]
        lines += [f"<user_{k}>{v}</user_{k}>" for k, v in state.items()]
        lines.append(f"<user_status>{status}</user_status>")
        return "\n".join(lines)

    return respond


class FakeOpenAIServer:
    """Starts serving at construction; `url` ends in /v1. Use as a context manager to stop it on exit."""

    def __init__(self, responder: Responder | None = None, *, model: str = "fake-user-sim", latency: float = 0.0):
        self.responder = responder or scripted_user_turn()
        self.model = model
        self.latency = latency
        self._lock = threading.Lock()
        self._requests: list[dict] = []
        self._faults: deque[tuple[str, float]] = deque()
        self._connections: set[socket.socket] = set()
        self._stopped = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        # A short poll interval makes kill() return within ~50 ms.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-openai-{self.port}",
            daemon=True,
        )
        self._thread.start()

    def __enter__(self) -> FakeOpenAIServer:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    @property
    def requests(self) -> list[dict]:
        """Bodies of every chat request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def inject(self, kind: str, n: int = 1, seconds: float = 0.0) -> None:
        """Apply fault `kind` to the next `n` chat requests (after any faults already queued)."""
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}; expected one of {FAULTS}")
        if kind in ("delay", "trickle") and seconds <= 0:
            raise ValueError(f"a {kind} fault needs seconds > 0")
        with self._lock:
            self._faults.extend([(kind, seconds)] * n)

    def kill(self) -> None:
        """Stop at once: the port closes (new requests are refused) and open connections are cut."""
        if self._stopped.is_set():
            return
        self._stopped.set()  # wakes handlers sleeping in a delay or latency
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            open_connections = list(self._connections)
        for conn in open_connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join()

    def _accept(self, body: dict) -> tuple[str, float] | None:
        with self._lock:
            self._requests.append(body)
            return self._faults.popleft() if self._faults else None

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._lock:
            (self._connections.add if add else self._connections.discard)(conn)

    def _sleep(self, seconds: float) -> bool:
        """Wait, unless killed meanwhile; True when the request should still be answered."""
        return seconds <= 0 or not self._stopped.wait(seconds)


class _Server(ThreadingHTTPServer):
    # The stdlib default backlog of 5 refuses connections when a benchmark opens hundreds at once;
    # uvicorn (vLLM) uses 2048.
    request_queue_size = 2048


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as vLLM: benchmarks then measure requests, not TCP setup

    def setup(self):
        super().setup()
        # Headers and body go out as two writes; without TCP_NODELAY, Nagle plus the client's delayed ACK
        # add ~40 ms to every answer, which a real server (uvicorn) does not.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.fake._track(self.connection, True)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass  # the client or kill() already closed the socket
        self.server.fake._track(self.connection, False)

    def log_message(self, format, *args):
        pass  # tests and benchmarks do not want a line per request

    def do_GET(self):
        fake = self.server.fake
        if self.path.rstrip("/") != "/v1/models":
            return self._json(404, {"error": {"message": f"no route {self.path}"}})
        self._json(200, {"object": "list", "data": [{"id": fake.model, "object": "model", "owned_by": "sead-fake"}]})

    def do_POST(self):
        fake = self.server.fake
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self._json(404, {"error": {"message": f"no route {self.path}"}})
        try:
            body = json.loads(raw)
        except ValueError:
            return self._json(400, {"error": {"message": "body is not JSON"}})
        fault = fake._accept(body)
        kind, seconds = fault or (None, 0.0)
        if not fake._sleep(fake.latency) or (kind == "delay" and not fake._sleep(seconds)):
            self.close_connection = True
            return
        if kind == "drop":
            self.close_connection = True  # no status line at all: the client sees a disconnect
            return
        if kind in ("http500", "http429"):
            status = int(kind[4:])
            return self._json(
                status,
                {"error": {"message": f"injected fault {kind}", "type": "fake"}},
                [("Retry-After", "1")] if status == 429 else [],
            )
        if kind == "empty":
            content = ""
        elif kind == "garbage":
            content = GARBAGE_TEXT
        elif kind == "oversized":
            content = "<user_reply>" + "blah " * (OVERSIZED_BYTES // 5) + "</user_reply>"
        else:
            try:
                content = fake.responder(body)
            except Exception as e:  # a broken responder answers like a crashing server, not a silent hang-up
                return self._json(500, {"error": {"message": f"responder failed: {e!r}"}})
        payload = _completion(body, content, fake.model)
        if kind == "no_choices":
            payload["choices"] = []
        self._json(200, payload, trickle_s=seconds if kind == "trickle" else 0.0)

    def _json(
        self, status: int, payload: dict, headers: Sequence[tuple[str, str]] = (), trickle_s: float = 0.0
    ) -> None:
        data = json.dumps(payload).encode()
        step = -(-len(data) // TRICKLE_PIECES) if trickle_s else len(data)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            for start in range(0, len(data), step):
                if start and not self.server.fake._sleep(trickle_s / TRICKLE_PIECES):
                    self.close_connection = True
                    return
                self.wfile.write(data[start : start + step])
                self.wfile.flush()
        except OSError:
            self.close_connection = True  # the client gave up (e.g. after its timeout) before we answered


def _completion(body: dict, content: str, model: str) -> dict:
    """An OpenAI chat.completion; token counts are word counts, enough for accounting tests."""
    prompt_tokens = sum(_words(str(m.get("content", ""))) for m in body.get("messages", []))
    completion_tokens = _words(content)
    return {
        "id": f"chatcmpl-fake-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", model),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


@lru_cache(maxsize=8192)  # the role-play prompt and earlier turns come back on every call of a dialogue
def _words(text: str) -> int:
    return len(text.split())


class _LeanHTTP(asyncio.Protocol):
    """One keep-alive connection of `serve_lean`: requests with a Content-Length body, answered in order. A
    request it cannot read gets a 400 and the connection is closed."""

    def __init__(self, responder: Responder, model: str, latency: float):
        self.responder, self.model, self.latency = responder, model, latency
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head = self.buf[:end].decode("latin-1").split("\r\n")
            try:
                method, path, _ = head[0].split(" ")
                lengths = [int(h.split(":", 1)[1]) for h in head[1:] if h.lower().startswith("content-length:")]
            except ValueError:
                self._write(400, {"error": {"message": f"cannot read the request {head[0][:80]!r}"}})
                self.transport.close()
                return
            length = lengths[0] if lengths else 0
            if len(self.buf) < end + 4 + length:
                return  # the body is still on its way
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            status, payload = self._answer(method, path.rstrip("/"), body)
            asyncio.get_running_loop().call_later(self.latency, self._write, status, payload)

    def _answer(self, method: str, path: str, body: bytes) -> tuple[int, dict]:
        if method == "GET" and path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "sead-fake"}]}
        if method != "POST" or path != "/v1/chat/completions":
            return 404, {"error": {"message": f"no route {path}"}}
        try:
            request = orjson.loads(body)
            return 200, _completion(request, self.responder(request), self.model)
        except Exception as e:
            return 500, {"error": {"message": f"bad request or responder failed: {e!r}"}}

    def _write(self, status: int, payload: dict) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        data = orjson.dumps(payload)
        head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        self.transport.write(head.encode() + data)

    def connection_lost(self, exc) -> None:
        self.transport = None


async def serve_lean(responder: Responder, *, latency: float, model: str = "fake-user-sim"):
    """The same answers as FakeOpenAIServer from one event loop, without its faults or request log: what
    benchmarks run beside the client, where the threaded server's own CPU (about 0.3 ms a call, a thread and
    an email-style header parser per request) would be charged to the cores the runner is measured on. JSON by
    orjson and word counts remembered per text, for the same reason."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _LeanHTTP(responder, model, latency), "127.0.0.1", 0, backlog=2048)


def main() -> None:
    """Serve from its own process (benchmarks: a real simulator does not share the client's GIL). Prints the URL
    on the first line, then serves until stdin closes."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(description="fake OpenAI-compatible user simulator on 127.0.0.1")
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument("--finish-after", type=int, default=3)
    ap.add_argument("--threaded", action="store_true", help="FakeOpenAIServer instead of the lean server")
    args = ap.parse_args()
    responder = scripted_user_turn(args.finish_after)
    if args.threaded:
        with FakeOpenAIServer(responder, latency=args.latency) as server:
            print(server.url, flush=True)
            sys.stdin.read()
        return

    async def serve() -> None:
        server = await serve_lean(responder, latency=args.latency)
        print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        server.close()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
