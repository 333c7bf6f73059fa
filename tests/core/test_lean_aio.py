"""The async lean client (runlane_sqs/adapters/lean/aio.py): chosen for the async worker's
clients with ``RUNLANE_AWS_CLIENT=lean``, retried as botocore's standard mode retries,
each attempt signed anew, expired credentials refreshed once, the aiobotocore client's
events fired around each request, and connection errors raised as botocore's."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import aioboto3
import pytest
from aiobotocore.credentials import AioRefreshableCredentials
from botocore.exceptions import ClientError, EndpointConnectionError

from runlane_sqs.adapters.aws import AwsClients
from runlane_sqs.adapters.dynamodb.store import DynamoRunStore
from runlane_sqs.adapters.lean.aio import AsyncLeanClient
from runlane_sqs.adapters.lean.protocol import Response
from runlane_sqs.adapters.sqs.transport import SqsTransport
from runlane_sqs.runtime.aio.backend import open_ports
from tests.core.test_lean_client import Ticking

KEY = {"TableName": "t", "Key": {"pk": {"S": "a"}}}
OK = (200, b'{"Item":{"pk":{"S":"a"}}}')
THROTTLED = (400, b'{"__type":"x#ThrottlingException","message":"slow down"}')
EXPIRED = (400, b'{"__type":"com.amazon.coral.service#ExpiredTokenException","message":"x"}')
CREDENTIALS = {"aws_access_key_id": "test", "aws_secret_access_key": "test"}


class Flaky:
    """Answers each request from a list: an exception to raise or a (status, body)."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.sent: list[dict[str, str]] = []

    async def close(self) -> None:
        pass

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> Response:
        self.sent.append(dict(headers))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        status, content = answer
        return Response(status, {"x-amzn-requestid": "r"}, content)


def _run(
    test: Callable[[AsyncLeanClient], Awaitable[Any]],
    *,
    answers: list[Any] | None = None,
    credentials: Any = None,
    endpoint: str = "http://127.0.0.1:9",
    attempts: int = 5,
) -> tuple[Any, list[dict[str, str]], list[float]]:
    """``test`` run on an async lean client of an aiobotocore DynamoDB client; it is
    answered by ``answers`` (when given), and waits nothing between attempts."""
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    flaky = Flaky(answers or [])

    async def main() -> Any:
        session = aioboto3.Session(**CREDENTIALS, region_name="us-east-1")
        async with session.client("dynamodb", endpoint_url=endpoint) as client:  # type: ignore[call-overload]
            lean = AsyncLeanClient(
                client,
                credentials or await session.get_credentials(),
                max_attempts=attempts,
                sleep=sleep,
            )
            if answers is not None:
                lean._exchange = flaky  # type: ignore[assignment]
            try:
                return await test(lean)
            finally:
                await lean.close_connections()

    return asyncio.run(main()), flaky.sent, sleeps


@pytest.mark.parametrize(("kind", "lean"), [("lean", True), ("botocore", False)])
def test_the_async_worker_s_clients_are_lean_when_asked(kind: str, lean: bool) -> None:
    aws = AwsClients(
        region="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        aws_client=kind,  # type: ignore[arg-type]
    )
    store = DynamoRunStore(aws.lazy("dynamodb"), "t", "env")
    transport = SqsTransport(aws.lazy("sqs"), queue_prefix="runlane-")

    async def main() -> list[bool]:
        async with AsyncExitStack() as stack:
            session = aioboto3.Session(**CREDENTIALS, region_name="us-east-1")
            ports = await open_ports(store, transport, aws, stack, session)
            return [isinstance(port._client, AsyncLeanClient) for port in ports]  # type: ignore[union-attr]

    assert asyncio.run(main()) == [lean, lean]


