"""The lean clients against botocore, byte for byte (runlane_sqs/adapters/lean/).

For each operation the lean clients send (the sync one and the async one), over
generated parameters (unicode and control characters, numbers at the edges, binary, long
strings), with and without a session token, and with the clock and the invocation id
frozen, what a lean client would send equals what the botocore client sends for the
same call: the URL, the body bytes, every signed header and the ``Authorization`` header.
botocore's request is captured by a ``before-send`` hook that answers with a canned
response, a lean one by the exchange it is given, so nothing leaves the process. Then
the other way: the same canned response bodies (success, a refused condition with its
item, throttling, a 5xx, an expired token, a body that is not JSON) parse to the same
result, or raise the same error with the same ``response``, from both lean clients.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aioboto3
import boto3
import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.config import Config
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runlane_sqs.adapters.aws import default_botocore_config
from runlane_sqs.adapters.lean.aio import AsyncLeanClient
from runlane_sqs.adapters.lean.client import LeanClient
from runlane_sqs.adapters.lean.protocol import HOT_OPERATIONS, Response

FROZEN = datetime.datetime(2026, 12, 4, 9, 30, 15, tzinfo=datetime.UTC)
INVOCATION = uuid.UUID("12345678-1234-5678-1234-567812345678")
ENDPOINTS = {
    "dynamodb": "https://dynamodb.eu-west-1.amazonaws.com",
    "sqs": "https://sqs.eu-west-1.amazonaws.com",
}
QUEUE_URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/runlane-default"


@dataclass
class Sent:
    """One request as it would leave the process."""

    url: str
    method: str
    headers: dict[str, Any]
    body: bytes


class Canned:
    """Stands in for the HTTP layer of both clients: keeps each request and answers with
    one response (botocore's through its ``before-send`` event, the lean client's as
    its exchange)."""

    def __init__(self, status: int = 200, body: bytes = b"{}", headers: Any = None) -> None:
        self.status, self.body = status, body
        self.headers = headers or {"x-amzn-RequestId": "REQ1", "Content-Type": "json"}
        self.sent: list[Sent] = []

    def response(self, request: AWSPreparedRequest, **kwargs: Any) -> AWSResponse:
        body = request.body if isinstance(request.body, bytes) else (request.body or "").encode()
        self.sent.append(Sent(request.url, request.method, dict(request.headers), body))
        return AWSResponse(request.url, self.status, dict(self.headers), _Raw(self.body))

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> Response:
        base = ENDPOINTS["sqs" if "AmazonSQS" in headers["X-Amz-Target"] else "dynamodb"]
        self.sent.append(Sent(base + path, "POST", dict(headers), body))
        lowered = {k.lower(): v for k, v in self.headers.items()}
        return Response(self.status, lowered, self.body)


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **kwargs: Any) -> Iterator[bytes]:
        yield self._body


@pytest.fixture(autouse=True)
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: FROZEN)
    monkeypatch.setattr(uuid, "uuid4", lambda: INVOCATION)


CREDENTIALS = {
    "aws_access_key_id": "AKIDEXAMPLE",
    "aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    "region_name": "eu-west-1",
}


def _config(attempts: int) -> Config:
    retries: Any = {"mode": "standard", "total_max_attempts": attempts}
    return default_botocore_config({}).merge(Config(retries=retries))


@functools.cache
def _session(token: str | None) -> boto3.session.Session:
    """One session per token for the whole file: each client made from it starts from
    the same state, and the service models are loaded once rather than per example."""
    return boto3.session.Session(**CREDENTIALS, aws_session_token=token)


@functools.cache
def _async_session(token: str | None) -> aioboto3.Session:
    return aioboto3.Session(**CREDENTIALS, aws_session_token=token)


def _clients(
    service: str, token: str | None, canned: Canned, attempts: int = 5
) -> tuple[Any, LeanClient]:
    """A botocore client answered by ``canned``, and a lean client over another botocore
    client whose HTTP session is ``canned``: the same session, config and credentials."""
    session = _session(token)
    config = _config(attempts)
    botocore = session.client(service, endpoint_url=ENDPOINTS[service], config=config)
    botocore.meta.events.register("before-send", canned.response)
    plain = session.client(service, endpoint_url=ENDPOINTS[service], config=config)
    lean = LeanClient(plain, session.get_credentials(), max_attempts=attempts, sleep=lambda s: None)
    lean._exchange = canned  # type: ignore[attr-defined]
    return botocore, lean


class AsyncCanned:
    """``canned`` as the async lean client's exchange."""

    def __init__(self, canned: Canned) -> None:
        self.canned = canned

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> Response:
        return self.canned.post(path, body, headers)


