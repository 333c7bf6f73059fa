"""The async lean client: :class:`AsyncLeanClient` wraps an aiobotocore client and sends
its :data:`~.protocol.HOT_OPERATIONS` itself, over keep-alive asyncio streams of its own
(:class:`AsyncKeepAlive`) set up as the aiobotocore client's HTTP session
sets up its connections (CA bundle, timeouts, pool size, keep-alive), or, for an
endpoint behind a proxy or with a client certificate, over that session itself
(:class:`AioExchange`). Failures are raised as the botocore exceptions aiobotocore raises
for them, so botocore's standard retry mode treats them alike."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http.client
import inspect
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from botocore.exceptions import (
    BotoCoreError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
    SSLError,
)

from runlane_sqs.adapters.lean.botocore_internals import (
    client_certificate,
    client_http_session,
    connector_args,
    frozen_credentials,
    handlers_of,
    is_aiohttp_session,
    mandatory_refresh,
    pool_size,
    proxy_config,
    refresh_lock,
    refreshes,
    session_timeout,
    tls_context,
)
from runlane_sqs.adapters.lean.keepalive import (
    MAX_HEADERS,
    Body,
    HeaderMap,
    add_header,
    chunk_size,
    framing,
    request_head,
    status_of,
    too_many_headers,
)
from runlane_sqs.adapters.lean.protocol import (
    HOT_OPERATIONS,
    Call,
    JsonProtocol,
    Response,
    answered_in_place,
    operation_method,
)

AsyncSleep = Callable[[float], Awaitable[Any]]
CLOSE_SECONDS = 1.0
"""How long closing the async pool waits for its connections to close."""
KEEPALIVE_SECONDS = 15.0
"""How long an idle async connection is kept without a ``keepalive_timeout`` set
(aiohttp's own default)."""


@dataclass(frozen=True, slots=True)
class _Sendable:
    """What aiobotocore's HTTP session reads of a prepared request."""

    url: str
    headers: dict[str, str]
    body: bytes
    method: str = "POST"
    stream_output: bool = False


class AsyncExchange(Protocol):
    """Sends one signed ``POST`` and reads its whole response."""

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> Response: ...

    async def close(self) -> None: ...


class AioExchange:
    """An :class:`AsyncExchange` over an aiobotocore client's HTTP session (which raises
    botocore's connection errors, as for the aiobotocore client)."""

    def __init__(self, url: str, http_session: Any) -> None:
        self._url = url.rstrip("/")
        self._http = http_session

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> Response:
        answer = await self._http.send(_Sendable(self._url + path, headers, body))
        read = {name.lower(): value for name, value in answer.headers.items()}
        return Response(answer.status_code, read, await answer.content)

    async def close(self) -> None:
        """Nothing to close: the session is the aiobotocore client's."""


def async_unsupported_by(http_session: Any, url: str) -> str | None:
    """Why the aiobotocore session's settings for ``url`` cannot be followed by an
    :class:`AsyncKeepAlive` (``None``: they can): another HTTP session than
    aiohttp's, a proxy for the endpoint, or a client certificate."""
    proxies = proxy_config(http_session)
    if proxies is None or not is_aiohttp_session(http_session):
        return "its HTTP session is not aiobotocore's AIOHTTPSession"
    if proxies.proxy_url_for(url):
        return "requests to the endpoint go through a proxy"
    if client_certificate(http_session):
        return "it presents a client certificate"
    return None


async def _read_headers_async(reader: asyncio.StreamReader) -> HeaderMap:
    headers = HeaderMap()
    for _ in range(MAX_HEADERS + 1):
        if not add_header(headers, await reader.readline()):
            return headers
    raise too_many_headers()


async def _read_chunked_async(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while size := chunk_size(await reader.readline()):
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)
    await _read_headers_async(reader)
    return b"".join(parts)


async def read_response_async(reader: asyncio.StreamReader) -> tuple[Response, bool]:
    """:func:`~.keepalive.read_response` from an asyncio stream."""
    while True:
        version, status = status_of(await reader.readline())
        headers = await _read_headers_async(reader)
        if status != http.client.CONTINUE:
            break
    body, length, will_close = framing(version, status, headers)
    if body is Body.SIZED:
        content = await reader.readexactly(length)
    elif body is Body.CHUNKED:
        content = await _read_chunked_async(reader)
    elif body is Body.UNTIL_CLOSE:
        content = await reader.read()
    else:
        content = b""
    return Response(status, headers, content), will_close


@dataclasses.dataclass(slots=True)
class Stream:
    """One kept-alive connection of the event loop, and when it was last given back."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    loop: asyncio.AbstractEventLoop
    idle_since: float = 0.0

    def usable(self, loop: asyncio.AbstractEventLoop, now: float, keepalive: float) -> bool:
        """Opened in ``loop``, still open (the server has not closed it) and not idle too
        long (the server may be about to)."""
        return (
            self.loop is loop
            and not self.writer.is_closing()
            and not self.reader.at_eof()
            and now - self.idle_since < keepalive
        )

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # its event loop is closed: nothing to do
            self.writer.close()


class AsyncKeepAlive:
    """:class:`~.keepalive.KeepAlive` for the event loop: keep-alive asyncio streams to one
    endpoint, set up from an aiobotocore ``AIOHTTPSession``: its CA bundle, its connect and read
    timeouts (the read timeout bounds the whole answer), its pool size, and its
    connector's ``keepalive_timeout`` and ``force_close``. asyncio's transports set
    ``TCP_NODELAY`` themselves."""

    def __init__(self, url: str, http_session: Any) -> None:
        parts = urlsplit(url)
        self.url = url
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._host_header = f"Host: {parts.netloc}"
        timeout = session_timeout(http_session)
        self._connect_timeout = timeout.sock_connect or timeout.connect or 60
        self._read_timeout = timeout.sock_read or timeout.total or 60
        self._size = pool_size(http_session)
        connector = connector_args(http_session)
        keepalive = connector.get("keepalive_timeout")
        self._keepalive = KEEPALIVE_SECONDS if keepalive is None else float(keepalive)
        self._force_close = bool(connector.get("force_close"))
        self._context = tls_context(http_session) if parts.scheme == "https" else None
        self._idle: list[Stream] = []

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> Response:
        """:meth:`~.keepalive.KeepAlive.post` on the event loop."""
        head = request_head(path, headers, self._host_header, len(body))
        stream = await self._take()
        try:
            async with asyncio.timeout(self._read_timeout):
                stream.writer.write(head + body)
                response, will_close = await read_response_async(stream.reader)
        except TimeoutError as exc:
            stream.close()
            raise ReadTimeoutError(endpoint_url=self.url, error=exc) from exc
        except (http.client.HTTPException, OSError, EOFError, ValueError) as exc:
            stream.close()  # EOFError: cut mid-body; ValueError: a line too long
            raise ConnectionClosedError(endpoint_url=self.url, error=exc) from exc
        except BaseException:  # cancelled mid-answer: the rest of it would be read next
            stream.close()
            raise
        if will_close or self._force_close or len(self._idle) >= self._size:
            stream.close()
        else:
            stream.idle_since = time.monotonic()
            self._idle.append(stream)
        return response

    async def _take(self) -> Stream:
        loop, now = asyncio.get_running_loop(), time.monotonic()
        while self._idle:
            stream = self._idle.pop()
            if stream.usable(loop, now, self._keepalive):
                return stream
            stream.close()
        try:
            async with asyncio.timeout(self._connect_timeout):
                reader, writer = await asyncio.open_connection(
                    self._host,
                    self._port,
                    ssl=self._context,
                    server_hostname=self._host if self._context is not None else None,
                )
        except TimeoutError as exc:
            raise ConnectTimeoutError(endpoint_url=self.url, error=exc) from exc
        except ssl.SSLError as exc:
            raise SSLError(endpoint_url=self.url, error=exc) from exc
        except OSError as exc:
            raise EndpointConnectionError(endpoint_url=self.url, error=exc) from exc
        return Stream(reader, writer, loop)

    async def close(self) -> None:
        """Close the idle connections, waiting a little for TLS ones to say goodbye."""
        idle, self._idle = self._idle, []
        loop = asyncio.get_running_loop()
        for stream in idle:
            stream.close()
        closing = [stream.writer.wait_closed() for stream in idle if stream.loop is loop]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_SECONDS):
                await asyncio.gather(*closing, return_exceptions=True)


async def refresh_expired_async(credentials: Any, used: Any) -> bool:
    """:func:`runlane_sqs.adapters.lean.client.refresh_expired` for aiobotocore's credentials,
    which refresh under an ``asyncio`` lock."""
    if not refreshes(credentials):
        return False
    async with refresh_lock(credentials):
        if frozen_credentials(credentials) == used:
            await mandatory_refresh(credentials)
    return True


class AsyncLeanClient:
    """An aiobotocore client whose hot operations are sent lean
    (:mod:`runlane_sqs.adapters.lean`); every other attribute is the aiobotocore client's."""

    def __init__(
        self,
        client: Any,
        credentials: Any,
        *,
        max_attempts: int,
        sleep: AsyncSleep = asyncio.sleep,
    ) -> None:
        self._client = client
        self._credentials = credentials
        self._protocol = JsonProtocol(client, max_attempts=max_attempts)
        self._operations = HOT_OPERATIONS.get(self._protocol.model.service_name, {})
        self._events = client.meta.events
        url, http_session = self._protocol.url, client_http_session(client)
        self._exchange: AsyncExchange = (
            AioExchange(url, http_session)
            if async_unsupported_by(http_session, url)
            else AsyncKeepAlive(url, http_session)
        )
        self._sleep = sleep

    async def close_connections(self) -> None:
        """Close the connections of the lean requests (the aiobotocore client's own
        close with it)."""
        await self._exchange.close()

    @property
    def botocore_client(self) -> Any:
        return self._client

    def __getattr__(self, name: str) -> Any:
        operation = self._operations.get(name)
        if operation is None:
            return getattr(self._client, name)
        method = operation_method(self.send, operation)
        self.__dict__[name] = method  # found without __getattr__ from now on
        return method

    async def send(self, operation: str, params: Mapping[str, Any]) -> Any:
        """Send one operation as aiobotocore's ``_make_api_call`` does (see
        :meth:`runlane_sqs.adapters.lean.client.LeanClient.send`)."""
        call = self._protocol.call(operation)
        events, model, context = self._events, call.model, call.context
        # the events no handler listens to by default are emitted only when one does
        if handlers_of(events, event := call.event("provide-client-params")):
            given = await events.emit(event, params=params, model=model, context=context)
            params = next((r for _, r in given if r is not None), params)
        await events.emit(
            call.event("before-parameter-build"), params=params, model=model, context=context
        )
        request = call.request(params)
        _, answered = await events.emit_until_response(
            call.event("before-call"),
            model=model,
            params=request,
            request_signer=None,
            context=context,
        )
        # a handler may answer in place of the service
        http_response, parsed = answered or await self._attempts(call, request)
        if handlers_of(events, event := call.event("after-call")):
            await events.emit(
                event, http_response=http_response, parsed=parsed, model=model, context=context
            )
        return call.result(http_response, parsed)

    async def _post(self, call: Call, body: bytes, headers: dict[str, str]) -> Response:
        """One attempt's exchange, ``before-send`` handlers first, as the sync
        :class:`~runlane_sqs.adapters.lean.client.LeanClient` sends it."""
        event = call.event("before-send")
        if handlers_of(self._events, event):
            prepared = call.prepared(body, headers)
            _, answer = await self._events.emit_until_response(event, request=prepared)
            if answer is not None:
                content = answer.content
                if inspect.isawaitable(content):  # aiobotocore's responses read lazily
                    content = await content
                return answered_in_place(answer, content)
        return await self._exchange.post("/", body, headers)

    async def _attempts(self, call: Call, request: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Send ``request`` until it succeeds or botocore's standard mode gives up."""
        body: bytes = request["body"]
        added: dict[str, str] = request["headers"]
        refreshed = False
        while True:
            credentials = await self._credentials.get_frozen_credentials()
            headers = call.signed(body, credentials) | added
            try:
                call.answered(await self._post(call, body, headers))
            except BotoCoreError as exc:  # the session's: connection errors, timeouts
                call.failed(exc)
            if (
                call.expired
                and not refreshed
                and await refresh_expired_async(self._credentials, credentials)
            ):
                refreshed = True
                call.again()
                continue
            delay = call.retry_delay()
            if delay is None:
                return call.outcome()
            await self._sleep(delay)