def test_retries_follow_the_standard_mode_and_each_attempt_is_signed_anew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("botocore.auth.get_current_datetime", Ticking())
    refused = EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
    result, sent, sleeps = _run(lambda lean: lean.get_item(**KEY), answers=[THROTTLED, refused, OK])
    assert result["Item"] == {"pk": {"S": "a"}}
    assert result["ResponseMetadata"]["RetryAttempts"] == 2
    assert len(sleeps) == 2
    assert [r["amz-sdk-request"] for r in sent] == [
        "attempt=1",
        "attempt=2; max=5",
        "attempt=3; max=5",
    ]
    assert len({r["X-Amz-Date"] for r in sent}) == 3
    assert len({r["Authorization"] for r in sent}) == 3


def test_a_refused_condition_carries_the_item_and_is_not_retried() -> None:
    refusal = (
        400,
        b'{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",'
        b'"message":"The conditional request failed","Item":{"seq":{"N":"7"}}}',
    )

    async def update(lean: AsyncLeanClient) -> Any:
        try:
            await lean.update_item(**KEY, UpdateExpression="SET a = :a")
        except ClientError as exc:
            return exc

    raised, sent, _ = _run(update, answers=[refusal])
    assert type(raised).__name__ == "ConditionalCheckFailedException"
    assert raised.response["Item"] == {"seq": {"N": "7"}}
    assert len(sent) == 1


def test_expired_credentials_are_refreshed_once_and_the_request_signed_again() -> None:
    handed_out: list[str] = []

    async def fetch() -> dict[str, str]:
        handed_out.append(f"ASIA{len(handed_out)}")
        expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
        return {
            "access_key": handed_out[-1],
            "secret_key": "secret",
            "token": f"token-of-{handed_out[-1]}",
            "expiry_time": expiry.isoformat(),
        }

    async def credentials() -> Any:
        return AioRefreshableCredentials.create_from_metadata(await fetch(), fetch, "test")

    async def twice(lean: AsyncLeanClient) -> Any:
        first = await lean.get_item(**KEY)
        try:
            await lean.get_item(**KEY)
        except ClientError as exc:
            return first, exc

    (first, raised), sent, _ = _run(
        twice,
        answers=[EXPIRED, OK, EXPIRED, EXPIRED],
        credentials=asyncio.run(credentials()),
    )
    assert first["Item"] == {"pk": {"S": "a"}}
    assert raised.response["Error"]["Code"] == "ExpiredTokenException"
    keys = [r["Authorization"].split("Credential=")[1].split("/")[0] for r in sent]
    assert keys == ["ASIA0", "ASIA1", "ASIA1", "ASIA2"]
    assert sent[1]["X-Amz-Security-Token"] == "token-of-ASIA1"


def test_the_client_s_events_fire_around_a_lean_request_and_may_be_async() -> None:
    seen: list[str] = []

    async def before(model: Any, params: dict[str, Any], **_: Any) -> None:
        seen.append(f"before:{model.name}")
        params["headers"]["X-Amzn-Trace-Id"] = "Root=1-abc"

    def after(parsed: Any, http_response: Any, **_: Any) -> None:
        seen.append(f"after:{http_response.status_code}:{sorted(parsed)}")

    async def call(lean: AsyncLeanClient) -> Any:
        lean.meta.events.register("before-call.dynamodb.GetItem", before)
        lean.meta.events.register("after-call.dynamodb", after)
        return await lean.get_item(**KEY)

    _, sent, _ = _run(call, answers=[OK])
    assert seen == ["before:GetItem", "after:200:['Item', 'ResponseMetadata']"]
    assert sent[0]["X-Amzn-Trace-Id"] == "Root=1-abc"
    assert "x-amzn-trace-id" not in sent[0]["Authorization"]


def test_other_operations_are_the_aiobotocore_client_s() -> None:
    async def method(lean: AsyncLeanClient) -> Any:
        return lean.describe_table.__self__ is lean.botocore_client

    assert _run(method)[0] is True


def test_a_refused_connection_is_botocore_s_endpoint_connection_error() -> None:
    async def call(lean: AsyncLeanClient) -> Any:
        try:
            await lean.get_item(**KEY)
        except EndpointConnectionError as exc:
            return exc

    raised, _, sleeps = _run(call, attempts=2)
    assert isinstance(raised, EndpointConnectionError)
    assert len(sleeps) == 1  # retried once, as botocore's standard mode retries it
