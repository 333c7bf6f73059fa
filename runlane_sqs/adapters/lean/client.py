"""The sync lean client: :class:`LeanClient` wraps a botocore client and sends its
:data:`~.protocol.HOT_OPERATIONS` itself, over keep-alive connections of the library's
own (:mod:`.keepalive`), or over the botocore client's HTTP session for an endpoint
behind a proxy or with a client certificate."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from botocore.awsrequest import AWSRequest
from botocore.credentials import RefreshableCredentials
from botocore.exceptions import BotoCoreError

from runlane_sqs.adapters.lean.botocore_internals import (
    client_http_session,
    frozen_credentials,
    handlers_of,
    mandatory_refresh,
    refresh_lock,
)
from runlane_sqs.adapters.lean.keepalive import KeepAlive, unsupported_by
from runlane_sqs.adapters.lean.protocol import (
    HOT_OPERATIONS,
    Call,
    JsonProtocol,
    Response,
    answered_in_place,
    operation_method,
)

Sleep = Callable[[float], None]


class Exchange(Protocol):
    """Sends one signed ``POST`` and reads its whole response."""

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> Response: ...


class BotocoreExchange:
    """An :class:`Exchange` over the botocore client's own HTTP session (for endpoints
    reached through a proxy or with a client certificate)."""

    def __init__(self, url: str, http_session: Any) -> None:
        self._url = url.rstrip("/")
        self._http = http_session

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> Response:
        request = AWSRequest(method="POST", url=self._url + path, data=body, headers=headers)
        answer = self._http.send(request.prepare())
        read = {name.lower(): value for name, value in answer.headers.items()}
        return Response(answer.status_code, read, answer.content)


def refresh_expired(credentials: Any, used: Any) -> bool:
    """Refresh ``credentials`` after a request signed with ``used`` (frozen) was refused
    for expired credentials, unless another thread did already; ``False`` when they do
    not refresh (static keys). botocore refreshes only by their expiry time and has no
    public way to force it: this takes the lock it refreshes under and calls its own
    mandatory refresh (:mod:`.botocore_internals`)."""
    if not isinstance(credentials, RefreshableCredentials):
        return False
    with refresh_lock(credentials):
        if frozen_credentials(credentials) == used:
            mandatory_refresh(credentials)
    return True


class LeanClient:
    """A botocore client whose hot operations are sent lean (:mod:`runlane_sqs.adapters.lean`);
    every other attribute is the botocore client's."""

    def __init__(
        self,
        client: Any,
        credentials: Any,
        *,
        max_attempts: int,
        sleep: Sleep = time.sleep,
    ) -> None:
        self._client = client
        self._credentials = credentials
        self._protocol = JsonProtocol(client, max_attempts=max_attempts)
        self._operations = HOT_OPERATIONS.get(self._protocol.model.service_name, {})
        self._events = client.meta.events
        url = self._protocol.url
        http_session = client_http_session(client)
        self._exchange: Exchange = (
            BotocoreExchange(url, http_session)
            if unsupported_by(http_session, url)
            else KeepAlive(url, http_session)
        )
        self._sleep = sleep

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

    def send(self, operation: str, params: Mapping[str, Any]) -> Any:
        """Send one operation as the botocore client's ``_make_api_call`` does: its
        events around it, retried as botocore's standard mode retries it."""
        call = self._protocol.call(operation)
        events, model, context = self._events, call.model, call.context
        # the events no handler listens to by default are emitted only when one does
        if handlers_of(events, event := call.event("provide-client-params")):
            given = events.emit(event, params=params, model=model, context=context)
            params = next((r for _, r in given if r is not None), params)
        events.emit(
            call.event("before-parameter-build"), params=params, model=model, context=context
        )
        request = call.request(params)
        _, answered = events.emit_until_response(
            call.event("before-call"),
            model=model,
            params=request,
            request_signer=None,
            context=context,
        )
        # a handler may answer in place of the service
        http_response, parsed = answered or self._attempts(call, request)
        if handlers_of(events, event := call.event("after-call")):
            events.emit(
                event, http_response=http_response, parsed=parsed, model=model, context=context
            )
        return call.result(http_response, parsed)

    def _post(self, call: Call, body: bytes, headers: dict[str, str]) -> Response:
        """One attempt's exchange. ``before-send`` handlers, when there are any (moto's
        ``mock_aws``, a test capturing requests), get botocore's prepared request first
        and may answer in place of the service, as they would for the botocore client."""
        event = call.event("before-send")
        if handlers_of(self._events, event):
            prepared = call.prepared(body, headers)
            _, answer = self._events.emit_until_response(event, request=prepared)
            if answer is not None:
                return answered_in_place(answer, answer.content)
        return self._exchange.post("/", body, headers)

    def _attempts(self, call: Call, request: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Send ``request`` until it succeeds or botocore's standard mode gives up."""
        body: bytes = request["body"]
        added: dict[str, str] = request["headers"]
        refreshed = False
        while True:
            credentials = self._credentials.get_frozen_credentials()
            headers = call.signed(body, credentials) | added
            try:
                call.answered(self._post(call, body, headers))
            except BotoCoreError as exc:  # the exchange's: connection errors, timeouts
                call.failed(exc)
            if call.expired and not refreshed and refresh_expired(self._credentials, credentials):
                refreshed = True
                call.again()
                continue
            delay = call.retry_delay()
            if delay is None:
                return call.outcome()
            self._sleep(delay)
