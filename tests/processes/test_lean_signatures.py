"""The lean client's requests, signed outside the botocore client, verified by a server.

A moto server of its own, started with ``INITIAL_NO_AUTH_ACTION_COUNT`` set so that only
the three IAM requests that make a user and its access key go unchecked: every request
after them must carry a valid SigV4 signature of a known key (moto answers
``SignatureDoesNotMatch`` otherwise). An app on that key with ``RUNLANE_AWS_CLIENT=lean``
provisions its table and queues, triggers runs and drains them with a sync worker; the
same requests with a wrong secret are refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from runlane_sqs import Runlane, RunStatus
from runlane_sqs.adapters.lean.client import LeanClient
from runlane_sqs.local import MotoServer
from runlane_sqs.local.moto import LOCAL_CREDENTIALS, LOCAL_REGION

pytestmark = pytest.mark.integration

UNCHECKED_SETUP = 3
"""The IAM requests that make the user, its policy and its key, before checks begin."""


@pytest.fixture(scope="module")
def checked_server() -> Iterator[tuple[MotoServer, dict[str, str]]]:
    before = os.environ.get("INITIAL_NO_AUTH_ACTION_COUNT")
    os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = str(UNCHECKED_SETUP)
    try:
        server = MotoServer().start()
    finally:
        if before is None:
            del os.environ["INITIAL_NO_AUTH_ACTION_COUNT"]
        else:
            os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = before
    try:
        iam = boto3.client(
            "iam",
            endpoint_url=server.endpoint_url,
            region_name=LOCAL_REGION,
            aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )
        iam.create_user(UserName="worker")
        everything = {"Effect": "Allow", "Action": "*", "Resource": "*"}
        iam.put_user_policy(
            UserName="worker",
            PolicyName="all",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [everything]}),
        )
        key = iam.create_access_key(UserName="worker")["AccessKey"]
        yield server, {"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}
    finally:
        server.stop()


def _app(server: MotoServer, key_id: str, secret: str, name: str) -> Runlane:
    session = boto3.session.Session(
        aws_access_key_id=key_id, aws_secret_access_key=secret, region_name=LOCAL_REGION
    )
    return Runlane(
        table=f"signed-{name}",
        environment="signed",
        queue_prefix=f"signed-{name}-",
        region=LOCAL_REGION,
        endpoint_url=server.endpoint_url,
        session=session,
    )


def _double(ctx: Any, payload: Any) -> Any:
    return payload["n"] * 2


def test_runs_complete_when_every_request_is_signed_by_the_lean_client(
    checked_server: tuple[MotoServer, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, key = checked_server
    monkeypatch.setenv("RUNLANE_AWS_CLIENT", "lean")
    app = _app(server, key["id"], key["secret"], "ok")
    app.task(_double, name="double")
    app.provision()
    assert isinstance(app.aws.client("dynamodb"), LeanClient)
    assert isinstance(app.aws.client("sqs"), LeanClient)
    runs = [app.trigger("double", {"n": n}) for n in range(5)]
    runs += app.trigger_many("double", [{"n": n} for n in range(5, 10)])
    worker = app.worker(concurrency=4)
    while worker.drain():
        pass
    done = [app.runs.get(run.id) for run in runs]
    assert [(r.status, r.result) for r in done] == [(RunStatus.SUCCEEDED, n * 2) for n in range(10)]


def test_a_wrong_secret_is_refused_by_the_server(
    checked_server: tuple[MotoServer, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, key = checked_server
    monkeypatch.setenv("RUNLANE_AWS_CLIENT", "lean")
    app = _app(server, key["id"], "not-the-secret", "refused")
    dynamodb, sqs = app.aws.client("dynamodb"), app.aws.client("sqs")
    assert isinstance(dynamodb, LeanClient)
    for call in (
        lambda: dynamodb.get_item(TableName="signed-ok", Key={"pk": {"S": "x"}, "sk": {"S": "y"}}),
        lambda: sqs.receive_message(QueueUrl=f"{server.endpoint_url}/123456789012/signed-ok-x"),
    ):
        with pytest.raises(ClientError) as refused:
            call()
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        assert "SignatureDoesNotMatch" in str(refused.value)