async def _no_sleep(seconds: float) -> None:
    return None


def _async_lean_call(
    method: str, params: dict[str, Any], token: str | None, canned: Canned, attempts: int = 5
) -> Any:
    """``method`` called by an async lean client over an aiobotocore client with the same
    credentials and config, answered by ``canned``."""
    service = _service(method)

    async def call() -> Any:
        session = _async_session(token)
        config = _config(attempts)
        async with session.client(  # type: ignore[call-overload]
            service, endpoint_url=ENDPOINTS[service], config=config
        ) as client:
            credentials = await session.get_credentials()
            lean = AsyncLeanClient(client, credentials, max_attempts=attempts, sleep=_no_sleep)
            lean._exchange = AsyncCanned(canned)  # type: ignore[assignment]
            return await getattr(lean, method)(**params)

    return asyncio.run(call())


def _signed(request: Sent) -> dict[str, str]:
    """The signed headers as sent (botocore keeps some as bytes), and the signature."""
    headers = {
        k.lower(): v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()
    }
    authorization = headers["authorization"]
    names = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    sent_host = urlsplit(request.url).netloc  # the HTTP layer adds it when not given
    return {name: headers.get(name, sent_host) for name in names} | {"authorization": authorization}


def _body(request: Sent) -> bytes:
    return request.body


texts = st.text(st.characters(codec="utf-8"), max_size=300) | st.sampled_from(
    ["", "x" * 70_000, "<b>&'\"</b>", "\x00\x1f\x7f", "\u2028\ufeff", "é漢字🙂"]
)
numbers = st.sampled_from(
    ["0", "-0", "1", "-1", "1E+125", "9.9999999999999999999999999999999999999E+125", "1E-130"]
) | st.integers(-(2**63), 2**63).map(str)
values = st.recursive(
    st.builds(lambda t: {"S": t}, texts)
    | st.builds(lambda n: {"N": n}, numbers)
    | st.builds(lambda b: {"B": b}, st.binary(max_size=200))
    | st.builds(lambda b: {"BOOL": b}, st.booleans())
    | st.just({"NULL": True})
    | st.builds(lambda s: {"SS": s}, st.lists(texts, min_size=1, max_size=3, unique=True)),
    lambda inner: (
        st.builds(lambda m: {"M": m}, st.dictionaries(texts, inner, max_size=3))
        | st.builds(lambda items: {"L": items}, st.lists(inner, max_size=3))
    ),
    max_leaves=8,
)
items = st.dictionaries(texts, values, max_size=5)


