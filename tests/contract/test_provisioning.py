"""``provision()`` on the emulators: it creates what is missing and leaves what exists,
even a queue whose attributes differ from its own (saying which); a name AWS refuses is a
permanent ``ConfigurationError``, never the transient ``StorageUnavailable``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from botocore.config import Config

from runlane_sqs import ConfigurationError, Runlane, StorageUnavailable
from runlane_sqs.adapters.dynamodb.items import TAG_INDEXES, table_definition
from runlane_sqs.adapters.provision import provision_queues
from runlane_sqs.errors import MissingResourceError
from runlane_sqs.local import free_port

MakeApp = Callable[..., Runlane]


def visibility_timeout(sqs: Any, name: str) -> str:
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])
    return str(attributes["Attributes"]["VisibilityTimeout"])


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "runlane_sqs.provision" and r.levelno == logging.WARNING
    ]


def test_provisioning_again_with_another_visibility_timeout_keeps_the_first(
    make_app: MakeApp, sqs: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runlane_sqs.provision")
    app = make_app()
    name = app.transport.queue_name("emails")  # type: ignore[attr-defined]
    first = provision_queues(app.client("sqs"), [name], visibility_timeout=60)

    again = provision_queues(app.client("sqs"), [name], visibility_timeout=30)

    assert again == first
    assert visibility_timeout(sqs, name) == "60"
    [warning] = warnings_of(caplog)
    assert f"queue {name} exists with other attributes; left as they are" in warning
    assert "VisibilityTimeout is '60', not '30'" in warning
    assert "RedrivePolicy" not in warning  # the same policy, however it is spelled


def test_app_provision_leaves_a_queue_made_elsewhere_as_it_is(
    make_app: MakeApp, sqs: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="runlane_sqs.provision")
    app = make_app()
    name = app.transport.queue_name("default")  # type: ignore[attr-defined]
    sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "120"})

    app.provision(["default"])
    app.provision(["default"])

    assert visibility_timeout(sqs, name) == "120"
    assert len(warnings_of(caplog)) == 2
    assert all("VisibilityTimeout is '120', not '60'" in w for w in warnings_of(caplog))
    assert app.transport.queue_url("default").endswith(f"/{name}")  # type: ignore[attr-defined]


def test_a_table_name_dynamodb_refuses_is_a_configuration_error(
    make_app: MakeApp, dynamodb: Any
) -> None:
    app = make_app(table="orders table!")

    with pytest.raises(ConfigurationError) as error:
        app.provision(["default"])

    assert not isinstance(error.value, StorageUnavailable)
    assert "'orders table!' is not a valid DynamoDB table name" in str(error.value)
    assert dynamodb.list_tables()["TableNames"] == []


def test_a_queue_name_sqs_refuses_is_a_configuration_error(make_app: MakeApp, sqs: Any) -> None:
    app = make_app(queue_prefix="my queues/")

    with pytest.raises(ConfigurationError) as error:
        app.provision(["default"])

    message = str(error.value)
    assert "cannot create SQS queue 'my queues/default" in message  # its dead-letter queue
    assert "InvalidParameterValue" in message
    assert sqs.list_queues().get("QueueUrls", []) == []


def test_an_unreachable_endpoint_is_still_unavailable(make_app: MakeApp) -> None:
    app = make_app(
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        botocore_config=Config(retries={"mode": "standard", "max_attempts": 1}),
    )

    with pytest.raises(StorageUnavailable, match="cannot reach DynamoDB"):
        app.provision(["default"])


def test_provisioning_adds_the_tag_indexes_a_table_made_before_them_lacks(
    make_app: MakeApp, caplog: pytest.LogCaptureFixture
) -> None:
    """A table made by a version without tags (its definition less the tag indexes):
    tagged runs are written, a listing by tag is a clear error naming the way out, and
    ``provision()`` adds the indexes, which then hold the runs written before."""
    caplog.set_level(logging.INFO, logger="runlane_sqs.provision")
    app = make_app()
    dynamodb = app.client("dynamodb")
    older = table_definition(app.config.table)
    older["GlobalSecondaryIndexes"] = [
        i for i in older["GlobalSecondaryIndexes"] if not i["IndexName"].startswith("tag_")
    ]
    older["AttributeDefinitions"] = [
        d for d in older["AttributeDefinitions"] if not d["AttributeName"].startswith("tag_pk_")
    ]
    dynamodb.create_table(**older)
    app.provision(["default"])  # the queues; and the table's missing indexes
    indexes = dynamodb.describe_table(TableName=app.config.table)["Table"]
    assert {i["IndexName"] for i in indexes["GlobalSecondaryIndexes"]} >= set(TAG_INDEXES)
    assert [w for w in warnings_of(caplog) if "adding it" in w] == [
        f"table {app.config.table} has no index {name}: adding it (DynamoDB builds it from "
        "the items)"
        for name in TAG_INDEXES
    ]


def test_a_listing_by_tag_on_a_table_without_tag_indexes_says_how_to_add_them(
    make_app: MakeApp,
) -> None:
    app = make_app()
    older = table_definition(app.config.table)
    older["GlobalSecondaryIndexes"] = [
        i for i in older["GlobalSecondaryIndexes"] if not i["IndexName"].startswith("tag_")
    ]
    older["AttributeDefinitions"] = [
        d for d in older["AttributeDefinitions"] if not d["AttributeName"].startswith("tag_pk_")
    ]
    app.client("dynamodb").create_table(**older)
    app.task(lambda ctx, payload: None, name="export")
    provision_queues(app.client("sqs"), [app.transport.queue_name("default")])  # type: ignore[attr-defined]
    run = app.trigger("export", {}, tags={"customer": "42"})  # written: tags on the item

    with pytest.raises(MissingResourceError, match=r"has no tag indexes .*runlane-sqs provision"):
        app.runs.list(tags={"customer": "42"})

    app.provision(["default"])
    assert [r.id for r in app.runs.list(tags={"customer": "42"}).runs] == [run.id]
