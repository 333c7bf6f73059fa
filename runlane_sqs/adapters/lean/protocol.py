"""AWS's JSON protocol for the lean clients, without I/O: a request's body and signed
headers, a response parsed as botocore parses it, and the retry rules of botocore's
standard mode. The sync and async clients (:mod:`.client`, :mod:`.aio`) only send and wait.

Both services speak AWS's JSON protocol, where a request is the operation's parameters as
JSON and a response is its result as JSON.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from botocore.awsrequest import AWSRequest
from botocore.exceptions import BotoCoreError

from runlane_sqs.adapters.lean.botocore_internals import (
    client_http_session,
    release_retry_quota,
    retry_context,
    retry_delay,
    retry_metadata,
    sign_post,
    standard_retries,
)

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

EXPIRED_CREDENTIALS: Final = frozenset({"ExpiredToken", "ExpiredTokenException"})
"""The error codes of a request signed with credentials that have expired (SQS's, then
DynamoDB's): the credentials are refreshed and the request signed again, once."""

ERROR_STATUS: Final = 301
"""botocore's parser reads a response with this status or above as an error."""


@dataclass(frozen=True, slots=True)
class Response:
    """What the lean clients read of an HTTP response."""

    status_code: int
    headers: dict[str, str]
    """Names in lower case."""
    content: bytes


class SigningKeys:
    """SigV4's signing key of one client (its region and service): four HMACs of the
    secret key and the day, the same for every request of the day, so derived again
    only when the secret or the day changes."""

    def __init__(self, service: str, region: str) -> None:
        self._scope = (region, service, "aws4_request")
        self._last: tuple[str, str, bytes] | None = None  # one attribute: threads share it

    def key(self, secret: str, day: str) -> bytes:
        last = self._last
        if last is not None and last[0] == secret and last[1] == day:
            return last[2]
        key = hmac.new(f"AWS4{secret}".encode(), day.encode(), hashlib.sha256).digest()
        for part in self._scope:
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        self._last = (secret, day, key)
        return key


def operation_method(send: Callable[[str, Any], Any], operation: str) -> Callable[..., Any]:
    """``send`` as the client method of ``operation``: called with the operation's
    parameters as keywords, as a botocore client's methods are."""

    def method(**params: Any) -> Any:
        return send(operation, params)

    return method


def answered_in_place(answer: Any, content: bytes) -> Response:
    """What a ``before-send`` handler answered (botocore's ``AWSResponse``), read."""
    headers = {name.lower(): value for name, value in answer.headers.items()}
    return Response(answer.status_code, headers, content)


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
    if client_http_session(client) is None:
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
BLOB_MARKERS: Final = (b'"B"', b'"BS"', b'"BinaryValue"', b'"BinaryListValues"')


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


class JsonProtocol:
    """The JSON protocol of one botocore client (its endpoint, signing scope, model and
    retry settings), shared by every call the lean client sends for it."""

    def __init__(self, client: Any, *, max_attempts: int) -> None:
        meta = client.meta
        model = meta.service_model
        self.client = client
        self.model = model
        self.url = meta.endpoint_url.rstrip("/") + "/"
        self.region = meta.region_name
        self.config = meta.config
        self.service_id = model.service_id.hyphenize()
        self.max_attempts = max_attempts
        self._signing_name = model.signing_name
        self._keys = SigningKeys(self._signing_name, self.region)
        self._target = model.metadata["targetPrefix"]
        self._headers = {
            "Host": _host(self.url),
            "Content-Type": f"application/x-amz-json-{model.metadata['jsonVersion']}",
            **({"x-amzn-query-mode": "true"} if model.is_query_compatible else {}),
            "User-Agent": meta.config.user_agent or "",
        }
        self.retries = standard_retries(max_attempts)

    def call(self, operation: str) -> Call:
        """A new call of ``operation`` (its API name, ``GetItem``)."""
        return Call(self, operation)

    def signed(self, operation: str, body: bytes, credentials: Any) -> dict[str, str]:
        """The headers of ``body`` for ``operation``, signed with ``credentials`` (frozen)
        as botocore signs them."""
        headers = {"X-Amz-Target": f"{self._target}.{operation}", **self._headers}
        scope = (self._signing_name, self.region)
        sign_post(
            self.url,
            headers,
            body,
            credentials=credentials,
            scope=scope,
            signing_key=self._keys.key,
        )
        return headers

    def parse(self, response: Response) -> dict[str, Any]:
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
        shape = self.model.shape_for_error_code(code)
        for name, member in (shape.members if shape is not None else {}).items():
            wire_name = member.serialization.get("name", name)
            if body.get(wire_name) is not None:
                parsed[name] = body[wire_name]
        return parsed


class Call:
    """One call of an operation, as botocore's ``_make_api_call`` makes it: the context
    its events are given, the request ``before-call`` sees, and its attempts (each signed
    anew, retried as botocore's standard mode retries them), up to the parsed result or
    the error raised."""

    def __init__(self, protocol: JsonProtocol, operation: str) -> None:
        self.protocol = protocol
        self.operation = operation
        self.model = protocol.model.operation_model(operation)
        self.context: dict[str, Any] = {
            "client_region": protocol.region,
            "client_config": protocol.config,
            "has_streaming_input": False,
        }
        self.attempt = 1
        self.http_response: Any = None
        self.parsed: dict[str, Any] | None = None
        self.caught: BotoCoreError | None = None
        self._retry: Any = None
        """The last attempt's ``RetryContext``, once one was decided on."""

    def event(self, name: str) -> str:
        """The botocore event ``name`` of this call (``before-call.dynamodb.GetItem``)."""
        return f"{name}.{self.protocol.service_id}.{self.operation}"

    def request(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The request dict botocore's ``before-call`` handlers get (headers they add to it
        are sent unsigned, as botocore sends them)."""
        self.context["retries"] = {"invocation-id": str(uuid.uuid4())}
        return {
            "url_path": "/",
            "query_string": "",
            "method": "POST",
            "headers": {},
            "body": json.dumps(params, default=_blob).encode(),
            "url": self.protocol.url,
            "context": self.context,
        }

    def signed(self, body: bytes, credentials: Any) -> dict[str, str]:
        """The headers of this attempt: signed, then the SDK's attempt headers."""
        headers = self.protocol.signed(self.operation, body, credentials)
        retries = self.context["retries"]
        retries["attempt"] = self.attempt
        headers["amz-sdk-invocation-id"] = retries["invocation-id"]
        headers["amz-sdk-request"] = (
            f"attempt={self.attempt}"
            if self.attempt == 1
            else f"attempt={self.attempt}; max={self.protocol.max_attempts}"
        )
        return headers

    def prepared(self, body: bytes, headers: dict[str, str]) -> Any:
        """The attempt as botocore's prepared request, for ``before-send`` handlers."""
        request = AWSRequest(method="POST", url=self.protocol.url, data=body, headers=headers)
        return request.prepare()

    def answered(self, response: Response) -> None:
        """The attempt's response came."""
        self.http_response = response
        self.parsed = self.protocol.parse(response)
        self.caught = None

    def failed(self, error: BotoCoreError) -> None:
        """The attempt's exchange failed (connection errors, timeouts)."""
        self.http_response = None
        self.parsed = None
        self.caught = error

    @property
    def expired(self) -> bool:
        """Whether the attempt was refused for expired credentials."""
        error = (self.parsed or {}).get("Error") or {}
        return error.get("Code") in EXPIRED_CREDENTIALS

    def again(self) -> None:
        """Send once more, at once (re-signed with refreshed credentials)."""
        self.attempt += 1

    def retry_delay(self) -> float | None:
        """How long to wait before the next attempt, as botocore's standard mode decides
        (its retry conditions and retry quota); ``None``: no more attempts."""
        self._retry = retry = retry_context(
            attempt_number=self.attempt,
            operation_model=self.model,
            parsed_response=self.parsed,
            http_response=self.http_response,
            caught_exception=self.caught,
            request_context=self.context,
        )
        delay = retry_delay(self.protocol.retries, retry)
        if delay is not None:
            self.attempt += 1
        return delay

    def outcome(self) -> tuple[Any, dict[str, Any]]:
        """The last attempt's response, parsed (its error unraised); a connection error
        that outlasted the attempts is raised."""
        # botocore calls it with the request's context dict (its after-call event)
        release_retry_quota(self.protocol.retries, self.context, self.http_response)
        if self.caught is not None:
            raise self.caught
        assert self.parsed is not None
        metadata = self.parsed["ResponseMetadata"]
        if self._retry is not None:
            metadata |= retry_metadata(self._retry)
        metadata["RetryAttempts"] = self.attempt - 1
        return self.http_response, self.parsed

    def result(self, http_response: Any, parsed: dict[str, Any]) -> dict[str, Any]:
        """What the call returns: ``parsed``, or its error raised as the botocore client's
        own ``ClientError`` class for the code."""
        if http_response.status_code >= ERROR_STATUS:
            error = parsed["Error"]
            code = error.get("QueryErrorCode") or error["Code"]
            raise self.protocol.client.exceptions.from_code(code)(parsed, self.operation)
        return parsed
