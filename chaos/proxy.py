"""A fault-injecting HTTP proxy in front of DynamoDB (the idea of ``tests/faults.py``,
grown): every worker and maintenance request goes through it, and it

- answers a share of requests itself, without forwarding them, with DynamoDB's
  throttling error (``ProvisionedThroughputExceededException``, HTTP 400) or an
  ``InternalServerError`` (HTTP 500), at a steady rate or, inside a burst window, a
  higher one;
- forwards a share of writes and then drops the response (the write is applied, the
  client sees the connection close), as when a network loses a response;
- answers HTTP 500 while DynamoDB itself is down (being restarted).

Counts what it injected, per kind.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

THROTTLE = "throttle"
SERVER_ERROR = "server_error"
DROPPED_RESPONSE = "dropped_response"
UPSTREAM_DOWN = "upstream_down"

WRITE_TARGETS = frozenset(
    f"DynamoDB_20120810.{name}"
    for name in ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem")
)
_THROTTLE_BODY = {
    "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
    "message": "The level of configured provisioned throughput for the table was exceeded. "
    "Consider increasing your provisioning level with the UpdateTable API.",
}
_SERVER_ERROR_BODY = {
    "__type": "com.amazon.coral.service#InternalServerError",
    "message": "Internal server error (injected by the chaos proxy)",
}


@dataclass
class FaultPlan:
    """What the proxy injects; the harness changes ``error_rate`` and the burst window
    while it runs. Errors are half throttling, half 500s."""

    error_rate: float = 0.0
    burst_rate: float = 0.0
    burst_until: float = 0.0
    """``time.monotonic()`` until which ``burst_rate`` applies instead of ``error_rate``."""
    drop_rate: float = 0.0
    """Share of writes whose response is dropped after DynamoDB applied them."""
    seed: int = 0
    injected: Counter[str] = field(default_factory=Counter)
    forwarded: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def burst(self, rate: float, seconds: float) -> None:
        with self.lock:
            self.burst_rate = rate
            self.burst_until = time.monotonic() + seconds

    def error_for(self) -> str | None:
        """The error to answer this request with, or ``None`` to forward it."""
        with self.lock:
            rate = self.burst_rate if time.monotonic() < self.burst_until else self.error_rate
            if self._random.random() >= rate:
                return None
            kind = THROTTLE if self._random.random() < 0.5 else SERVER_ERROR
            self.injected[kind] += 1
            return kind

    def drops(self, target: str) -> bool:
        with self.lock:
            self.forwarded += 1
            if target in WRITE_TARGETS and self._random.random() < self.drop_rate:
                self.injected[DROPPED_RESPONSE] += 1
                return True
            return False

    def count(self, kind: str) -> None:
        with self.lock:
            self.injected[kind] += 1


def _handler(upstream: str, plan: FaultPlan) -> type[BaseHTTPRequestHandler]:
    parts = urlsplit(upstream)

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            target = self.headers.get("X-Amz-Target", "")
            if (error := plan.error_for()) is not None:
                self._answer_error(error)
                return
            try:
                status, headers, payload = self._forward(body)
            except OSError:  # DynamoDB is down (restarting): a 500, which clients retry
                plan.count(UPSTREAM_DOWN)
                self._answer_error(SERVER_ERROR)
                return
            if plan.drops(target):
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
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                conn.request("POST", self.path, body=body, headers=headers)
                response = conn.getresponse()
                return response.status, response.getheaders(), response.read()
            finally:
                conn.close()

        def _answer_error(self, kind: str) -> None:
            status, body = (400, _THROTTLE_BODY) if kind == THROTTLE else (500, _SERVER_ERROR_BODY)
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-amz-json-1.0")
            self.send_header("x-amzn-RequestId", "chaos-proxy")
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
def fault_proxy(upstream: str, plan: FaultPlan) -> Iterator[str]:
    """A proxy on 127.0.0.1 in front of ``upstream`` applying ``plan``; yields its URL."""
    server = _Server(("127.0.0.1", 0), _handler(upstream, plan))
    thread = threading.Thread(target=server.serve_forever, name="chaos-proxy", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
