"""The lean AWS client: the per-run requests of DynamoDB and SQS without botocore's client
machinery, and with botocore's signing, credentials, retry rules and events.

Both services speak AWS's JSON protocol, where a request is the operation's parameters as
JSON and a response is its result as JSON. :class:`LeanClient` wraps the app's botocore
client: the operations it is given (:data:`HOT_OPERATIONS`) it sends itself, the way the
botocore client would (the same URL, body bytes and signed headers, which
``tests/contract/test_lean_parity.py`` holds it to); every other attribute is the
botocore client's.

- **Signing and credentials**: botocore's ``SigV4Auth`` with the frozen credentials of
  the app's session, so every provider keeps working (environment, profiles, ECS task
  role, IMDS, web identity) and refreshes as it does for botocore.
- **HTTP**: keep-alive ``http.client`` connections of the library's own
  (:mod:`runlane_sqs.adapters.lean_http`), set up as the botocore client's HTTP session
  is (CA bundle, timeouts, pool size, ``TCP_NODELAY``); through a proxy or with a
  client certificate, the botocore client's session itself.
- **Responses and errors**: parsed as botocore's JSON parser does for these operations
  (blobs decoded, ``ResponseMetadata`` added); an error is the botocore client's own
  ``ClientError`` class for its code, with the same ``response`` (``Error``, the
  modeled fields such as a refused condition's ``Item``, ``ResponseMetadata``).
- **Retries**: botocore's standard retry mode (its retry conditions, exponential
  backoff with jitter and retry quota), each attempt signed anew.
- **Events**: the botocore client's own ``provide-client-params``,
  ``before-parameter-build``, ``before-call`` and ``after-call`` events, with the
  arguments botocore gives them, so what hooks them (request counters, tracing, a
  handler that answers in place of the service) sees these requests too; headers a
  ``before-call`` handler adds (a Lambda trace id) are sent unsigned, as botocore sends
  them.

What it cannot send the way botocore would (see :func:`lean_unsupported`), it leaves to
botocore.
"""

from __future__ import annotations

import base64
import http.client
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, cast
from urllib.parse import urlsplit

from botocore.auth import SIGNED_HEADERS_BLACKLIST, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import BotoCoreError
from botocore.retries import quota, standard

from runlane_sqs.adapters.lean_http import KeepAlive, Response, unsupported_by

HOT_OPERATIONS: Final[Mapping[str, Mapping[str, str]]] = {
    "dynamodb": {
        "get_item": "GetItem",
        "put_item": "PutItem",
        "update_item": "UpdateItem",
    },
    "sqs": {
        "receive_message": "ReceiveMessage",
        "delete_message_batch": "DeleteMessageBatch",
        "change_message_visibility": "ChangeMessageVisibility",
        "change_message_visibility_batch": "ChangeMessageVisibilityBatch",
        "send_message": "SendMessage",
        "send_message_batch": "SendMessageBatch",
    },
}
"""The operations a worker and a trigger send per run, by service: the ones sent lean."""

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


class _SignedHeaders(dict[str, str]):
    """The headers to sign, lower-cased, each once: what ``SigV4Auth`` reads of them
    (its own map is an ``email`` message, built twice per request)."""

    def get_all(self, name: str) -> list[str]:
        return [self[name]]


class JsonSigV4(SigV4Auth):
    """botocore's ``SigV4Auth``, given the headers to sign as a plain map (the request
    carries its ``Host``, so the signer does not parse the URL for it twice)."""

    def headers_to_sign(self, request: Any) -> Any:
        return _SignedHeaders(
            (name.lower(), value)
            for name, value in request.headers.items()
            if name.lower() not in SIGNED_HEADERS_BLACKLIST
        )


@dataclass(slots=True)
class _Signable:
    """What ``SigV4Auth.add_auth`` reads and writes of a request, without botocore's
    ``AWSRequest`` (whose headers are an ``email`` message): a JSON ``POST``."""

    url: str
    headers: dict[str, str]
    body: bytes
    method: str = "POST"
    params: dict[str, str] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)


def lean_unsupported(client: Any) -> str | None:
    """Why ``client`` cannot be sent lean (``None``: it can): a protocol other than JSON,
    an endpoint botocore resolves per request (account-based endpoints, FIPS or
    dual-stack), or no HTTP session to borrow."""
    meta = client.meta
    model = meta.service_model
    if model.protocol != "json":
        return f"the {model.service_name} client speaks {model.protocol}, not json"
    config = meta.config
    if getattr(config, "use_fips_endpoint", None) or getattr(
        config, "use_dualstack_endpoint", None
    ):
        return "FIPS or dual-stack endpoints are resolved by botocore per request"
    if getattr(config, "account_id_endpoint_mode", None) == "required":
        return "account-based endpoints are resolved by botocore per request"
    if getattr(getattr(client, "_endpoint", None), "http_session", None) is None:
        return "the botocore client has no HTTP session to share"
    return None


