"""The lean client's requests, signed outside the botocore client, verified by a server.

A moto server of its own checks every request's SigV4 signature
(``MotoServer(check_signatures=True)``): it serves the one key it registers, and refuses
a wrong secret (``SignatureDoesNotMatch``), an unknown key and a wrong session token
(``InvalidClientTokenId``). An app with ``RUNLANE_AWS_CLIENT=lean`` provisions its table
and queues, triggers runs and drains them, signed with that key or with temporary
credentials of a role it assumed through STS (a session token, from the environment as
a deployed worker finds them); the same requests with a wrong secret or a wrong token
are refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from runlane_sqs import Runlane, RunStatus
from runlane_sqs.adapters.lean.client import LeanClient
from runlane_sqs.local import LOCAL_REGION, MotoServer
from runlane_sqs.local.moto import CHECKED_USER_NAME
from tests.workers import KINDS, WorkerKind

pytestmark = pytest.mark.integration

ACCOUNT = "123456789012"
ROLE = "runlane-worker"
EVERYTHING = {"Effect": "Allow", "Action": "*", "Resource": "*"}


@pytest.fixture(scope="module")
def checked_server() -> Iterator[MotoServer]:
    with MotoServer(check_signatures=True) as server:
        yield server


@pytest.fixture(scope="module")
def role_credentials(checked_server: MotoServer) -> dict[str, str]:
    """Temporary credentials (with a session token) of a role the server's user may
    assume and that may do everything, as ``AWS_*`` variables."""
    key = checked_server.credentials
    session = boto3.session.Session(
        aws_access_key_id=key["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=key["AWS_SECRET_ACCESS_KEY"],
        region_name=LOCAL_REGION,
    )
    iam = session.client("iam", endpoint_url=checked_server.endpoint_url)
    sts = session.client("sts", endpoint_url=checked_server.endpoint_url)
    user = f"arn:aws:iam::{ACCOUNT}:user/{CHECKED_USER_NAME}"
    trust = {"Effect": "Allow", "Principal": {"AWS": user}, "Action": "sts:AssumeRole"}
    role = iam.create_role(RoleName=ROLE, AssumeRolePolicyDocument=_policy(trust))["Role"]
    iam.put_role_policy(RoleName=ROLE, PolicyName="everything", PolicyDocument=_policy(EVERYTHING))
    assumed = sts.assume_role(RoleArn=role["Arn"], RoleSessionName="worker")["Credentials"]
    assert not assumed["AccessKeyId"].startswith("AKIA")  # a role's key, not a user's
    return {
        "AWS_ACCESS_KEY_ID": assumed["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": assumed["SecretAccessKey"],
        "AWS_SESSION_TOKEN": assumed["SessionToken"],
    }


def _policy(statement: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


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


def _env_app(
    server: MotoServer, credentials: dict[str, str], name: str, monkeypatch: pytest.MonkeyPatch
) -> Runlane:
    """An app configured by the environment only, credentials included (as on a host
    where the SDK's provider chain finds them)."""
    # the per-service endpoints of another backend (make test-aws-local) would win
    others = ("AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS")
    for variable in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", *others):
        monkeypatch.delenv(variable, raising=False)
    env = {
        **server.environment(),
        **credentials,
        "RUNLANE_TABLE": f"signed-{name}",
        "RUNLANE_ENVIRONMENT": "signed",
        "RUNLANE_QUEUE_PREFIX": f"signed-{name}-",
        "RUNLANE_AWS_CLIENT": "lean",
    }
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    return Runlane.from_env()


def _double(ctx: Any, payload: Any) -> Any:
    return payload["n"] * 2


def _refusal(call: Callable[[], object]) -> str:
    """What the server answered to a refused request (403)."""
    with pytest.raises(ClientError) as refused:
        call()
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    return str(refused.value)


def _lean_requests(app: Runlane, server: MotoServer, table: str) -> list[Callable[[], object]]:
    """One DynamoDB and one SQS request of the app's lean clients."""
    dynamodb, sqs = app.aws.client("dynamodb"), app.aws.client("sqs")
    assert isinstance(dynamodb, LeanClient)
    assert isinstance(sqs, LeanClient)
    return [
        lambda: dynamodb.get_item(TableName=table, Key={"pk": {"S": "x"}, "sk": {"S": "y"}}),
        lambda: sqs.receive_message(QueueUrl=f"{server.endpoint_url}/{ACCOUNT}/{table}-x"),
    ]


def test_runs_complete_when_every_request_is_signed_by_the_lean_client(
    checked_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = checked_server.credentials
    monkeypatch.setenv("RUNLANE_AWS_CLIENT", "lean")
    app = _app(checked_server, key["AWS_ACCESS_KEY_ID"], key["AWS_SECRET_ACCESS_KEY"], "ok")
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
    checked_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_id = checked_server.credentials["AWS_ACCESS_KEY_ID"]
    monkeypatch.setenv("RUNLANE_AWS_CLIENT", "lean")
    app = _app(checked_server, key_id, "not-the-secret", "refused")
    for call in _lean_requests(app, checked_server, "signed-ok"):
        assert "SignatureDoesNotMatch" in _refusal(call)


@pytest.mark.parametrize("kind", KINDS)
def test_runs_complete_signed_with_a_session_token_of_an_assumed_role(
    checked_server: MotoServer,
    role_credentials: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    app = _env_app(checked_server, role_credentials, f"role-{kind}", monkeypatch)
    found = app.boto_session.get_credentials()
    assert found is not None
    assert found.get_frozen_credentials().token == role_credentials["AWS_SESSION_TOKEN"]
    app.task(_double, name="double")
    app.provision()
    assert isinstance(app.aws.client("dynamodb"), LeanClient)
    runs = app.trigger_many("double", [{"n": n} for n in range(6)])
    WorkerKind(kind).drain_all(app)
    done = [app.runs.get(run.id) for run in runs]
    assert [(r.status, r.result) for r in done] == [(RunStatus.SUCCEEDED, n * 2) for n in range(6)]


@pytest.mark.parametrize(
    ("change", "answer"),
    [
        ({"AWS_SESSION_TOKEN": "not-the-token"}, "InvalidClientTokenId"),
        ({"AWS_SECRET_ACCESS_KEY": "not-the-secret"}, "SignatureDoesNotMatch"),
    ],
    ids=["wrong-token", "wrong-secret"],
)
def test_temporary_credentials_with_a_wrong_part_are_refused(
    checked_server: MotoServer,
    role_credentials: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    change: dict[str, str],
    answer: str,
) -> None:
    app = _env_app(checked_server, {**role_credentials, **change}, "role-refused", monkeypatch)
    for call in _lean_requests(app, checked_server, "signed-role-sync"):
        assert answer in _refusal(call)
