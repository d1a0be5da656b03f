"""The simulator's HTTP/1.1 client against a server that answers with hand-written bytes.

The fake OpenAI server (test_usersim_llm, test_runner_faults) covers timeouts, HTTP errors, dropped and killed
connections end to end; here are the wire formats it never sends: chunked and close-delimited bodies, interim
answers, garbage, and what the client sends and reuses.
"""

import asyncio
import datetime
import email.utils
import ipaddress
import json
import ssl
import time

import pytest

from sead.testing.fake_openai_server import FakeOpenAIServer
from sead.usersim.http_client import DEADLINE_CHECK_S, MAX_BODY_BYTES, BadResponse, BadURL, KeepAliveClient, TooLarge

OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
HANG = b""  # an answer that never comes: the server waits until the client gives up


class Closing(bytes):
    """An answer after which the server closes the connection."""


class ScriptedServer:
    """Answers each request with the next canned answer; None closes the connection without answering, HANG
    holds it open until the client closes it."""

    def __init__(self, answers, tls: ssl.SSLContext | None = None):
        self.answers, self.requests, self.connections = list(answers), [], 0
        self.tls = tls

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        scheme = "https" if self.tls else "http"
        self.url = f"{scheme}://localhost:{self.server.sockets[0].getsockname()[1]}/v1/"
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                headers = dict(line.split(": ", 1) for line in lines[1:] if line)
                body = await reader.readexactly(int(headers["Content-Length"]))
                self.requests.append((lines[0], headers, body))
                answer = self.answers.pop(0)
                if answer is None:
                    break
                if answer is HANG:
                    await reader.read()
                    break
                writer.write(answer)
                await writer.drain()
                if isinstance(answer, Closing):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


def post(client, body=b'{"q": 1}'):
    return client.post_json("/chat/completions", body)


@pytest.mark.asyncio
async def test_requests_carry_path_headers_and_body_and_reuse_one_connection():
    answers = [OK_HEAD + b'Content-Length: 7\r\n\r\n{"a":1}', OK_HEAD + b"Content-Length: 2\r\n\r\n{}"]
    async with ScriptedServer(answers) as server:
        client = KeepAliveClient(server.url, {"Authorization": "Bearer k"})
        assert await post(client) == (200, b'{"a":1}', None)
        assert await post(client, b"[]") == (200, b"{}", None)
        await client.aclose()
    (line, headers, body), second = server.requests
    assert line == "POST /v1/chat/completions HTTP/1.1" and body == b'{"q": 1}' and second[2] == b"[]"
    assert headers["Authorization"] == "Bearer k" and headers["Content-Type"] == "application/json"
    assert headers["Host"] == server.url.split("/")[2]
    assert server.connections == 1


@pytest.mark.asyncio
async def test_chunked_close_delimited_and_interim_answers_are_read_whole():
    chunked = OK_HEAD + b'Transfer-Encoding: chunked\r\n\r\n4\r\n{"a"\r\n3;ext=1\r\n:1}\r\n0\r\nX-Trailer: t\r\n\r\n'
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" + OK_HEAD + b"Content-Length: 2\r\n\r\n[]"
    close_delimited = Closing(b"HTTP/1.0 503 Service Unavailable\r\n\r\nbusy, come back later")
    async with ScriptedServer([chunked, interim, close_delimited, OK_HEAD + b"Content-Length: 2\r\n\r\nok"]) as server:
        client = KeepAliveClient(server.url, {})
        assert await post(client) == (200, b'{"a":1}', None)
        assert await post(client) == (200, b"[]", None)
        assert await post(client) == (503, b"busy, come back later", None)
        assert await post(client) == (200, b"ok", None)  # on a new connection: the close-delimited one is spent
        await client.aclose()
    assert server.connections == 2


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "answer,problem",
    [
        (b"hello there\r\n\r\n", "not an HTTP/1.x response"),
        (Closing(OK_HEAD + b'Content-Length: 50\r\n\r\n{"cut": '), "closed the connection"),
        (None, "closed the connection"),
        (OK_HEAD + b"Content-Encoding: gzip\r\nContent-Length: 2\r\n\r\nxx", "content-encoding"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header"),
    ],
)
async def test_broken_answers_raise_and_the_next_request_works(answer, problem):
    async with ScriptedServer([answer, OK_HEAD + b"Content-Length: 2\r\n\r\n{}"]) as server:
        client = KeepAliveClient(server.url, {})
        with pytest.raises(BadResponse, match=problem):
            await post(client)
        assert await post(client) == (200, b"{}", None)
        await client.aclose()


@pytest.mark.asyncio
async def test_a_timed_out_request_never_hands_its_late_answer_to_the_next():
    async with ScriptedServer([HANG, OK_HEAD + b"Content-Length: 2\r\n\r\n{}"]) as server:
        client = KeepAliveClient(server.url, {})
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await post(client)
        assert client._idle == []  # the cancelled call's connection was closed, not pooled
        assert await post(client) == (200, b"{}", None)
        await client.aclose()
    assert server.connections == 2