def _blob(value: Any) -> Any:
    """``json.dumps``' fallback: bytes as base64 text, as botocore serialises blobs."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _host(url: str) -> str:
    """The ``Host`` header of ``url`` as botocore's signer computes it: the network
    location, without a scheme's default port."""
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    if parts.port is not None and parts.port == default:
        return parts.netloc.rsplit(":", 1)[0]
    return parts.netloc


BLOB_KEYS: Final = frozenset({"B", "BinaryValue"})
BLOB_LIST_KEYS: Final = frozenset({"BS", "BinaryListValues"})


def _decode_blobs(value: Any) -> Any:
    """Blobs of a parsed response as bytes: a DynamoDB attribute value's ``B`` and
    ``BS``, an SQS message attribute's ``BinaryValue`` and ``BinaryListValues``."""
    if isinstance(value, list):
        return [_decode_blobs(member) for member in value]
    if not isinstance(value, dict):
        return value
    decoded: dict[str, Any] = {}
    for key, member in value.items():
        if key in BLOB_KEYS and isinstance(member, str):
            decoded[key] = base64.b64decode(member)
        elif key in BLOB_LIST_KEYS and isinstance(member, list):
            decoded[key] = [base64.b64decode(m) if isinstance(m, str) else m for m in member]
        else:
            decoded[key] = _decode_blobs(member)
    return decoded


BLOB_MARKERS: Final = (b'"B"', b'"BS"', b'"BinaryValue"', b'"BinaryListValues"')
ERROR_STATUS: Final = 301
"""botocore's parser reads a response with this status or above as an error."""


