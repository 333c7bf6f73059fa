"""Choosing the lean client (``RUNLANE_AWS_CLIENT``), when it steps aside for botocore,
and how it retries: botocore's standard mode, each attempt signed anew, a connection
error retried like a 5xx, and the retry quota spent and paid back as botocore does."""

from __future__ import annotations

import datetime
import logging
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.credentials import Credentials, RefreshableCredentials
from botocore.exceptions import ClientError, EndpointConnectionError
from moto import mock_aws

from runlane_sqs.adapters.aws import (
    AwsClients,
    aws_client_kind,
    default_botocore_config,
    lean_refused_by,
    total_attempts,
)
from runlane_sqs.adapters.lean.client import BotocoreExchange, LeanClient
from runlane_sqs.adapters.lean.keepalive import KeepAlive
from runlane_sqs.adapters.lean.protocol import Response, SigningKeys
from runlane_sqs.core.errors import ConfigurationError


def _clients(kind: str, config: Config | None = None, **session: Any) -> AwsClients:
    credentials = {"aws_access_key_id": "test", "aws_secret_access_key": "test"}
    return AwsClients(
        region="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        session=boto3.session.Session(**(credentials | session)),
        botocore_config=config,
        aws_client=kind,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("value", "kind"),
    [("", "lean"), ("lean", "lean"), (" LEAN ", "lean"), ("botocore", "botocore")],
)
def test_the_variable_chooses_the_client(value: str, kind: str) -> None:
    assert aws_client_kind({"RUNLANE_AWS_CLIENT": value}) == kind


@pytest.mark.parametrize("value", ["fast", "lean;rm -rf", "\x00"])
def test_a_bad_choice_is_a_configuration_error(value: str) -> None:
    with pytest.raises(ConfigurationError, match="RUNLANE_AWS_CLIENT must be one of"):
        aws_client_kind({"RUNLANE_AWS_CLIENT": value})


def test_only_dynamodb_and_sqs_clients_are_lean() -> None:
    clients = _clients("lean")
    assert isinstance(clients.client("dynamodb"), LeanClient)
    assert isinstance(clients.client("sqs"), LeanClient)
    assert not isinstance(clients.client("cloudformation"), LeanClient)
    assert not isinstance(_clients("botocore").client("dynamodb"), LeanClient)


