"""SQS queue names: each environment has queues of its own unless the app is given a
``queue_prefix`` (or ``RUNLANE_QUEUE_PREFIX``, or queue URLs), which then names them
exactly as before (issue 13, item 1)."""

from __future__ import annotations

import pytest

from runlane_sqs import MissingResourceError, Runlane
from runlane_sqs.adapters.sqs.transport import SqsTransport
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.limits import MAX_QUEUE_NAME_CHARS


def transport(app: Runlane) -> SqsTransport:
    assert isinstance(app.transport, SqsTransport)
    return app.transport


def test_without_a_prefix_the_queues_are_named_after_the_environment() -> None:
    prod, staging = Runlane(environment="prod"), Runlane(environment="staging")

    assert transport(prod).queue_name("default") == "runlane-prod-default"
    assert transport(staging).queue_name("default") == "runlane-staging-default"
    assert Runlane().config.sqs_queue_name("emails") == "runlane-dev-emails"
    assert RunlaneConfig.from_env({}).sqs_queue_prefix == "runlane-dev-"


@pytest.mark.parametrize("prefix", ["runlane-", "", "acme_jobs-"])
def test_a_given_prefix_names_the_queues_as_given_in_every_environment(prefix: str) -> None:
    apps = [Runlane(environment=env, queue_prefix=prefix) for env in ("prod", "staging")]

    assert [transport(app).queue_name("default") for app in apps] == [f"{prefix}default"] * 2


def test_runlane_queue_prefix_is_a_given_prefix_and_urls_win_over_it() -> None:
    url = "https://sqs.eu-west-1.amazonaws.com/1/orders-queue"
    config = RunlaneConfig.from_env(
        {
            "RUNLANE_ENVIRONMENT": "prod",
            "RUNLANE_QUEUE_PREFIX": "runlane-",
            "RUNLANE_QUEUE_URLS": f"orders={url}",
        }
    )

    assert config.sqs_queue_name("default") == "runlane-default"
    assert config.sqs_queue_name("orders") == "orders-queue"
    given = RunlaneConfig.from_env({"RUNLANE_ENVIRONMENT": "prod"}, queue_prefix="x-")
    assert given.sqs_queue_name("default") == "x-default"


def test_a_name_longer_than_sqs_allows_is_refused_with_what_to_shorten() -> None:
    app = Runlane(environment="e" * 32)
    fits = "q" * (MAX_QUEUE_NAME_CHARS - len("runlane--") - 32)

    assert len(transport(app).queue_name(fits)) == MAX_QUEUE_NAME_CHARS
    with pytest.raises(MissingResourceError, match="81 characters; SQS allows 80") as error:
        transport(app).queue_name(fits + "q")
    assert "queue_prefix" in str(error.value)
