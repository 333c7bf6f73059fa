"""A fault-injecting HTTP proxy in front of an emulator: it forwards every request and,
when a rule says so, drops the response after the emulator has applied the request
(the client sees the connection closed, as when a network drops a response)."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

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

    def take(self, target: str, body: bytes) -> bool:
        with self.lock:
            for rule in self.rules:
                if rule(target, body):
                    self.rules.remove(rule)
                    self.dropped.append(target)
                    return True
        return False


def _handler(upstream: str, drops: Drops) -> type[BaseHTTPRequestHandler]:
    parts = urlsplit(upstream)

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            conn.request("POST", self.path, body=body, headers=headers)
            response = conn.getresponse()
            payload = response.read()
            conn.close()
            if drops.take(self.headers.get("X-Amz-Target", ""), body):
                self.close_connection = True  # applied upstream; the client never hears
                return
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() not in {"transfer-encoding", "connection", "content-length"}:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Forward


@contextmanager
def dropping_proxy(upstream: str) -> Iterator[tuple[str, Drops]]:
    """A proxy on 127.0.0.1 in front of ``upstream``; yields its URL and its drops."""
    drops = Drops()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream, drops))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="dropping-proxy", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", drops
    finally:
        server.shutdown()
        server.server_close()