def test_a_lean_client_hands_other_operations_to_botocore() -> None:
    client = _clients("lean").client("dynamodb")
    assert client.meta.service_model.service_name == "dynamodb"
    assert client.describe_table.__self__ is client.botocore_client  # a bound botocore method


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (Config(retries={"mode": "adaptive"}), "retry mode is not standard"),
        (Config(retries={"mode": "legacy", "max_attempts": 3}), "retry mode is not standard"),
        (Config(retries={"mode": "standard"}), "validates parameters"),
        (
            Config(
                retries={"mode": "standard"}, parameter_validation=False, signature_version="v2"
            ),
            "signs with v2",
        ),
    ],
)
def test_a_config_the_lean_client_cannot_honour_keeps_botocore(
    config: Config, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert reason in (lean_refused_by(config) or "")
    with caplog.at_level(logging.WARNING, logger="runlane_sqs.aws"):
        client = _clients("lean", config).client("dynamodb")
    assert not isinstance(client, LeanClient)
    assert "RUNLANE_AWS_CLIENT=lean: the dynamodb client sends its requests with botocore: " in (
        caplog.text
    )


def test_an_endpoint_behind_a_proxy_is_sent_over_botocore_s_http_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    clients = AwsClients(
        region="eu-west-1",
        endpoint_url=None,
        session=boto3.session.Session(aws_access_key_id="k", aws_secret_access_key="s"),
        aws_client="lean",
    )
    client = clients.client("dynamodb")
    assert isinstance(client, LeanClient)
    assert isinstance(client._exchange, BotocoreExchange)  # type: ignore[attr-defined]
    monkeypatch.delenv("HTTPS_PROXY")
    direct = _clients("lean").client("dynamodb")
    assert isinstance(direct._exchange, KeepAlive)  # type: ignore[attr-defined]


def test_fips_endpoints_keep_botocore() -> None:
    config = default_botocore_config({}).merge(Config(use_fips_endpoint=True))
    assert not isinstance(_clients("lean", config).client("dynamodb"), LeanClient)


def test_attempts_follow_the_standard_retry_settings() -> None:
    assert total_attempts(default_botocore_config({})) == 5
    assert total_attempts(Config(retries={"mode": "standard", "max_attempts": 2})) == 3
    assert total_attempts(Config(retries={"mode": "standard"})) == 3
    assert total_attempts(Config(retries={"mode": "adaptive"})) is None


class Flaky:
    """Answers each request from a list: an exception to raise or a (status, body)."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.sent: list[dict[str, str]] = []

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> Response:
        self.sent.append(dict(headers))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        status, content = answer
        return Response(status, {"x-amzn-requestid": "r"}, content)


def _lean(
    answers: list[Any], sleeps: list[float], attempts: int = 5, credentials: Any = None
) -> tuple[LeanClient, Flaky]:
    clients = _clients("lean")
    client = clients.client("dynamodb")
    assert isinstance(client, LeanClient)
    lean = LeanClient(
        client.botocore_client,
        credentials or clients.session.get_credentials(),
        max_attempts=attempts,
        sleep=sleeps.append,
    )
    flaky = Flaky(answers)
    lean._exchange = flaky  # type: ignore[attr-defined]
    return lean, flaky


THROTTLED = (400, b'{"__type":"x#ThrottlingException","message":"slow down"}')
DOWN = (503, b"")
OK = (200, b'{"Item":{"pk":{"S":"a"}}}')
KEY = {"TableName": "t", "Key": {"pk": {"S": "a"}}}


class Ticking:
    """botocore's signing clock, a second later at each reading."""

    def __init__(self) -> None:
        self.now = datetime.datetime(2026, 12, 4, 9, 0, 0)

    def __call__(self) -> datetime.datetime:
        self.now += datetime.timedelta(seconds=1)
        return self.now


def test_throttling_5xx_and_connection_errors_are_retried_and_each_attempt_signed_anew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("botocore.auth.get_current_datetime", Ticking())
    sleeps: list[float] = []
    refused = EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
    lean, flaky = _lean([THROTTLED, DOWN, refused, OK], sleeps)
    response = lean.get_item(**KEY)
    assert response["Item"] == {"pk": {"S": "a"}}
    assert response["ResponseMetadata"]["RetryAttempts"] == 3
    assert len(sleeps) == 3 and all(0 <= s <= 2 ** (n + 1) for n, s in enumerate(sleeps))
    requests = flaky.sent
    assert [r["amz-sdk-request"] for r in requests] == [
        "attempt=1",
        "attempt=2; max=5",
        "attempt=3; max=5",
        "attempt=4; max=5",
    ]
    assert len({r["amz-sdk-invocation-id"] for r in requests}) == 1
    assert len({r["X-Amz-Date"] for r in requests}) == 4
    assert len({r["Authorization"] for r in requests}) == 4


def test_the_last_attempt_s_error_is_raised_with_its_response() -> None:
    lean, flaky = _lean([THROTTLED, THROTTLED, THROTTLED], [], attempts=3)
    with pytest.raises(ClientError) as raised:
        lean.get_item(**KEY)
    assert raised.value.response["Error"]["Code"] == "ThrottlingException"
    metadata = raised.value.response["ResponseMetadata"]
    assert (metadata["RetryAttempts"], metadata["MaxAttemptsReached"]) == (2, True)
    assert len(flaky.sent) == 3


def test_a_connection_error_that_outlasts_the_attempts_is_raised_as_botocore_s() -> None:
    refused = EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
    lean, _ = _lean([refused, refused], [], attempts=2)
    with pytest.raises(EndpointConnectionError):
        lean.get_item(**KEY)


def test_a_refused_condition_is_not_retried_and_carries_the_item() -> None:
    refusal = (
        400,
        b'{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",'
        b'"message":"The conditional request failed","Item":{"seq":{"N":"7"}}}',
    )
    lean, flaky = _lean([refusal], [])
    with pytest.raises(ClientError) as raised:
        lean.update_item(**KEY, UpdateExpression="SET a = :a")
    assert type(raised.value).__name__ == "ConditionalCheckFailedException"
    assert raised.value.response["Item"] == {"seq": {"N": "7"}}
    assert len(flaky.sent) == 1


def test_the_retry_quota_runs_out_in_a_long_outage_and_requests_are_tried_once() -> None:
    lean, flaky = _lean([DOWN] * 200, [])
    tries = []
    for _ in range(30):
        before = len(flaky.sent)
        with pytest.raises(ClientError) as raised:
            lean.get_item(**KEY)
        tries.append(len(flaky.sent) - before)
    # 500 units, 5 a retry: 25 calls of 5 tries (4 retries each), then one try each
    assert tries == [5] * 25 + [1] * 5
    assert raised.value.response["ResponseMetadata"]["RetryQuotaReached"] is True


EXPIRED = (400, b'{"__type":"com.amazon.coral.service#ExpiredTokenException","message":"x"}')


def rotating_credentials() -> tuple[RefreshableCredentials, list[str]]:
    """Temporary credentials (valid for an hour, so never refreshed for their age) whose
    every refresh hands out a new key; the list holds the keys handed out."""
    keys = ["ASIAFIRST"]

    def fetch() -> dict[str, str]:
        keys.append(f"ASIANEW{len(keys)}")
        expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
        return {
            "access_key": keys[-1],
            "secret_key": "secret",
            "token": f"token-of-{keys[-1]}",
            "expiry_time": expiry.isoformat(),
        }

    first = fetch() | {"access_key": "ASIAFIRST"}
    keys.pop()
    credentials = RefreshableCredentials.create_from_metadata(first, fetch, "test")
    return credentials, keys


def _key_id(headers: dict[str, str]) -> str:
    return headers["Authorization"].split("Credential=")[1].split("/")[0]


def test_expired_credentials_are_refreshed_and_the_request_signed_again_once() -> None:
    credentials, keys = rotating_credentials()
    lean, flaky = _lean([EXPIRED, OK], [], credentials=credentials)
    assert lean.get_item(**KEY)["Item"] == {"pk": {"S": "a"}}
    assert [_key_id(sent) for sent in flaky.sent] == ["ASIAFIRST", "ASIANEW1"]
    assert flaky.sent[1]["X-Amz-Security-Token"] == "token-of-ASIANEW1"
    assert keys == ["ASIAFIRST", "ASIANEW1"]

    lean, flaky = _lean([EXPIRED, EXPIRED, OK], [], credentials=credentials)
    with pytest.raises(ClientError) as raised:  # refreshed once per request, then raised
        lean.get_item(**KEY)
    assert raised.value.response["Error"]["Code"] == "ExpiredTokenException"
    assert [_key_id(sent) for sent in flaky.sent] == ["ASIANEW1", "ASIANEW2"]


def test_expired_static_credentials_are_raised_at_once() -> None:
    lean, flaky = _lean([EXPIRED, OK], [])
    with pytest.raises(ClientError, match="ExpiredTokenException"):
        lean.get_item(**KEY)
    assert len(flaky.sent) == 1


def test_the_botocore_client_s_events_fire_around_a_lean_request() -> None:
    """Handlers registered after the client sent requests without them are called too."""
    lean, flaky = _lean([OK, OK], [])
    lean.get_item(**KEY)  # no handler of its own for these events yet
    seen: list[str] = []

    def provide(params: dict[str, Any], model: Any, **_: Any) -> None:
        seen.append(f"provide:{model.name}")
        params["ReturnConsumedCapacity"] = "TOTAL"  # as the bench's counter asks

    def before(model: Any, params: dict[str, Any], **_: Any) -> None:
        seen.append(f"before:{model.name}")
        params["headers"]["X-Amzn-Trace-Id"] = "Root=1-abc"  # as botocore does in Lambda

    def after(parsed: Any, http_response: Any, **_: Any) -> None:
        seen.append(f"after:{http_response.status_code}:{sorted(parsed)}")

    events = lean.meta.events
    events.register("provide-client-params.dynamodb.GetItem", provide)
    events.register("before-call.dynamodb.GetItem", before)
    events.register("after-call.dynamodb", after)
    lean.get_item(**KEY)
    assert seen == [
        "provide:GetItem",
        "before:GetItem",
        "after:200:['Item', 'ResponseMetadata']",
    ]
    sent = flaky.sent[-1]
    assert sent["X-Amzn-Trace-Id"] == "Root=1-abc"
    assert "x-amzn-trace-id" not in sent["Authorization"]  # sent unsigned, as by botocore


def test_a_before_call_handler_can_answer_in_place_of_the_service() -> None:
    lean, flaky = _lean([], [])

    def refuse(model: Any, **_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")

    def answer(model: Any, **_: Any) -> Any:
        return Response(200, {}, b""), {"Item": {"pk": {"S": "stub"}}}

    lean.meta.events.register("before-call.dynamodb.GetItem", refuse)
    with pytest.raises(EndpointConnectionError):
        lean.get_item(**KEY)
    lean.meta.events.unregister("before-call.dynamodb.GetItem", refuse)
    lean.meta.events.register("before-call.dynamodb.GetItem", answer)
    assert lean.get_item(**KEY)["Item"] == {"pk": {"S": "stub"}}
    assert flaky.sent == []


def test_before_send_handlers_see_the_signed_request_and_may_answer() -> None:
    lean, flaky = _lean([OK], [])
    seen: list[Any] = []

    def capture(request: Any, **_: Any) -> None:
        seen.append(request)

    lean.meta.events.register("before-send.dynamodb.GetItem", capture)
    lean.get_item(**KEY)  # seen, then sent
    [request] = seen
    assert request.url == "http://127.0.0.1:9/"
    assert request.headers["X-Amz-Target"] == "DynamoDB_20120810.GetItem"
    assert b'"TableName": "t"' in request.body
    assert len(flaky.sent) == 1

    class Raw:
        def stream(self, **_: Any) -> Any:
            return iter([b'{"Item":{"pk":{"S":"canned"}}}'])

    def answer(request: Any, **_: Any) -> Any:
        return AWSResponse(request.url, 200, {"X-Amzn-RequestId": "c"}, Raw())

    lean.meta.events.register("before-send.dynamodb.GetItem", answer)
    response = lean.get_item(**KEY)
    assert response["Item"] == {"pk": {"S": "canned"}}
    assert response["ResponseMetadata"]["RequestId"] == "c"
    assert len(flaky.sent) == 1  # answered in place: nothing sent


def test_an_app_under_motos_mock_aws_is_answered_by_moto() -> None:
    with mock_aws():
        clients = _clients("lean")
        clients.endpoint_url = None
        dynamodb = clients.client("dynamodb")
        assert isinstance(dynamodb, LeanClient)
        dynamodb.create_table(
            TableName="runs",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        dynamodb.put_item(TableName="runs", Item={"pk": {"S": "a"}, "n": {"N": "1"}})
        item = dynamodb.get_item(TableName="runs", Key={"pk": {"S": "a"}})["Item"]
        assert item == {"pk": {"S": "a"}, "n": {"N": "1"}}


def test_the_signing_key_is_derived_again_when_the_secret_or_the_day_changes() -> None:
    keys = SigningKeys("dynamodb", "eu-west-1")

    def botocores(secret: str, day: str) -> bytes:
        signer = SigV4Auth(Credentials("AKID", secret), "dynamodb", "eu-west-1")
        key = signer._sign(f"AWS4{secret}".encode(), day)
        for part in ("eu-west-1", "dynamodb", "aws4_request"):
            key = signer._sign(key, part)
        return key

    for secret, day in [
        ("s1", "20261204"),
        ("s1", "20261205"),
        ("s2", "20261205"),
        ("s1", "20261204"),
    ]:
        assert keys.key(secret, day) == botocores(secret, day)
