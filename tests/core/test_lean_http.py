"""The lean clients' HTTP exchanges (runlane_sqs/adapters/lean/keepalive.py for the sync
one, ``AsyncKeepAlive`` in runlane_sqs/adapters/lean/aio.py for the async one) against
a small HTTP server in this process: connections are kept alive and reused, a connection the
server closed while idle is not reused, sized and chunked bodies are read whole, headers
are read by lower-case name, and failures are botocore's exceptions (which its standard
retry mode retries): a refused connection, a read that times out, a connection dropped
mid-answer. Over TLS, the sync exchange verifies the server with the session's CA bundle,
refuses a certificate it does not know, and skips the check when told to; so does the
async one."""

from __future__ import annotations

import asyncio
import datetime
import gc
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from aiobotocore.httpsession import AIOHTTPSession
from botocore.exceptions import (
    ConnectionClosedError,
    EndpointConnectionError,
    ReadTimeoutError,
    SSLError,
)
from botocore.httpsession import URLLib3Session
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from runlane_sqs.adapters.lean.aio import AsyncKeepAlive, async_unsupported_by
from runlane_sqs.adapters.lean.keepalive import KeepAlive, unsupported_by


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    connections: ClassVar[set[tuple[str, int]]] = set()
    mode: ClassVar[str] = "sized"

    def do_POST(self) -> None:
        Handler.connections.add(self.client_address)
        length = int(self.headers["Content-Length"])
        body = self.rfile.read(length)
        if Handler.mode == "slow":
            time.sleep(0.5)
        if Handler.mode == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_response(200)
        self.send_header("X-Amzn-RequestId", "r1")
        self.send_header("Set-Thing", "a")
        self.send_header("set-thing", "b")
        if Handler.mode == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b'{"echo":', body, b"}"):
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        answer = b'{"echo":' + body + b"}"
        self.send_header("Content-Length", str(len(answer)))
        if Handler.mode == "close":
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    Handler.connections = set()
    Handler.mode = "sized"
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def pools() -> Iterator[list[KeepAlive]]:
    made: list[KeepAlive] = []
    yield made
    for pool in made:
        pool.close()


@pytest.fixture
def pool_for(pools: list[KeepAlive]) -> Any:
    def make(url: str, read_timeout: float = 5) -> KeepAlive:
        session = URLLib3Session(timeout=(1, read_timeout), max_pool_connections=2)
        pools.append(KeepAlive(url, session))
        return pools[-1]

    return make