def _key(pk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": "RUN"}}


CALLS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "update_item": st.fixed_dictionaries(
        {
            "TableName": st.just("runlane"),
            "Key": texts.map(_key),
            "UpdateExpression": st.just("SET #s = :s, #n = #n + :one"),
            "ConditionExpression": st.just("#seq = :seq AND attribute_exists(#pk)"),
            "ExpressionAttributeNames": st.just(
                {"#s": "status", "#n": "n", "#seq": "seq", "#pk": "pk"}
            ),
            "ExpressionAttributeValues": st.fixed_dictionaries(
                {":s": values, ":one": st.just({"N": "1"}), ":seq": values}
            ),
            "ReturnValues": st.sampled_from(["ALL_NEW", "NONE"]),
            "ReturnValuesOnConditionCheckFailure": st.just("ALL_OLD"),
            "ReturnConsumedCapacity": st.just("INDEXES"),
        }
    ),
    "put_item": st.fixed_dictionaries(
        {
            "TableName": st.just("runlane"),
            "Item": items.map(lambda i: {**_key("p"), **i}),
            "ConditionExpression": st.just("attribute_not_exists(#pk)"),
            "ExpressionAttributeNames": st.just({"#pk": "pk"}),
        }
    ),
    "get_item": st.fixed_dictionaries(
        {"TableName": st.just("runlane"), "Key": texts.map(_key), "ConsistentRead": st.booleans()}
    ),
    "receive_message": st.fixed_dictionaries(
        {
            "QueueUrl": st.just(QUEUE_URL),
            "MaxNumberOfMessages": st.integers(1, 10),
            "WaitTimeSeconds": st.integers(0, 20),
            "MessageSystemAttributeNames": st.just(["ApproximateReceiveCount", "SentTimestamp"]),
            "MessageAttributeNames": st.just(["All"]),
        }
    ),
    "send_message": st.fixed_dictionaries(
        {
            "QueueUrl": st.just(QUEUE_URL),
            "MessageBody": texts,
            "DelaySeconds": st.integers(0, 900),
            "MessageAttributes": st.dictionaries(
                st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,20}", fullmatch=True),
                st.builds(lambda t: {"DataType": "String", "StringValue": t}, texts)
                | st.builds(lambda b: {"DataType": "Binary", "BinaryValue": b}, st.binary()),
                max_size=3,
            ),
        }
    ),
    "send_message_batch": st.fixed_dictionaries(
        {
            "QueueUrl": st.just(QUEUE_URL),
            "Entries": st.lists(
                st.builds(
                    lambda n, body: {"Id": f"m{n}", "MessageBody": body, "DelaySeconds": n},
                    st.integers(0, 900),
                    texts,
                ),
                min_size=1,
                max_size=10,
                unique_by=lambda e: e["Id"],
            ),
        }
    ),
    "delete_message_batch": st.fixed_dictionaries(
        {
            "QueueUrl": st.just(QUEUE_URL),
            "Entries": st.lists(
                st.builds(
                    lambda n, h: {"Id": f"d{n}", "ReceiptHandle": h}, st.integers(0, 9), texts
                ),
                min_size=1,
                max_size=10,
                unique_by=lambda e: e["Id"],
            ),
        }
    ),
    "change_message_visibility": st.fixed_dictionaries(
        {
            "QueueUrl": st.just(QUEUE_URL),
            "ReceiptHandle": texts,
            "VisibilityTimeout": st.integers(0, 43_200),
        }
    ),
    "change_message_visibility_batch": st.fixed_dictionaries(
        {
            "QueueUrl": st.just(QUEUE_URL),
            "Entries": st.lists(
                st.builds(
                    lambda n, h: {"Id": f"c{n}", "ReceiptHandle": h, "VisibilityTimeout": n},
                    st.integers(0, 9),
                    texts,
                ),
                min_size=1,
                max_size=10,
                unique_by=lambda e: e["Id"],
            ),
        }
    ),
}


def _service(method: str) -> str:
    return next(s for s, ops in HOT_OPERATIONS.items() if method in ops)


def test_every_lean_operation_has_a_parity_case() -> None:
    assert set(CALLS) == {op for ops in HOT_OPERATIONS.values() for op in ops}


@pytest.mark.filterwarnings("ignore:Generating overly large repr")  # the 70 KB strings
@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzEBYaDH//session+token="])
@pytest.mark.parametrize("method", sorted(CALLS))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_lean_request_is_the_botocore_request(
    method: str, token: str | None, data: st.DataObject
) -> None:
    params = data.draw(CALLS[method])
    canned = Canned()
    botocore, lean = _clients(_service(method), token, canned)
    getattr(botocore, method)(**params)
    getattr(lean, method)(**params)
    _async_lean_call(method, params, token, canned)
    sent, *lean_sent = canned.sent
    for lean_request in lean_sent:
        assert lean_request.url == sent.url
        assert lean_request.method == sent.method == "POST"
        assert _body(lean_request) == _body(sent)
        assert _signed(lean_request) == _signed(sent)