@pytest.mark.asyncio
async def test_the_clients_own_deadline_fails_a_hung_request_and_stops_looking_once_none_is_out():
    async with ScriptedServer([HANG, OK_HEAD + b"Content-Length: 2\r\n\r\n{}"]) as server:
        client = KeepAliveClient(server.url, {})
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            await client.post_json("/chat/completions", b"{}", timeout=0.2)
        assert 0.2 <= time.monotonic() - start < 0.2 + 10 * DEADLINE_CHECK_S
        assert client._idle == []  # the late answer's connection is closed, not pooled
        assert await client.post_json("/chat/completions", b"{}", timeout=5.0) == (200, b"{}", None)
        await asyncio.sleep(2 * DEADLINE_CHECK_S)
        assert client._deadlines == {} and client._deadline_check is None  # no timer left running
        await client.aclose()
    assert server.connections == 2


@pytest.mark.parametrize("url", ["localhost:8000/v1", "http://127.0.0.1:99999/v1", "ftp://host/v1", "http:///v1"])
def test_a_bad_url_fails_each_request_as_a_connection_error(url):
    client = KeepAliveClient(url, {})
    with pytest.raises(BadURL, match="bad URL"):
        asyncio.run(post(client))
    assert issubclass(BadURL, ConnectionError)


def test_the_client_moves_to_a_new_event_loop():
    body = json.dumps({"model": "fake-user-sim", "messages": [{"role": "user", "content": "hi"}]}).encode()
    with FakeOpenAIServer() as server:
        client = KeepAliveClient(server.url, {})
        for _ in range(2):  # the first loop closes with an idle connection in the pool
            status, raw, _ = asyncio.run(client.post_json("/chat/completions", body))
            assert status == 200 and "<user_reply>" in json.loads(raw)["choices"][0]["message"]["content"]
        asyncio.run(client.aclose())
    assert len(server.requests) == 2


def test_an_unused_https_client_pickles_like_the_simulator_around_it():
    import pickle

    client = pickle.loads(pickle.dumps(KeepAliveClient("https://api.example.com/v1", {"Authorization": "Bearer k"})))
    assert client.endpoint.tls and client.endpoint.port == 443 and client.endpoint.path == "/v1"


def self_signed(folder):
    """A certificate for localhost, signed by its own key (cryptography is in the locked environment)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_file, key_file)
    return cert_file, server


@pytest.mark.asyncio
async def test_https_verifies_the_server_and_keeps_its_tls_connection_alive(tmp_path, monkeypatch):
    cert_file, server_tls = self_signed(tmp_path)
    chunked = OK_HEAD + b'Transfer-Encoding: chunked\r\n\r\n3\r\n{"a\r\n5\r\n": 2}\r\n0\r\n\r\n'
    answers = [OK_HEAD + b'Content-Length: 8\r\n\r\n{"a": 1}', chunked]
    async with ScriptedServer(answers, tls=server_tls) as server:
        untrusted = KeepAliveClient(server.url, {})  # the system's CAs only: the self-signed server is refused
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            await post(untrusted)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))  # how a user trusts a private CA, read by OpenSSL
        client = KeepAliveClient(server.url, {"Authorization": "Bearer k"})
        assert [await post(client) for _ in answers] == [(200, b'{"a": 1}', None), (200, b'{"a": 2}', None)]
        await client.aclose()
    assert server.connections == 1  # the refused handshake never got this far; one TLS connection for both
    assert [r[0] for r in server.requests] == ["POST /v1/chat/completions HTTP/1.1"] * 2
    assert server.requests[0][1]["Authorization"] == "Bearer k"


@pytest.mark.asyncio
async def test_retry_after_is_read_as_seconds_or_as_a_date():
    in_a_minute = email.utils.format_datetime(
        datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=60), usegmt=True
    )
    answers = [
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 503 Unavailable\r\nRetry-After: %s\r\nContent-Length: 2\r\n\r\n{}" % in_a_minute.encode(),
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: soon\r\nContent-Length: 2\r\n\r\n{}",
    ]
    async with ScriptedServer(answers) as server:
        client = KeepAliveClient(server.url, {})
        seven, dated, unreadable = [await post(client) for _ in answers]
        await client.aclose()
    assert seven == (429, b"{}", 7.0) and dated.status == 503 and 50 < dated.retry_after <= 60
    assert unreadable.retry_after is None


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "answer",
    [
        OK_HEAD + b"Content-Length: 20000000\r\n\r\n" + b"x" * 1000,  # refused on its declared length
        OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + (b"10000\r\n" + b"x" * 0x10000 + b"\r\n") * 20 + b"0\r\n\r\n",
        Closing(OK_HEAD + b"\r\n" + b"x" * (2 * MAX_BODY_BYTES)),
    ],
    ids=["declared", "chunked", "close-delimited"],
)
async def test_an_answer_too_large_for_a_reply_is_refused_not_read_whole(answer):
    """A 20 MB reply was once read whole, stored as a 155 MB rollout line and scored as the agent's failure."""
    async with ScriptedServer([answer, OK_HEAD + b"Content-Length: 2\r\n\r\n{}"]) as server:
        client = KeepAliveClient(server.url, {})
        with pytest.raises(TooLarge, match="longer than 512 KiB"):
            await post(client)
        assert client._idle == [] and await post(client) == (200, b"{}", None)  # on a new connection
        await client.aclose()