def _url(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{host}:{port}"


def test_connections_are_kept_alive_and_headers_read_by_lower_case_name(
    server: ThreadingHTTPServer, pool_for: Any
) -> None:
    pool = pool_for(_url(server))
    answers = [pool.post("/", b'"%d"' % n, {"Content-Type": "x"}) for n in range(5)]
    assert [a.content for a in answers] == [b'{"echo":"%d"}' % n for n in range(5)]
    assert answers[0].status_code == 200
    assert answers[0].headers["x-amzn-requestid"] == "r1"
    assert answers[0].headers["set-thing"] == "a, b"
    assert len(Handler.connections) == 1  # one connection, reused


def test_a_chunked_body_is_read_whole(server: ThreadingHTTPServer, pool_for: Any) -> None:
    Handler.mode = "chunked"
    pool = pool_for(_url(server))
    for _ in range(2):
        assert pool.post("/", b"[1,2]", {}).content == b'{"echo":[1,2]}'
    assert len(Handler.connections) == 1


def test_a_connection_the_server_closes_is_not_reused(
    server: ThreadingHTTPServer, pool_for: Any
) -> None:
    Handler.mode = "close"
    pool = pool_for(_url(server))
    for _ in range(3):
        assert pool.post("/", b"1", {}).content == b'{"echo":1}'
    assert len(Handler.connections) == 3


def test_an_idle_connection_dropped_by_the_server_is_replaced(
    server: ThreadingHTTPServer, pool_for: Any
) -> None:
    pool = pool_for(_url(server))
    pool.post("/", b"1", {})
    [idle] = pool._idle  # type: ignore[attr-defined]
    assert idle.sock is not None
    idle.sock.shutdown(socket.SHUT_RD)  # as if the server had closed it
    assert pool.post("/", b"2", {}).content == b'{"echo":2}'
    assert len(Handler.connections) == 2


def test_a_refused_connection_is_botocore_s_endpoint_connection_error(pool_for: Any) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(EndpointConnectionError):
        pool_for(f"http://127.0.0.1:{port}").post("/", b"1", {})


def test_a_slow_answer_is_a_read_timeout(server: ThreadingHTTPServer, pool_for: Any) -> None:
    Handler.mode = "slow"
    with pytest.raises(ReadTimeoutError):
        pool_for(_url(server), read_timeout=0.1).post("/", b"1", {})


def test_a_connection_dropped_mid_answer_is_connection_closed(
    server: ThreadingHTTPServer, pool_for: Any
) -> None:
    Handler.mode = "drop"
    with pytest.raises(ConnectionClosedError):
        pool_for(_url(server)).post("/", b"1", {})


def test_proxies_and_client_certificates_are_left_to_botocore() -> None:
    url = "https://dynamodb.eu-west-1.amazonaws.com/"
    assert unsupported_by(URLLib3Session(), url) is None
    proxied = URLLib3Session(proxies={"https": "http://proxy.internal:3128"})
    assert "proxy" in (unsupported_by(proxied, url) or "")
    certified = URLLib3Session(client_cert="/tmp/client.pem")
    assert "certificate" in (unsupported_by(certified, url) or "")
    assert "not botocore" in (unsupported_by(object(), url) or "")


# --- TLS: verified with the session's CA bundle, refused without it, or not verified ---


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "runlane test endpoint")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def tls_server(
    server: ThreadingHTTPServer, certificate: tuple[Path, Path]
) -> Iterator[ThreadingHTTPServer]:
    """The same server, answering over TLS with the self-signed certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _https(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    return f"https://{host}:{port}"


def test_tls_is_verified_with_the_session_s_ca_bundle(
    tls_server: ThreadingHTTPServer, certificate: tuple[Path, Path], pools: list[KeepAlive]
) -> None:
    session = URLLib3Session(verify=str(certificate[0]), timeout=(1, 5))
    pools.append(pool := KeepAlive(_https(tls_server), session))
    answers = [pool.post("/", b"%d" % n, {}) for n in range(3)]
    assert [a.content for a in answers] == [b'{"echo":%d}' % n for n in range(3)]
    assert len(Handler.connections) == 1


def test_an_unknown_certificate_is_refused(
    tls_server: ThreadingHTTPServer, pools: list[KeepAlive]
) -> None:
    """botocore's default bundle does not hold the self-signed certificate: its own
    ``SSLError``, as botocore's session raises it."""
    pools.append(pool := KeepAlive(_https(tls_server), URLLib3Session(timeout=(1, 5))))
    with pytest.raises(SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        pool.post("/", b"1", {})
    assert Handler.connections == set()  # no request was sent


def test_tls_is_not_verified_when_the_session_says_so(
    tls_server: ThreadingHTTPServer, pools: list[KeepAlive]
) -> None:
    pools.append(pool := KeepAlive(_https(tls_server), URLLib3Session(verify=False)))
    assert pool.post("/", b"1", {}).content == b'{"echo":1}'


def test_a_header_holding_a_line_break_is_refused_unsent(
    server: ThreadingHTTPServer, pool_for: Any
) -> None:
    with pytest.raises(ValueError, match="line break"):
        pool_for(_url(server)).post("/", b"1", {"X-Added": "a\r\nX-Injected: 1"})
    assert Handler.connections == set()


# --- the async lean client's exchange: asyncio streams, set up as aiobotocore's session --


def _exchange_run(
    url: str,
    posts: list[bytes],
    read_timeout: float = 5,
    verify: bool | str = True,
    connector_args: dict[str, Any] | None = None,
) -> list[Any]:
    """Each of ``posts`` sent in turn by one :class:`AsyncKeepAlive` (in one event loop);
    each answer, or the exception it raised."""

    async def main() -> list[Any]:
        session = AIOHTTPSession(
            timeout=(1, read_timeout),
            max_pool_connections=2,
            verify=verify,
            connector_args=connector_args,
        )
        exchange = AsyncKeepAlive(url, session)
        answers: list[Any] = []
        try:
            for body in posts:
                try:
                    answers.append(await exchange.post("/", body, {"Content-Type": "x"}))
                except Exception as exc:
                    answers.append(exc)
        finally:
            await exchange.close()
        return answers

    return asyncio.run(main())


@pytest.mark.parametrize("mode", ["sized", "chunked"])
def test_async_connections_are_kept_alive_and_bodies_read_whole(
    server: ThreadingHTTPServer, mode: str
) -> None:
    Handler.mode = mode
    answers = _exchange_run(_url(server), [b'"%d"' % n for n in range(3)])
    assert [a.content for a in answers] == [b'{"echo":"%d"}' % n for n in range(3)]
    assert answers[0].status_code == 200
    assert answers[0].headers["x-amzn-requestid"] == "r1"
    assert len(Handler.connections) == 1


def test_async_a_connection_the_server_closes_is_not_reused(server: ThreadingHTTPServer) -> None:
    Handler.mode = "close"
    answers = _exchange_run(_url(server), [b"1", b"2"])
    assert [a.content for a in answers] == [b'{"echo":1}', b'{"echo":2}']
    assert len(Handler.connections) == 2


@pytest.mark.parametrize(
    "connector_args", [{"keepalive_timeout": 0}, {"force_close": True}], ids=["expired", "forced"]
)
def test_async_connections_follow_the_session_s_keep_alive_settings(
    server: ThreadingHTTPServer, connector_args: dict[str, Any]
) -> None:
    """An idle connection older than ``keepalive_timeout`` is not reused; with
    ``force_close`` none is."""
    answers = _exchange_run(_url(server), [b"1", b"2", b"3"], connector_args=connector_args)
    assert [a.content for a in answers] == [b'{"echo":%d}' % n for n in (1, 2, 3)]
    assert len(Handler.connections) == 3


def test_async_a_header_holding_a_line_break_is_refused_unsent(
    server: ThreadingHTTPServer,
) -> None:
    async def main() -> None:
        exchange = AsyncKeepAlive(_url(server), AIOHTTPSession())
        with pytest.raises(ValueError, match="line break"):
            await exchange.post("/", b"1", {"X-Added": "a\nX-Injected: 1"})

    asyncio.run(main())
    assert Handler.connections == set()


def test_async_failures_are_botocore_s_exceptions(server: ThreadingHTTPServer) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    [refused] = _exchange_run(f"http://127.0.0.1:{port}", [b"1"])
    assert isinstance(refused, EndpointConnectionError)
    Handler.mode = "slow"
    [slow] = _exchange_run(_url(server), [b"1"], read_timeout=0.1)
    assert isinstance(slow, ReadTimeoutError)
    Handler.mode = "drop"
    [dropped] = _exchange_run(_url(server), [b"1"])
    assert isinstance(dropped, ConnectionClosedError)


def test_async_proxies_and_client_certificates_are_left_to_aiobotocore() -> None:
    url = "https://dynamodb.eu-west-1.amazonaws.com/"
    assert async_unsupported_by(AIOHTTPSession(), url) is None
    proxied = AIOHTTPSession(proxies={"https": "http://proxy.internal:3128"})
    assert "proxy" in (async_unsupported_by(proxied, url) or "")
    certified = AIOHTTPSession(client_cert="/tmp/client.pem")
    assert "certificate" in (async_unsupported_by(certified, url) or "")
    assert "not aiobotocore" in (async_unsupported_by(URLLib3Session(), url) or "")


def test_async_tls_is_verified_with_the_session_s_ca_bundle_or_refused(
    tls_server: ThreadingHTTPServer, certificate: tuple[Path, Path]
) -> None:
    url = _https(tls_server)
    answers = _exchange_run(url, [b"1", b"2"], verify=str(certificate[0]))
    assert [a.content for a in answers] == [b'{"echo":1}', b'{"echo":2}']
    assert len(Handler.connections) == 1
    [refused] = _exchange_run(url, [b"1"])
    assert isinstance(refused, SSLError)
    [unverified] = _exchange_run(url, [b"1"], verify=False)
    assert unverified.content == b'{"echo":1}'


def test_async_connections_of_a_finished_event_loop_are_not_reused(
    server: ThreadingHTTPServer,
) -> None:
    """A client used again from another event loop (``asyncio.run`` twice) connects anew;
    the first loop's connection, never closed in it, is dropped as the loop left it."""
    exchange = AsyncKeepAlive(_url(server), AIOHTTPSession())
    first = asyncio.run(exchange.post("/", b"1", {}))

    async def again() -> Any:
        try:
            return await exchange.post("/", b"2", {})
        finally:
            await exchange.close()

    with pytest.warns(ResourceWarning, match="unclosed"):
        second = asyncio.run(again())
        gc.collect()
    assert (first.content, second.content) == (b'{"echo":1}', b'{"echo":2}')
    assert len(Handler.connections) == 2


def test_async_a_request_cancelled_mid_answer_leaves_no_connection_behind(
    server: ThreadingHTTPServer,
) -> None:
    """The rest of that answer would otherwise be read as the next request's."""
    Handler.mode = "slow"

    async def main() -> Any:
        exchange = AsyncKeepAlive(_url(server), AIOHTTPSession())
        waiting = asyncio.create_task(exchange.post("/", b"1", {}))
        while not Handler.connections:  # the request has reached the server
            await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        Handler.mode = "sized"
        try:
            return await exchange.post("/", b"2", {})
        finally:
            await exchange.close()

    assert asyncio.run(main()).content == b'{"echo":2}'
    assert len(Handler.connections) == 2
