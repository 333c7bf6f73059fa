"""The sync lean client's HTTP exchange: keep-alive HTTP/1.1 connections to one endpoint
(the async worker's, on asyncio streams, is in :mod:`.aio` and reads its answers with the
same rules, :func:`framing` and the line readers here).

Each request goes out in one write and its answer is read from the connection's own
buffered reader: the status line, the headers by lower-case name, the body by its length
or in chunks. That is all the JSON protocol needs of HTTP, at a fraction of the CPU of
``http.client``, which builds a header object and a response object per request.

It takes its settings from the botocore client's own HTTP session (``URLLib3Session``):
the CA bundle it verifies TLS with, its connect and read timeouts, its pool size and its
socket options (``TCP_NODELAY``). An endpoint botocore would reach through a proxy, or
with a client certificate, is not handled here (:func:`unsupported_by`): the lean client
then sends over botocore's session itself. Failures are raised as the botocore
exceptions its session raises (``EndpointConnectionError``, ``ConnectTimeoutError``,
``SSLError``, ``ReadTimeoutError``, ``ConnectionClosedError``), so botocore's standard
retry mode treats them alike.
"""

from __future__ import annotations

import enum
import http.client
import select
import socket
import ssl
import threading
import weakref
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
    SSLError,
)

from runlane_sqs.adapters.lean.botocore_internals import (
    client_certificate,
    is_urllib3_session,
    pool_size,
    proxy_config,
    session_timeout,
    socket_options,
    tls_context,
)
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


def add_header(headers: HeaderMap, line: bytes) -> bool:
    """Add one header line to ``headers``; False at the blank line that ends them."""
    if len(line) > MAX_HEADER_LINE:
        raise http.client.LineTooLong("header line")
    if line in (b"\r\n", b"\n", b""):
        return False
    name, _, value = line.decode("iso-8859-1").partition(":")
    key, text = name.strip().lower(), value.strip()
    headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return True


def too_many_headers() -> http.client.HTTPException:
    return http.client.HTTPException(f"got more than {MAX_HEADERS} headers")


def status_of(line: bytes) -> tuple[str, int]:
    """The HTTP version and status code of a status line."""
    if not line:
        raise http.client.RemoteDisconnected("the server closed the connection")
    version, _, rest = line.decode("iso-8859-1").partition(" ")
    code = rest.strip().partition(" ")[0]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise http.client.BadStatusLine(line.decode("iso-8859-1").strip())
    return version, int(code)


def chunk_size(line: bytes) -> int:
    try:
        return int(line.split(b";", 1)[0], 16)
    except ValueError:
        raise http.client.IncompleteRead(b"") from None


class Body(enum.Enum):
    """How a response's body is delimited."""

    NONE = "none"
    SIZED = "sized"
    CHUNKED = "chunked"
    UNTIL_CLOSE = "until close"


def framing(version: str, status: int, headers: HeaderMap) -> tuple[Body, int, bool]:
    """How the body of a response with this status line and ``headers`` is read (its
    length when sized), and whether the server closes the connection after it."""
    connection = (headers.get("connection") or "").lower()
    will_close = "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection)
    length = headers.get("content-length")
    if status in (204, 304) or status < 200:
        return Body.NONE, 0, will_close
    if (headers.get("transfer-encoding") or "").lower() == "chunked":
        return Body.CHUNKED, 0, will_close
    if length is not None and length.isdigit():
        return Body.SIZED, int(length), will_close
    return Body.UNTIL_CLOSE, 0, True


def request_head(path: str, headers: Mapping[str, str], host_header: str, length: int) -> bytes:
    """A request's line and headers (``Host`` added unless given, then ``Accept-Encoding:
    identity`` as ``http.client`` sends it, and ``Content-Length``), refused with
    ``ValueError`` if a header would break a line (as ``http.client`` refuses it)."""
    lines = [f"POST {path} HTTP/1.1"]
    if "Host" not in headers:
        lines.append(host_header)
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines += ["Accept-Encoding: identity", f"Content-Length: {length}", "", ""]
    head = "\r\n".join(lines)
    breaks = len(lines) - 1
    if head.count("\n") != breaks or head.count("\r") != breaks:
        raise ValueError(f"a header of the request holds a line break: {dict(headers)!r}")
    return head.encode("iso-8859-1")


# --- sync: a blocking socket and its buffered reader ---------------------------------


def _read_headers(rfile: Any) -> HeaderMap:
    headers = HeaderMap()
    for _ in range(MAX_HEADERS + 1):
        if not add_header(headers, rfile.readline(MAX_HEADER_LINE + 1)):
            return headers
    raise too_many_headers()


def _read_exact(rfile: Any, size: int) -> bytes:
    data: bytes = rfile.read(size)
    if len(data) < size:
        raise http.client.IncompleteRead(data, size - len(data))
    return data


