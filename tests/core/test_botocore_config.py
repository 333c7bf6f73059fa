"""The app's boto3 clients send a user agent built once, so botocore does not rebuild
it for every request; a user agent the user configures is kept. Each client is built
once, however many threads ask for it at once."""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import botocore.endpoint
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import ClientError

from runlane_sqs.adapters.aws import USER_AGENT, AwsClients, default_botocore_config
from runlane_sqs.core.errors import ConfigurationError


def clients(config: Config | None = None) -> AwsClients:
    session = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test")
    return AwsClients(
        region="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        session=session,
        botocore_config=config,
    )


class Body:
    """An empty JSON answer."""

    def stream(self, **_: Any) -> Any:
        return iter([b"{}"])

    def read(self, *_: Any, **__: Any) -> bytes:
        return b"{}"


def sent_user_agents(client: Any, requests: int) -> list[str]:
    """The ``User-Agent`` of ``requests`` calls, answered without a network."""
    seen: list[str] = []

    def answer(request: Any, **_: Any) -> AWSResponse:
        seen.append(request.headers["User-Agent"].decode())
        return AWSResponse(request.url, 200, {}, Body())

    client.meta.events.register("before-send", answer)
    for _ in range(requests):
        client.list_tables()
    return seen


def test_every_request_carries_the_user_agent_built_once() -> None:
    client = clients().client("dynamodb")
    agents = sent_user_agents(client, 2)
    assert agents[0] == agents[1]
    assert agents[0].startswith(USER_AGENT)
    assert agents[0].startswith("runlane-sqs/")


def test_a_users_config_gets_the_fixed_user_agent_and_keeps_its_settings() -> None:
    config = clients(Config(retries={"max_attempts": 2}, read_timeout=3)).botocore_config
    assert config.user_agent == USER_AGENT
    assert config.retries == {"max_attempts": 2}
    assert config.read_timeout == 3


def test_a_users_own_user_agent_is_kept() -> None:
    config = clients(Config(user_agent="billing-service/1.0")).botocore_config
    assert config.user_agent == "billing-service/1.0"


def test_the_sdks_retry_variables_set_the_default_retries() -> None:
    environ = {"AWS_MAX_ATTEMPTS": "2", "AWS_RETRY_MODE": "adaptive"}
    config = default_botocore_config(environ)
    assert config.retries == {"mode": "adaptive", "total_max_attempts": 2}
    assert config.user_agent == USER_AGENT
    assert default_botocore_config({}).retries == {"mode": "standard", "total_max_attempts": 5}


def test_a_request_is_tried_five_times_in_all_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first try and four retries, as docs/operations.md says."""
    waits: list[float] = []
    monkeypatch.setattr(botocore.endpoint.time, "sleep", waits.append)
    client = clients().client("dynamodb")
    tries = []

    def refuse(request: Any, **_: Any) -> AWSResponse:
        tries.append(request)
        return AWSResponse(request.url, 500, {}, Body())

    client.meta.events.register("before-send", refuse)
    with pytest.raises(ClientError):
        client.list_tables()
    assert len(tries) == 5
    assert len(waits) == 4


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"AWS_MAX_ATTEMPTS": "many"}, "AWS_MAX_ATTEMPTS must be a whole number"),
        ({"AWS_MAX_ATTEMPTS": "0"}, "from 1 to 100, not '0'"),
        ({"AWS_RETRY_MODE": "eager"}, "AWS_RETRY_MODE must be one of legacy, standard"),
    ],
)
def test_a_bad_retry_variable_is_a_clear_error(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        default_botocore_config(environ)


def test_threads_asking_at_once_share_one_client_built_once() -> None:
    """A worker's attempt threads all want the DynamoDB client at their first claim."""
    made = clients()
    build = made.session.client
    arrived = threading.Barrier(8)
    builds: list[str] = []

    def counted(service: str, **kwargs: Any) -> Any:
        builds.append(service)
        with contextlib.suppress(threading.BrokenBarrierError):
            arrived.wait(timeout=0.5)  # were it unguarded, every thread would be here
        return build(service, **kwargs)

    made.session.client = counted  # type: ignore[method-assign]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: made.client("dynamodb"), range(8)))
    assert builds == ["dynamodb"]
    assert all(client is got[0] for client in got)
