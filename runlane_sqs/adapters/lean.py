"""The lean AWS client: the per-run requests of DynamoDB and SQS without botocore's client
machinery, and with botocore's signing, credentials and HTTP session.

Both services speak AWS's JSON protocol, where a request is the operation's parameters as
JSON and a response is its result as JSON. :class:`LeanClient` wraps the app's botocore
client: the operations it is given (:data:`HOT_OPERATIONS`) it sends itself, the way the
botocore client would (the same URL, body bytes and signed headers, which
``tests/contract/test_lean_parity.py`` holds it to); every other attribute is the
botocore client's.

- **Signing and credentials**: botocore's ``SigV4Auth`` with the frozen credentials of
  the app's session, so every provider keeps working (environment, profiles, ECS task
  role, IMDS, web identity) and refreshes as it does for botocore.
- **HTTP**: the botocore client's own ``URLLib3Session``: its keep-alive pool, TLS
  verification, CA bundle, proxies and timeouts.
- **Responses and errors**: parsed as botocore's JSON parser does for these operations
  (blobs decoded, ``ResponseMetadata`` added); an error is the botocore client's own
  ``ClientError`` class for its code, with the same ``response`` (``Error``, the
  modeled fields such as a refused condition's ``Item``, ``ResponseMetadata``).
- **Retries**: botocore's standard retry mode (its retry conditions, exponential
  backoff with jitter and retry quota), each attempt signed anew.

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
from typing import Any, Final

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import BotoCoreError
from botocore.retries import quota, standard

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
            "Content-Type": f"application/x-amz-json-{model.metadata['jsonVersion']}",
            **({"x-amzn-query-mode": "true"} if model.is_query_compatible else {}),
            "User-Agent": meta.config.user_agent or "",
        }
        self._http = client._endpoint.http_session
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

    def send(self, operation: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Send one operation, retried as botocore's standard mode retries it."""
        body = json.dumps(params, default=_blob).encode()
        operation_model = self._model.operation_model(operation)
        context: dict[str, Any] = {"retries": {"invocation-id": str(uuid.uuid4())}}
        attempt = 1
        while True:
            context["retries"]["attempt"] = attempt
            parsed: dict[str, Any] | None = None
            http_response: Any = None
            caught: Exception | None = None
            try:
                http_response = self._http.send(self._signed(operation, body, context))
                parsed = self._parse(http_response)
            except BotoCoreError as exc:  # its HTTP session's: connection errors, timeouts
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
        self._quota.release_retry_quota(context, http_response)  # type: ignore[arg-type]
        if caught is not None:
            raise caught
        assert parsed is not None
        metadata = parsed["ResponseMetadata"]
        metadata |= retry.get_retry_metadata()
        metadata["RetryAttempts"] = attempt - 1
        if http_response.status_code >= ERROR_STATUS:
            error = parsed["Error"]
            code = error.get("QueryErrorCode") or error["Code"]
            raise self._client.exceptions.from_code(code)(parsed, operation)
        return parsed

    def _signed(self, operation: str, body: bytes, context: dict[str, Any]) -> Any:
        headers = {"X-Amz-Target": f"{self._target}.{operation}", **self._headers}
        request = AWSRequest(method="POST", url=self._url, data=body, headers=headers)
        name, region = self._signer_scope
        SigV4Auth(self._credentials.get_frozen_credentials(), name, region).add_auth(request)
        retries = context["retries"]  # added after signing, as botocore adds them
        request.headers["amz-sdk-invocation-id"] = retries["invocation-id"]
        request.headers["amz-sdk-request"] = (
            f"attempt={retries['attempt']}"
            if retries["attempt"] == 1
            else f"attempt={retries['attempt']}; max={self._max_attempts}"
        )
        return request.prepare()

    def _parse(self, response: Any) -> dict[str, Any]:
        """A response as botocore's JSON parser gives it."""
        headers = {k.lower(): v for k, v in response.headers.items()}
        content: bytes = response.content
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
