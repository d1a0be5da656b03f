"""A small HTTP/1.1 client for JSON POSTs to one server: a pool of keep-alive connections and bytes in, bytes out.

Why not aiohttp: with hundreds of dialogues in flight, the client's CPU per request bounds the rollout rate, and
aiohttp took 0.23-0.27 ms of CPU per request where this client takes 0.10-0.15 ms, half of it the kernel's send
(benchmarks/rollout_concurrency.py, 2026-11-24). Here a request is one precomputed head plus the body,
and the answer is parsed once, by one small state machine. It reads what OpenAI-compatible servers answer with
(Content-Length, chunked, or close-delimited bodies; http or https) and nothing more: no redirects, proxies,
cookies or compression.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import NamedTuple
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024  # a status line and headers longer than this are not an HTTP server's answer
# A chat completion holding one user reply is a few KB; an answer past this is no user's reply (a server gone wrong,
# an endless generation), and reading it whole would hold memory and end up as a line of a rollout file.
MAX_BODY_BYTES = 512 * 1024
# How often a client looks for requests past their deadline, so a deadline is kept to within this many seconds. One
# timer per client instead of an asyncio.timeout per request: with hundreds of dialogues in flight, arming and
# cancelling a timer on every call was a twentieth of a runner's CPU (measured 2026-11-28).
DEADLINE_CHECK_S = 0.05


class BadResponse(ConnectionError):
    """The server answered with something that is not HTTP/1.x, or closed the connection mid-answer."""


class BadURL(ConnectionError):
    """The base URL cannot be connected to (no http/https scheme, no host, a port out of range)."""


class TooLarge(BadResponse):
    """The answer's body is longer than MAX_BODY_BYTES; it is not read to its end."""


class Answer(NamedTuple):
    status: int
    body: bytes
    retry_after: float | None = None  # seconds the server asks a client to wait before asking again (Retry-After)


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    tls: bool
    path: str  # the base URL's path, without a trailing slash
    host_header: str

    @classmethod
    def parse(cls, base_url: str) -> Endpoint:
        try:
            url = urlsplit(base_url)
            port = url.port
        except ValueError as e:
            raise BadURL(f"bad URL {base_url!r}: {e}") from None
        if url.scheme not in ("http", "https") or not url.hostname:
            raise BadURL(f"bad URL {base_url!r}: expected http://host[:port]/path or https://...")
        tls = url.scheme == "https"
        host_header = url.netloc.rsplit("@", 1)[-1]
        return cls(url.hostname, port or (443 if tls else 80), tls, url.path.rstrip("/"), host_header)