RESPONSES: list[tuple[str, int, dict[str, Any], Any]] = [
    ("update_item", 200, {}, {"Attributes": {"seq": {"N": "3"}, "blob": {"B": "AAEC/w=="}}}),
    (
        "update_item",
        200,
        {},
        {
            "ConsumedCapacity": {
                "TableName": "runlane",
                "CapacityUnits": 3.0,
                "Table": {"CapacityUnits": 1.0},
            }
        },
    ),
    (
        "update_item",
        400,
        {},
        {
            "__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
            "message": "The conditional request failed",
            "Item": {"seq": {"N": "4"}, "bs": {"BS": ["AA==", "AQ=="]}},
        },
    ),
    (
        "put_item",
        400,
        {},
        {
            "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
            "message": "Rate exceeded",
        },
    ),
    ("get_item", 500, {}, {"__type": "com.amazonaws.dynamodb#InternalServerError", "message": "x"}),
    (
        "get_item",
        400,
        {},
        {"__type": "com.amazon.coral.service#ExpiredTokenException", "message": "expired"},
    ),
    ("get_item", 200, {}, {}),
    ("get_item", 502, {}, b"<html>Bad gateway</html>"),
    (
        "receive_message",
        200,
        {},
        {
            "Messages": [
                {
                    "MessageId": "m1",
                    "ReceiptHandle": "r1",
                    "MD5OfBody": "d",
                    "Body": '{"run": "x"}',
                    "Attributes": {"ApproximateReceiveCount": "2"},
                    "MessageAttributes": {"b": {"DataType": "Binary", "BinaryValue": "AAEC"}},
                }
            ]
        },
    ),
    (
        "send_message_batch",
        200,
        {},
        {
            "Successful": [{"Id": "m0", "MessageId": "x", "MD5OfMessageBody": "y"}],
            "Failed": [
                {"Id": "m1", "SenderFault": True, "Code": "InvalidParameterValue", "Message": "no"}
            ],
        },
    ),
    (
        "send_message",
        400,
        {"x-amzn-query-error": "AWS.SimpleQueueService.NonExistentQueue;Sender"},
        {
            "__type": "com.amazonaws.sqs#QueueDoesNotExist",
            "message": "The specified queue does not exist.",
        },
    ),
    (
        "delete_message_batch",
        400,
        {},
        {"__type": "com.amazonaws.sqs#ThrottlingException", "message": "slow down"},
    ),
]


PARAMS: dict[str, dict[str, Any]] = {
    "update_item": {"TableName": "runlane", "Key": _key("k"), "UpdateExpression": "SET a = :a"},
    "put_item": {"TableName": "runlane", "Item": _key("k")},
    "get_item": {"TableName": "runlane", "Key": _key("k")},
    "send_message": {"QueueUrl": QUEUE_URL, "MessageBody": "x"},
    "send_message_batch": {"QueueUrl": QUEUE_URL, "Entries": [{"Id": "m0", "MessageBody": "x"}]},
    "delete_message_batch": {"QueueUrl": QUEUE_URL, "Entries": [{"Id": "d", "ReceiptHandle": "r"}]},
}


@pytest.mark.parametrize(("method", "status", "headers", "body"), RESPONSES)
def test_a_response_parses_as_botocore_parses_it(
    method: str, status: int, headers: dict[str, str], body: Any
) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    canned = Canned(status, raw, {"x-amzn-RequestId": "REQ1", **headers})
    botocore, lean = _clients(_service(method), None, canned, attempts=1)
    params = PARAMS.get(method, {"QueueUrl": QUEUE_URL})
    outcomes = []
    calls = [
        lambda: getattr(botocore, method)(**params),
        lambda: getattr(lean, method)(**params),
        lambda: _async_lean_call(method, params, None, canned, attempts=1),
    ]
    for call in calls:
        try:
            outcomes.append(("ok", call()))
        except ClientError as exc:
            outcomes.append((type(exc).__name__, exc.response, str(exc)))
    assert outcomes[1] == outcomes[0]
    assert outcomes[2] == outcomes[0]
