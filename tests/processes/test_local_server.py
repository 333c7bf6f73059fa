"""``MotoServer``, the embedded local backend: it serves on its own port or says why not.

A port that is taken, or a server process that exits before it answers, is a
``LocalServerError`` naming the port and the reason, never a server that seems to start.
Started with ``check_signatures=True``, it serves only requests signed by its one key,
before and after a reset.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from runlane_sqs.local import (
    LOCAL_CREDENTIALS,
    LOCAL_REGION,
    LocalServerError,
    MotoServer,
    free_port,
)
from runlane_sqs.local import moto as local_moto
from runlane_sqs.local.moto import CHECKED_CREDENTIALS


@pytest.fixture
def listening_socket() -> Iterator[socket.socket]:
    """A port another program listens on (it never answers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


def test_a_port_another_program_listens_on_is_refused_with_the_port_named(
    listening_socket: socket.socket,
) -> None:
    port = listening_socket.getsockname()[1]
    server = MotoServer(port)

    with pytest.raises(LocalServerError, match=f"port {port} is already in use"):
        server.start()
    assert not server.running


def test_another_moto_server_answering_on_the_port_is_not_taken_for_ours(
    moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the port is taken between the check and the server's own bind: our server exits,
    # and the other one, which answers moto's requests, must not pass for it
    monkeypatch.setattr(local_moto, "ensure_port_free", lambda port: None)
    server = MotoServer(moto_server.port)

    with pytest.raises(LocalServerError) as raised:
        server.start()
    message = str(raised.value)
    assert message.startswith(f"the moto server on port {moto_server.port} exited with code 1")
    assert "Address already in use" in message  # from its stderr
    assert not server.running
    moto_server.reset()  # the other server is untouched


def test_a_server_that_dies_at_start_quotes_the_end_of_its_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a moto that cannot be imported in the server process (a broken install)
    broken = tmp_path / "moto"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise RuntimeError('this moto is broken')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    port = free_port()
    server = MotoServer(port)

    with pytest.raises(LocalServerError) as raised:
        server.start()
    message = str(raised.value)
    assert message.startswith(f"the moto server on port {port} exited with code 1")
    assert message.endswith("RuntimeError: this moto is broken")
    assert not server.running


def test_a_free_port_is_chosen_when_none_is_given_and_the_server_serves_on_it() -> None:
    with MotoServer() as server:
        assert server.running
        server.check_running()  # alive: no error
        server.reset()  # it answers moto's own API on its port
    assert not server.running
    with pytest.raises(LocalServerError, match=f"port {server.port} is not running"):
        server.check_running()


# --- check_signatures: only requests signed by the server's one key are served ------------


@pytest.fixture(scope="module")
def checking_server() -> Iterator[MotoServer]:
    with MotoServer(check_signatures=True) as server:
        yield server


def _client(server: MotoServer, service: str, key_id: str, secret: str) -> Any:
    make: Callable[..., Any] = boto3.client  # any service by name
    return make(
        service,
        endpoint_url=server.endpoint_url,
        region_name=LOCAL_REGION,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}),
    )


def _refusal(call: Callable[[], object]) -> str:
    """What the server answered to a refused request (its status is 403)."""
    with pytest.raises(ClientError) as refused:
        call()
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    return str(refused.value)


@pytest.mark.integration
def test_a_server_checking_signatures_serves_its_key_and_its_environment_gives_that_key(
    checking_server: MotoServer,
) -> None:
    env = checking_server.environment()
    assert env["AWS_ACCESS_KEY_ID"] == CHECKED_CREDENTIALS["AWS_ACCESS_KEY_ID"]
    key_id, secret = env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    sts = _client(checking_server, "sts", key_id, secret)
    assert sts.get_caller_identity()["Arn"] == "arn:aws:iam::123456789012:user/runlane-local"
    sqs = _client(checking_server, "sqs", key_id, secret)
    url = sqs.create_queue(QueueName="signed")["QueueUrl"]
    assert sqs.list_queues()["QueueUrls"] == [url]
    # a GET with neither body nor query string (moto alone would hash its headers)
    assert _client(checking_server, "lambda", key_id, secret).list_functions()["Functions"] == []


@pytest.mark.integration
def test_a_wrong_secret_is_refused_as_a_signature_that_does_not_match(
    checking_server: MotoServer,
) -> None:
    key_id = CHECKED_CREDENTIALS["AWS_ACCESS_KEY_ID"]
    for service, call in (
        ("dynamodb", "list_tables"),
        ("sqs", "list_queues"),
        ("sts", "get_caller_identity"),
        ("lambda", "list_functions"),
    ):
        client = _client(checking_server, service, key_id, "not-the-secret")
        assert "SignatureDoesNotMatch" in _refusal(getattr(client, call)), service


@pytest.mark.integration
def test_an_unknown_key_is_refused_even_with_its_own_right_signature(
    checking_server: MotoServer,
) -> None:
    for key_id, secret in (
        ("AKIAUNKNOWNKEY000001", CHECKED_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]),
        (LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"], LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]),
    ):
        dynamodb = _client(checking_server, "dynamodb", key_id, secret)
        assert "InvalidClientTokenId" in _refusal(dynamodb.list_tables), key_id


@pytest.mark.integration
def test_the_key_stays_valid_and_checks_stay_on_after_a_reset(
    checking_server: MotoServer,
) -> None:
    key_id, secret = (CHECKED_CREDENTIALS[name] for name in CHECKED_CREDENTIALS)
    sqs = _client(checking_server, "sqs", key_id, secret)
    sqs.create_queue(QueueName="forgotten")
    for _ in range(2):  # the reset itself is unsigned
        checking_server.reset()
        assert sqs.list_queues().get("QueueUrls", []) == []
        sqs.create_queue(QueueName="after-reset")
        wrong = _client(checking_server, "sqs", key_id, "not-the-secret")
        assert "SignatureDoesNotMatch" in _refusal(wrong.list_queues)


@pytest.mark.integration
def test_a_server_started_without_checks_serves_any_key() -> None:
    with MotoServer() as server:
        assert server.environment()["AWS_ACCESS_KEY_ID"] == LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"]
        made_up = _client(server, "dynamodb", "AKIAMADEUPKEY0000001", "any-secret")
        assert made_up.list_tables()["TableNames"] == []