def _read_chunked(rfile: Any) -> bytes:
    """A chunked body: sized chunks up to the last (size 0), then the trailer lines."""
    parts: list[bytes] = []
    while size := chunk_size(rfile.readline(MAX_HEADER_LINE + 1)):
        parts.append(_read_exact(rfile, size))
        _read_exact(rfile, 2)  # the chunk's CRLF
    _read_headers(rfile)  # trailers, read past and dropped as botocore drops them
    return b"".join(parts)


def read_response(rfile: Any) -> tuple[Response, bool]:
    """One response from ``rfile`` (the connection's buffered reader), and whether the
    server closes the connection after it. The body is read whole: by its length, in
    chunks, or up to the end of the stream when it has neither."""
    while True:
        version, status = status_of(rfile.readline(MAX_HEADER_LINE + 1))
        headers = _read_headers(rfile)
        if status != http.client.CONTINUE:
            break
    body, length, will_close = framing(version, status, headers)
    if body is Body.SIZED:
        content = _read_exact(rfile, length)
    elif body is Body.CHUNKED:
        content = _read_chunked(rfile)
    elif body is Body.UNTIL_CLOSE:
        content = rfile.read()
    else:
        content = b""
    return Response(status, headers, content), will_close


class Connection:
    """One kept-alive connection: its socket, and the buffered reader of its responses
    (kept for the connection's life, so nothing is set up per request)."""

    __slots__ = ("rfile", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.rfile = sock.makefile("rb")

    def close(self) -> None:
        self.rfile.close()
        self.sock.close()


def unsupported_by(http_session: Any, url: str) -> str | None:
    """Why the botocore session's settings for ``url`` cannot be followed here (``None``:
    they can): a proxy for the endpoint, or a client certificate."""
    proxies = proxy_config(http_session)
    if proxies is None or not is_urllib3_session(http_session):
        return "its HTTP session is not botocore's URLLib3Session"
    if proxies.proxy_url_for(url):
        return "requests to the endpoint go through a proxy"
    if client_certificate(http_session):
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
        self._host_header = f"Host: {parts.netloc}"
        timeout = session_timeout(http_session)
        self._connect_timeout = getattr(timeout, "connect_timeout", None) or 60
        self._read_timeout = getattr(timeout, "read_timeout", None) or 60
        self._size = pool_size(http_session)
        self._socket_options = socket_options(http_session)
        self._context = tls_context(http_session) if self._https else None
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        weakref.finalize(self, _close_all, self._idle)  # an app dropped closes its sockets

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> Response:
        """Send one request and read its answer. The request goes out in one write: its
        line, its headers (``Host`` and ``Content-Length`` added, ``Accept-Encoding:
        identity`` as ``http.client`` sends it) and its body."""
        head = request_head(path, headers, self._host_header, len(body))
        connection = self._take()
        try:
            connection.sock.sendall(head + body)
            response, will_close = read_response(connection.rfile)
        except TimeoutError as exc:
            connection.close()
            raise ReadTimeoutError(endpoint_url=self.url, error=exc) from exc
        except (http.client.HTTPException, OSError) as exc:
            connection.close()
            raise ConnectionClosedError(endpoint_url=self.url, error=exc) from exc
        except BaseException:  # interrupted mid-answer: the rest of it would be read next
            connection.close()
            raise
        if will_close:
            connection.close()
        else:
            self._give_back(connection)
        return response

    def _take(self) -> Connection:
        with self._lock:
            while self._idle:
                connection = self._idle.pop()
                if not _dropped(connection):
                    return connection
                connection.close()
        return self._connect()

    def _give_back(self, connection: Connection) -> None:
        with self._lock:
            if len(self._idle) < self._size:
                self._idle.append(connection)
                return
        connection.close()

    def _connect(self) -> Connection:
        try:
            sock = socket.create_connection((self._host, self._port), self._connect_timeout)
        except TimeoutError as exc:
            raise ConnectTimeoutError(endpoint_url=self.url, error=exc) from exc
        except OSError as exc:
            raise EndpointConnectionError(endpoint_url=self.url, error=exc) from exc
        try:
            for option in self._socket_options:
                sock.setsockopt(*option)
            if self._context is not None:
                sock = self._context.wrap_socket(sock, server_hostname=self._host)
        except TimeoutError as exc:
            sock.close()
            raise ConnectTimeoutError(endpoint_url=self.url, error=exc) from exc
        except ssl.SSLError as exc:  # a certificate refused, as botocore raises it
            sock.close()
            raise SSLError(endpoint_url=self.url, error=exc) from exc
        except OSError as exc:
            sock.close()
            raise EndpointConnectionError(endpoint_url=self.url, error=exc) from exc
        sock.settimeout(self._read_timeout)
        return Connection(sock)

    def close(self) -> None:
        with self._lock:
            idle = list(self._idle)
            self._idle.clear()
        _close_all(idle)


def _close_all(connections: list[Connection]) -> None:
    for connection in connections:
        connection.close()


def _dropped(connection: Connection) -> bool:
    """Whether an idle connection was closed by the server (readable while idle: its
    end of stream, or bytes nobody asked for)."""
    try:
        readable, _, _ = select.select([connection.sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