class LeanClient:
    """A botocore client whose :data:`HOT_OPERATIONS` are sent lean (module docstring);
    every other attribute is the botocore client's."""

    def __init__(
        self,
        client: Any,
        credentials: Any,
        *,
        max_attempts: int,
        sleep: Sleep = time.sleep,
    ) -> None:
        meta = client.meta
        model = meta.service_model
        self._client = client
        self._credentials = credentials
        self._operations = HOT_OPERATIONS.get(model.service_name, {})
        self._model = model
        self._url = meta.endpoint_url.rstrip("/") + "/"
        self._signer_scope = (model.signing_name, meta.region_name)
        self._target = model.metadata["targetPrefix"]
        self._headers = {
            "Host": _host(self._url),
            "Content-Type": f"application/x-amz-json-{model.metadata['jsonVersion']}",
            **({"x-amzn-query-mode": "true"} if model.is_query_compatible else {}),
            "User-Agent": meta.config.user_agent or "",
        }
        http_session = client._endpoint.http_session
        self._exchange: Exchange = (
            BotocoreExchange(self._url, http_session)
            if unsupported_by(http_session, self._url)
            else KeepAlive(self._url, http_session)
        )
        self._events = meta.events
        self._service_id = model.service_id.hyphenize()
        self._config = meta.config
        self._max_attempts = max_attempts
        self._retryable = standard.StandardRetryConditions(max_attempts=max_attempts)
        self._backoff = standard.ExponentialBackoff()
        self._quota = standard.RetryQuotaChecker(quota.RetryQuota())
        self._sleep = sleep

    @property
    def botocore_client(self) -> Any:
        return self._client

    def __getattr__(self, name: str) -> Any:
        operation = self._operations.get(name)
        if operation is None:
            return getattr(self._client, name)
        return lambda **params: self.send(operation, params)

    def send(self, operation: str, params: Mapping[str, Any]) -> Any:
        """Send one operation as the botocore client's ``_make_api_call`` does: its
        events around it, retried as botocore's standard mode retries it."""
        operation_model = self._model.operation_model(operation)
        context: dict[str, Any] = {
            "client_region": self._signer_scope[1],
            "client_config": self._config,
            "has_streaming_input": False,
        }
        event = f"{self._service_id}.{operation}"
        given = self._events.emit(
            f"provide-client-params.{event}", params=params, model=operation_model, context=context
        )
        params = next((r for _, r in given if r is not None), params)
        self._events.emit(
            f"before-parameter-build.{event}", params=params, model=operation_model, context=context
        )
        request = {
            "url_path": "/",
            "query_string": "",
            "method": "POST",
            "headers": {},
            "body": json.dumps(params, default=_blob).encode(),
            "url": self._url,
            "context": context,
        }
        _, answered = self._events.emit_until_response(
            f"before-call.{event}",
            model=operation_model,
            params=request,
            request_signer=None,
            context=context,
        )
        if answered is not None:  # a handler answered in place of the service
            http_response, parsed = answered
        else:
            http_response, parsed = self._attempts(operation, operation_model, request, context)
        self._events.emit(
            f"after-call.{event}",
            http_response=http_response,
            parsed=parsed,
            model=operation_model,
            context=context,
        )
        if http_response.status_code >= ERROR_STATUS:
            error = parsed["Error"]
            code = error.get("QueryErrorCode") or error["Code"]
            raise self._client.exceptions.from_code(code)(parsed, operation)
        return parsed

    def _attempts(
        self, operation: str, operation_model: Any, request: dict[str, Any], context: Any
    ) -> tuple[Response, dict[str, Any]]:
        """Send ``request`` until it succeeds or botocore's standard mode gives up;
        returns the last response, parsed (a connection error that outlasts the
        attempts is raised)."""
        body: bytes = request["body"]
        added: dict[str, str] = request["headers"]  # by before-call handlers: unsigned
        context["retries"] = {"invocation-id": str(uuid.uuid4())}
        attempt = 1
        while True:
            context["retries"]["attempt"] = attempt
            parsed: dict[str, Any] | None = None
            http_response: Any = None
            caught: Exception | None = None
            try:
                headers = self._signed(operation, body, context) | added
                http_response = self._exchange.post("/", body, headers)
                parsed = self._parse(http_response)
            except BotoCoreError as exc:  # the exchange's: connection errors, timeouts
                caught = exc  # retried if botocore's standard mode retries it
            retry = standard.RetryContext(
                attempt_number=attempt,
                operation_model=operation_model,
                parsed_response=parsed,
                http_response=http_response,
                caught_exception=caught,
                request_context=context,
            )
            if self._retryable.is_retryable(retry) and self._quota.acquire_retry_quota(retry):
                self._sleep(self._backoff.delay_amount(retry))
                attempt += 1
                continue
            break
        # botocore calls it with the request's context dict (its after-call event)
        self._quota.release_retry_quota(context, http_response)
        if caught is not None:
            raise caught
        assert parsed is not None
        metadata = parsed["ResponseMetadata"]
        metadata |= retry.get_retry_metadata()
        metadata["RetryAttempts"] = attempt - 1
        return http_response, parsed

    def _signed(self, operation: str, body: bytes, context: dict[str, Any]) -> dict[str, str]:
        """The headers of one attempt, signed as botocore signs them."""
        headers = {"X-Amz-Target": f"{self._target}.{operation}", **self._headers}
        request = _Signable(self._url, headers, body)
        name, region = self._signer_scope
        signer = JsonSigV4(self._credentials.get_frozen_credentials(), name, region)
        signer.add_auth(cast(AWSRequest, request))  # reads and writes only what it has
        retries = context["retries"]  # added after signing, as botocore adds them
        headers["amz-sdk-invocation-id"] = retries["invocation-id"]
        headers["amz-sdk-request"] = (
            f"attempt={retries['attempt']}"
            if retries["attempt"] == 1
            else f"attempt={retries['attempt']}; max={self._max_attempts}"
        )
        return headers

    def _parse(self, response: Response) -> dict[str, Any]:
        """A response as botocore's JSON parser gives it."""
        headers = response.headers
        content = response.content
        try:
            parsed: dict[str, Any] = json.loads(content) if content else {}
        except ValueError:
            parsed = {"message": content.decode("utf-8", "replace")}
        if not isinstance(parsed, dict):
            parsed = {"message": str(parsed)}
        if any(marker in content for marker in BLOB_MARKERS):
            parsed = _decode_blobs(parsed)
        status = response.status_code
        # a proxy's or load balancer's page rather than the service's answer
        generic = status >= 500 and (not content.strip() or content.strip().startswith(b"<html>"))
        if generic:
            parsed = {
                "Error": {"Code": str(status), "Message": http.client.responses.get(status, "")}
            }
        elif status >= ERROR_STATUS:
            parsed = self._error(parsed, status, headers)
        metadata: dict[str, Any] = {}
        if "x-amzn-requestid" in headers and not generic:
            metadata["RequestId"] = headers["x-amzn-requestid"]
        metadata |= {"HTTPStatusCode": response.status_code, "HTTPHeaders": headers}
        parsed["ResponseMetadata"] = metadata
        return parsed

    def _error(
        self, body: dict[str, Any], status: int, headers: Mapping[str, str]
    ) -> dict[str, Any]:
        """An error body as botocore's JSON parser reads it: ``Error`` with the code (from
        ``__type``, or SQS's query-compatible header) and message, then the fields of
        the code's modeled error shape (a refused condition's ``Item``, ...)."""
        error = {"Message": body.get("message", body.get("Message", "")), "Code": ""}
        code = str(body.get("__type", status))
        code = code.split(":", 1)[0].rsplit("#", 1)[-1]
        query_error = headers.get("x-amzn-query-error")
        if query_error is not None:
            parts = query_error.split(";")
            if len(parts) == 2 and parts[0]:
                error |= {"QueryErrorCode": code, "Type": parts[1]}
                code = parts[0]
        error["Code"] = code
        parsed: dict[str, Any] = {"Error": error}
        shape = self._model.shape_for_error_code(code)
        for name, member in (shape.members if shape is not None else {}).items():
            wire_name = member.serialization.get("name", name)
            if body.get(wire_name) is not None:
                parsed[name] = body[wire_name]
        return parsed