class KeepAliveClient:
    """POSTs to `base_url` + path; connections are reused across requests and opened as concurrency needs them.

    A bad base URL fails each request (as BadURL, a ConnectionError), like a refused connection, so a health check
    can name every bad URL at once. Belongs to the event loop it runs in: `aclose`, or a request from a new loop,
    drops the idle connections."""

    def __init__(self, base_url: str, headers: dict[str, str]):
        try:
            self.endpoint: Endpoint | None = Endpoint.parse(base_url)
            self._bad_url: BadURL | None = None
        except BadURL as e:
            self.endpoint, self._bad_url = None, e
        self._headers = headers
        self._heads: dict[str, bytes] = {}  # path -> request head up to the Content-Length value
        self._ssl: ssl.SSLContext | None = None  # made on the first https connection (a client pickles until used)
        self._idle: list[_Connection] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._deadlines: dict[_Connection, float] = {}  # connection busy with a request -> its deadline (loop time)
        self._deadline_check: asyncio.TimerHandle | None = None

    async def post_json(self, path: str, body: bytes, timeout: float | None = None) -> Answer:
        """Status, raw body and the wait a `Retry-After` header asks for. Raises OSError (ConnectionError,
        BadResponse, TooLarge, BadURL) when no full answer arrives, and TimeoutError when none arrives within
        `timeout` seconds (connecting, sending and the answer; kept to within DEADLINE_CHECK_S). A call that
        fails, times out or is cancelled closes its connection, so a late answer is never misread."""
        if self._bad_url is not None:
            raise self._bad_url
        head = self._heads.get(path) or self._head(path)
        loop = self._enter_loop()
        deadline = None if timeout is None else loop.time() + timeout
        conn = self._idle_connection() or await self._connect(loop, deadline)
        try:
            if deadline is not None:
                self._watch(loop, conn, deadline)
            answer, reusable = await conn.exchange(b"%s%d\r\n\r\n%s" % (head, len(body), body))
        except BaseException:
            conn.close()
            raise
        finally:
            self._deadlines.pop(conn, None)
        if reusable:
            self._idle.append(conn)
        else:
            conn.close()
        return answer

    def _head(self, path: str) -> bytes:
        lines = [f"POST {self.endpoint.path}{path} HTTP/1.1", f"Host: {self.endpoint.host_header}"]
        lines += [f"{k}: {v}" for k, v in self._headers.items()]
        lines += ["Content-Type: application/json", "Accept-Encoding: identity", "Content-Length: "]
        self._heads[path] = "\r\n".join(lines).encode("latin-1")
        return self._heads[path]

    def _enter_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections and the timer of an earlier event loop cannot serve this one
            self._drop_idle()
            self._deadlines, self._deadline_check = {}, None
            self._loop = loop
        return loop

    def _idle_connection(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:  # the server may have closed it while idle
                return conn
        return None

    async def _connect(self, loop: asyncio.AbstractEventLoop, deadline: float | None) -> _Connection:
        host = self.endpoint.host
        if self.endpoint.tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        async with asyncio.timeout_at(deadline):  # rare (the pool keeps connections), so a timer of its own
            _, conn = await loop.create_connection(
                _Connection, host, self.endpoint.port, ssl=self._ssl, server_hostname=host if self._ssl else None
            )
        return conn

    def _watch(self, loop: asyncio.AbstractEventLoop, conn: _Connection, deadline: float) -> None:
        self._deadlines[conn] = deadline
        if self._deadline_check is None:
            self._deadline_check = loop.call_later(DEADLINE_CHECK_S, self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Fail every request past its deadline; look again while any request is out."""
        now = loop.time()
        late = [conn for conn, deadline in self._deadlines.items() if deadline <= now]
        for conn in late:
            conn.fail(TimeoutError(f"no answer from {self.endpoint.host_header} in time"))
        self._deadline_check = loop.call_later(DEADLINE_CHECK_S, self._expire, loop) if self._deadlines else None

    def _drop_idle(self) -> None:
        for conn in self._idle:
            try:
                conn.close()
            except RuntimeError:  # its event loop is closed; the socket closes when the transport is collected
                pass
        self._idle = []

    async def aclose(self) -> None:
        self._drop_idle()


class _Connection(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    def __init__(self):
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buffer = bytearray()
        self._reader: _ResponseReader | None = None
        self._waiter: asyncio.Future | None = None

    def exchange(self, request: bytes) -> asyncio.Future:
        self._reader, self._buffer = _ResponseReader(), bytearray()
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self._waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self.close()  # bytes nobody asked for: this connection can no longer be trusted
            return
        self._buffer += data
        try:
            answer = self._reader.feed(self._buffer)
        except BadResponse as e:
            self.fail(e)
            return
        if answer is not None:
            self._waiter.set_result(answer)

    def eof_received(self) -> bool:
        if self._waiter is not None and not self._waiter.done():
            answer = self._reader.finish(self._buffer)
            if answer is not None:
                self._waiter.set_result(answer)
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        reason = f": {exc}" if exc else ""
        self.fail(BadResponse(f"the server closed the connection before answering{reason}"))

    def fail(self, error: Exception) -> None:
        """End the request in flight with `error` and close the connection."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)
        self.close()


class _ResponseReader:
    """Parses one HTTP/1.x response from a growing buffer: `feed` returns (answer, reusable) once complete. A body
    longer than MAX_BODY_BYTES raises TooLarge as soon as that shows (its declared length, or the bytes read)."""

    def __init__(self):
        self.status: int | None = None
        self._length: int | None = None  # Content-Length; None with chunked or close-delimited bodies
        self._chunked = False
        self._keep_alive = True
        self._retry_after: float | None = None

    def feed(self, buf: bytearray) -> tuple[Answer, bool] | None:
        while self.status is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    raise BadResponse("the response head is too long")
                return None
            head = bytes(buf[:end]).decode("latin-1")
            del buf[: end + 4]
            self._read_head(head)
        # a chunked body's framing may double its bytes; a close-delimited body is all the bytes
        held = MAX_BODY_BYTES if self._length is None and not self._chunked else 2 * MAX_BODY_BYTES
        if len(buf) > held:
            raise _too_large()
        if self._chunked:
            return self._read_chunked(buf)
        if self._length is None:
            return None  # the body ends when the server closes the connection
        if len(buf) < self._length:
            return None
        # Bytes past the body were never asked for (no pipelining here): do not reuse the connection.
        return self._answer(bytes(buf[: self._length])), self._keep_alive and len(buf) == self._length

    def finish(self, buf: bytearray) -> tuple[Answer, bool] | None:
        """At end of stream: the answer, if its body was close-delimited."""
        if self.status is not None and not self._chunked and self._length is None:
            return self._answer(bytes(buf)), False
        return None

    def _answer(self, body: bytes) -> Answer:
        return Answer(self.status, body, self._retry_after)

    def _read_head(self, head: str) -> None:
        status_line, *lines = head.split("\r\n")
        version, _, rest = status_line.partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise BadResponse(f"not an HTTP/1.x response: {status_line[:80]!r}")
        if code.startswith("1"):  # an interim answer (100 Continue); the real one follows
            return
        headers = {}
        for line in lines:
            name, sep, value = line.partition(":")
            if not sep:
                raise BadResponse(f"malformed header line {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        self.status = int(code)
        self._retry_after = retry_after_seconds(headers.get("retry-after"))
        connection = headers.get("connection", "").lower()
        self._keep_alive = connection == "keep-alive" if version == "HTTP/1.0" else connection != "close"
        if headers.get("content-encoding", "identity").lower() != "identity":
            raise BadResponse(f"unsupported content-encoding {headers['content-encoding']!r}")
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._chunked = True
        elif self.status in (204, 304):
            self._length = 0
        elif "content-length" in headers:
            try:
                self._length = int(headers["content-length"])
            except ValueError:
                raise BadResponse(f"bad content-length {headers['content-length']!r}") from None
            if self._length > MAX_BODY_BYTES:
                raise _too_large()
        else:
            self._keep_alive = False

    def _read_chunked(self, buf: bytearray) -> tuple[int, bytes, bool] | None:
        """Parses the whole chunked body when it has arrived (bodies are small; a partial one is re-read later)."""
        body, pos = bytearray(), 0
        while True:
            line_end = buf.find(b"\r\n", pos)
            if line_end < 0:
                return None
            try:
                size = int(bytes(buf[pos:line_end]).split(b";", 1)[0], 16)
            except ValueError:
                raise BadResponse("malformed chunk size") from None
            pos = line_end + 2
            if len(body) + size > MAX_BODY_BYTES:
                raise _too_large()
            if size == 0:
                trailers_end = buf.find(b"\r\n", pos)
                while trailers_end > pos:  # skip trailer lines up to the blank line
                    pos = trailers_end + 2
                    trailers_end = buf.find(b"\r\n", pos)
                if trailers_end < 0:
                    return None
                return self._answer(bytes(body)), self._keep_alive and trailers_end + 2 == len(buf)
            if len(buf) < pos + size + 2:
                return None
            body += buf[pos : pos + size]
            pos += size + 2


def _too_large() -> TooLarge:
    return TooLarge(f"the answer is longer than {MAX_BODY_BYTES // 1024} KiB, no user's reply; not read further")


def retry_after_seconds(value: str | None) -> float | None:
    """A `Retry-After` header's wait in seconds (it gives seconds or an HTTP date), None where absent or unreadable;
    never below 0."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
