"""The sync lean client's HTTP exchange: keep-alive ``http.client`` connections to one endpoint.

It takes its settings from the botocore client's own HTTP session (``URLLib3Session``):
the CA bundle it verifies TLS with, its connect and read timeouts, its pool size and its
socket options (``TCP_NODELAY``). An endpoint botocore would reach through a proxy, or
with a client certificate, is not handled here (:func:`unsupported_by`): the lean client
then sends over botocore's session itself. Failures are raised as the botocore
exceptions its session raises (``EndpointConnectionError``, ``ConnectTimeoutError``,
``ReadTimeoutError``, ``ConnectionClosedError``), so botocore's standard retry mode
treats them alike.
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
import weakref
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from botocore.httpsession import create_urllib3_context, get_cert_path

from runlane_sqs.adapters.lean.protocol import Response

MAX_HEADER_LINE = 65536
MAX_HEADERS = 100
"""http.client's own limits on a response's header lines."""


class HeaderMap(dict[str, str]):
    """A response's headers by lower-case name (repeated ones joined with ``, ``), read
    without the ``email`` package that ``http.client`` parses them with."""

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)

    def get_all(self, name: str, default: Any = None) -> Any:
        value = self.get(name)
        return default if value is None else [value]


def _read_headers(fp: Any) -> HeaderMap:
    headers = HeaderMap()
    for _ in range(MAX_HEADERS + 1):
        line = fp.readline(MAX_HEADER_LINE + 1)
        if len(line) > MAX_HEADER_LINE:
            raise http.client.LineTooLong("header line")
        if line in (b"\r\n", b"\n", b""):
            return headers
        name, _, value = line.decode("iso-8859-1").partition(":")
        key, text = name.strip().lower(), value.strip()
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    raise http.client.HTTPException(f"got more than {MAX_HEADERS} headers")


class FastResponse(http.client.HTTPResponse):
    """``http.client``'s response with its headers read into a :class:`HeaderMap`: the
    rest (status line, chunked or sized body, keep-alive) is ``http.client``'s."""

    def begin(self) -> None:
        if self.headers is not None:
            return
        while True:
            version, status, reason = self._read_status()
            if status != http.client.CONTINUE:
                break
            _read_headers(self.fp)
        self.code = self.status = status
        self.reason = reason.strip()
        if version in ("HTTP/1.0", "HTTP/0.9"):
            self.version = 10
        elif version.startswith("HTTP/1."):
            self.version = 11
        else:
            raise http.client.UnknownProtocol(version)
        headers = _read_headers(self.fp)
        self.headers = self.msg = headers
        self.chunked = (headers.get("transfer-encoding") or "").lower() == "chunked"
        self.chunk_left = None
        self.will_close = self._check_close()
        self.length = self._body_length(status, headers)
        if not self.will_close and not self.chunked and self.length is None:
            self.will_close = True

    def _body_length(self, status: int, headers: HeaderMap) -> int | None:
        """The body's length, as ``http.client`` reads it (``None``: until it ends)."""
        if status in (204, 304) or 100 <= status < 200 or self._method == "HEAD":  # type: ignore[attr-defined]
            return 0
        length = headers.get("content-length")
        if not length or self.chunked:
            return None
        try:
            value = int(length)
        except ValueError:
            return None
        return value if value >= 0 else None


def unsupported_by(http_session: Any, url: str) -> str | None:
    """Why the botocore session's settings for ``url`` cannot be followed here (``None``:
    they can): a proxy for the endpoint, or a client certificate."""
    proxies = getattr(http_session, "_proxy_config", None)
    if proxies is None or not hasattr(http_session, "_verify"):
        return "its HTTP session is not botocore's URLLib3Session"
    if proxies.proxy_url_for(url):
        return "requests to the endpoint go through a proxy"
    if getattr(http_session, "_cert_file", None):
        return "it presents a client certificate"
    return None


class KeepAlive:
    """A pool of keep-alive connections to one endpoint, shared by threads; at most
    ``size`` are kept idle (more may be open at once, as urllib3 allows)."""

    def __init__(self, url: str, http_session: Any) -> None:
        parts = urlsplit(url)
        self.url = url
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._https else 80)
        timeout = http_session._timeout
        self._connect_timeout = getattr(timeout, "connect_timeout", None) or 60
        self._read_timeout = getattr(timeout, "read_timeout", None) or 60
        self._size = int(http_session._max_pool_connections)
        self._socket_options = list(http_session._socket_options or [])
        self._context: ssl.SSLContext | None = None
        if self._https:
            context = create_urllib3_context()
            verify = http_session._verify
            if verify is False:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            else:
                context.load_verify_locations(cafile=get_cert_path(verify))
            self._context = context
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        weakref.finalize(self, _close_all, self._idle)  # an app dropped closes its sockets

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> Response:
        connection = self._take()
        try:
            connection.request("POST", path, body, headers)
            answer = connection.getresponse()
            content = answer.read()
        except TimeoutError as exc:
            connection.close()
            raise ReadTimeoutError(endpoint_url=self.url, error=exc) from exc
        except (http.client.HTTPException, OSError) as exc:
            connection.close()
            raise ConnectionClosedError(endpoint_url=self.url, error=exc) from exc
        if answer.will_close:
            connection.close()
        else:
            self._give_back(connection)
        headers_read = {name.lower(): value for name, value in answer.getheaders()}
        return Response(answer.status, headers_read, content)

    def _take(self) -> http.client.HTTPConnection:
        with self._lock:
            while self._idle:
                connection = self._idle.pop()
                if not _dropped(connection):
                    return connection
                connection.close()
        return self._connect()

    def _give_back(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self._size:
                self._idle.append(connection)
                return
        connection.close()

    def _connect(self) -> http.client.HTTPConnection:
        connection: http.client.HTTPConnection
        if self._context is not None:
            connection = http.client.HTTPSConnection(
                self._host, self._port, timeout=self._connect_timeout, context=self._context
            )
        else:
            connection = http.client.HTTPConnection(
                self._host, self._port, timeout=self._connect_timeout
            )
        try:
            connection.connect()
        except TimeoutError as exc:
            connection.close()
            raise ConnectTimeoutError(endpoint_url=self.url, error=exc) from exc
        except OSError as exc:
            connection.close()
            raise EndpointConnectionError(endpoint_url=self.url, error=exc) from exc
        connection.response_class = FastResponse
        assert connection.sock is not None
        for option in self._socket_options:
            connection.sock.setsockopt(*option)
        connection.sock.settimeout(self._read_timeout)
        return connection

    def close(self) -> None:
        with self._lock:
            idle = list(self._idle)
            self._idle.clear()
        _close_all(idle)


def _close_all(connections: list[http.client.HTTPConnection]) -> None:
    for connection in connections:
        connection.close()


def _dropped(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle connection was closed by the server (readable while idle: its
    end of stream, or bytes nobody asked for)."""
    sock: socket.socket | None = connection.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
