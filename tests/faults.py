"""A fault-injecting HTTP proxy in front of an emulator. A :class:`FaultPolicy` decides,
per request, whether the proxy answers it with an error itself (without forwarding), or
forwards it and then drops the response (the request is applied, the client sees the
connection close, as when a network drops a response). The behaviour tests drop chosen
responses (:class:`Drops`); the chaos suite (chaos/proxy.py) injects errors and drops at
random rates."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol
from urllib.parse import urlsplit

THROTTLE = "throttle"
SERVER_ERROR = "server_error"
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
}
"""DynamoDB's status and JSON body for each error the proxy can answer with."""


class FaultPolicy(Protocol):
    def error_for(self, target: str) -> str | None:
        """An :data:`ERROR_ANSWERS` kind to answer with instead of forwarding, or ``None``."""

    def drops(self, target: str, body: bytes) -> bool:
        """After forwarding: whether to drop the response."""

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

    def upstream_down(self) -> None:
        pass


def _handler(upstream: str, policy: FaultPolicy) -> type[BaseHTTPRequestHandler]:
    parts = urlsplit(upstream)

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            target = self.headers.get("X-Amz-Target", "")
            if (error := policy.error_for(target)) is not None:
                self._answer_error(error)
                return
            try:
                status, headers, payload = self._forward(body)
            except OSError:  # the emulator is down (restarting): a 500, which clients retry
                policy.upstream_down()
                self._answer_error(SERVER_ERROR)
                return
            if policy.drops(target, body):
                self.close_connection = True  # applied upstream; the client never hears
                return
            self.send_response(status)
            for name, value in headers:
                if name.lower() not in {"transfer-encoding", "connection", "content-length"}:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
            try:
                # the client's Host header (the proxy's address) as sent: it is signed
                conn.request("POST", self.path, body=body, headers=dict(self.headers.items()))
                response = conn.getresponse()
                return response.status, response.getheaders(), response.read()
            finally:
                conn.close()

        def _answer_error(self, kind: str) -> None:
            status, answer = ERROR_ANSWERS[kind]
            payload = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-amz-json-1.0")
            self.send_header("x-amzn-RequestId", "fault-proxy")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Forward


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    """Many workers' connections at once (the default backlog is 5)."""

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away (a killed worker, a timeout) is not news."""


@contextmanager
def fault_proxy(upstream: str, policy: FaultPolicy) -> Iterator[str]:
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
