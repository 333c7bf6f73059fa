"""A fault-injecting HTTP proxy in front of an emulator, or in front of DynamoDB and SQS
at once (it routes each request by its ``X-Amz-Target``). A :class:`FaultPolicy` decides,
per request, whether the proxy answers it with an error itself (without forwarding),
forwards it and then drops the response (the request is applied, the client sees the
connection close, as when a network drops a response), forwards it twice (a queue that
delivers a message twice), or answers it at once and forwards it only later (a request
that lands late). The behaviour tests drop chosen responses (:class:`Drops`); the chaos
suite (chaos/proxy.py) injects every kind at random rates."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol
from urllib.parse import SplitResult, urlsplit

THROTTLE = "throttle"
SERVER_ERROR = "server_error"
SQS_THROTTLE = "sqs_throttle"
SQS_SERVER_ERROR = "sqs_server_error"
ERROR_ANSWERS: dict[str, tuple[int, dict[str, str]]] = {
    THROTTLE: (
        400,
        {
            "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
            "message": "The level of configured provisioned throughput for the table was "
            "exceeded. Consider increasing your provisioning level with the UpdateTable API.",
        },
    ),
    SERVER_ERROR: (
        500,
        {
            "__type": "com.amazon.coral.service#InternalServerError",
            "message": "Internal server error (injected by the fault proxy)",
        },
    ),
    SQS_THROTTLE: (
        400,
        {
            "__type": "com.amazonaws.sqs#RequestThrottled",
            "message": "Request is throttled (injected by the fault proxy)",
        },
    ),
    SQS_SERVER_ERROR: (
        500,
        {
            "__type": "com.amazonaws.sqs#InternalError",
            "message": "Internal error (injected by the fault proxy)",
        },
    ),
}
"""The status and JSON body (DynamoDB's, SQS's) for each error the proxy answers with."""


class FaultPolicy(Protocol):
    def error_for(self, target: str) -> str | None:
        """An :data:`ERROR_ANSWERS` kind to answer with instead of forwarding, or ``None``."""

    def drops(self, target: str, body: bytes) -> bool:
        """After forwarding: whether to drop the response."""

    def copies(self, target: str, body: bytes) -> int:
        """How many more times to forward the request (each copy's answer is ignored)."""

    def deferred(self, target: str, body: bytes) -> tuple[float, bytes] | None:
        """``(seconds, answer)``: answer with ``answer`` (a 200) at once, and forward the
        request only that long after; ``None``: forward it now."""

    def upstream_down(self) -> None:
        """The emulator did not answer (the proxy answers a 500)."""


Match = Callable[[str, bytes], bool]
"""Given the request's ``X-Amz-Target`` and body: whether this request's response is
dropped."""


@dataclass
class Drops:
    """Which responses to drop: ``rules`` are tried in order, each used once."""

    rules: list[Match] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    """The targets whose response was dropped, in order."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def drop_next(self, target: str, contains: str = "") -> None:
        """Drop the response to the next request to ``target`` (e.g.
        ``DynamoDB_20120810.UpdateItem``) whose body contains ``contains``."""
        self.rules.append(lambda t, body: t == target and contains.encode() in body)

    def error_for(self, target: str) -> str | None:
        return None

    def drops(self, target: str, body: bytes) -> bool:
        with self.lock:
            for rule in self.rules:
                if rule(target, body):
                    self.rules.remove(rule)
                    self.dropped.append(target)
                    return True
        return False

    def copies(self, target: str, body: bytes) -> int:
        return 0

    def deferred(self, target: str, body: bytes) -> tuple[float, bytes] | None:
        return None

    def upstream_down(self) -> None:
        pass


Upstreams = str | Mapping[str, str]
"""One emulator's URL, or a URL per ``X-Amz-Target`` prefix (``DynamoDB_20120810``,
``AmazonSQS``)."""


def _send(
    upstream: SplitResult, path: str, headers: dict[str, str], body: bytes
) -> tuple[int, list[tuple[str, str]], bytes]:
    conn = http.client.HTTPConnection(upstream.hostname or "", upstream.port, timeout=30)
    try:
        # the client's Host header (the proxy's address) as sent: it is signed
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.getheaders(), response.read()
    finally:
        conn.close()


def _send_quietly(upstream: SplitResult, path: str, headers: dict[str, str], body: bytes) -> None:
    """A copy or a late request: its answer goes nowhere, and an emulator that is down
    loses it, as the network would."""
    with suppress(OSError):
        _send(upstream, path, headers, body)


class _Forward(BaseHTTPRequestHandler):
    """Forwards each request to its upstream as :attr:`policy` says."""

    protocol_version = "HTTP/1.1"
    routes: dict[str, SplitResult]
    """Upstreams by ``X-Amz-Target`` prefix; ``""``: any other."""
    policy: FaultPolicy

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        target = self.headers.get("X-Amz-Target", "")
        upstream = self.routes.get(target.split(".", 1)[0]) or self.routes[""]
        headers = dict(self.headers.items())
        if (error := self.policy.error_for(target)) is not None:
            self._answer_error(error)
            return
        if (later := self.policy.deferred(target, body)) is not None:
            seconds, answer = later
            timer = threading.Timer(
                seconds, _send_quietly, args=(upstream, self.path, headers, body)
            )
            timer.daemon = True
            timer.start()
            self._answer(200, answer)
            return
        for _ in range(self.policy.copies(target, body)):
            _send_quietly(upstream, self.path, headers, body)
        try:
            status, answered, payload = _send(upstream, self.path, headers, body)
        except OSError:  # the emulator is down (restarting): a 500, which clients retry
            self.policy.upstream_down()
            self._answer_error(SERVER_ERROR)
            return
        if self.policy.drops(target, body):
            self.close_connection = True  # applied upstream; the client never hears
            return
        self.send_response(status)
        for name, value in answered:
            if name.lower() not in {"transfer-encoding", "connection", "content-length"}:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _answer_error(self, kind: str) -> None:
        status, answer = ERROR_ANSWERS[kind]
        self._answer(status, json.dumps(answer).encode())

    def _answer(self, status: int, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("x-amzn-RequestId", "fault-proxy")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _handler(upstreams: Upstreams, policy: FaultPolicy) -> type[BaseHTTPRequestHandler]:
    routes = (
        {"": urlsplit(upstreams)}
        if isinstance(upstreams, str)
        else {prefix: urlsplit(url) for prefix, url in upstreams.items()}
    )
    routes.setdefault("", next(iter(routes.values())))
    return type("Forward", (_Forward,), {"routes": routes, "policy": policy})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    """Many workers' connections at once (the default backlog is 5)."""

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away (a killed worker, a timeout) is not news."""


@contextmanager
def fault_proxy(upstream: Upstreams, policy: FaultPolicy) -> Iterator[str]:
    """A proxy on 127.0.0.1 in front of ``upstream`` applying ``policy``; yields its URL."""
    server = _Server(("127.0.0.1", 0), _handler(upstream, policy))
    thread = threading.Thread(target=server.serve_forever, name="fault-proxy", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def dropping_proxy(upstream: str) -> Iterator[tuple[str, Drops]]:
    """A proxy on 127.0.0.1 in front of ``upstream``; yields its URL and its drops."""
    drops = Drops()
    with fault_proxy(upstream, drops) as url:
        yield url, drops
