"""Create the table and queues when absent: for local use and tests.

Production deployments create the same resources from ``infra/`` (CloudFormation).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from runlane_sqs.adapters.dynamodb.items import TTL_ATTRIBUTE, RunItem
from runlane_sqs.core.limits import (
    DEFAULT_MAX_RECEIVE_COUNT,
    DEFAULT_VISIBILITY_TIMEOUT_SECONDS,
)

log = logging.getLogger("runlane_sqs.provision")
DLQ_SUFFIX = "-dlq"
DLQ_RETENTION_SECONDS = 14 * 24 * 3600


def _hash_first(key_schema: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(k) for k in sorted(key_schema, key=lambda k: k["KeyType"] != "HASH")]


def table_definition(table: str) -> dict[str, Any]:
    """The ``CreateTable`` request for the runlane table, from the PynamoDB models."""
    schema = RunItem._get_schema()
    return {
        "TableName": table,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": schema["attribute_definitions"],
        "KeySchema": _hash_first(schema["key_schema"]),
        "GlobalSecondaryIndexes": [
            {
                "IndexName": index["index_name"],
                "KeySchema": _hash_first(index["key_schema"]),
                "Projection": index["projection"],
            }
            for index in schema["global_secondary_indexes"]
        ],
        "SSESpecification": {"Enabled": True},
    }


def provision_table(client: Any, table: str) -> bool:
    """Create the table (and enable TTL) if it does not exist. True if created."""
    try:
        client.create_table(**table_definition(table))
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ResourceInUseException":
            return False
        raise
    client.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 1})
    client.update_time_to_live(
        TableName=table,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
    )
    log.info("created table %s", table)
    return True


def provision_queues(
    client: Any,
    names: Sequence[str],
    *,
    visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT_SECONDS,
    max_receive_count: int = DEFAULT_MAX_RECEIVE_COUNT,
) -> dict[str, str]:
    """Create each queue (SQS names) with its dead-letter queue; returns name -> URL.

    ``CreateQueue`` is idempotent for identical attributes, so this is safe to repeat.
    """
    urls: dict[str, str] = {}
    for name in names:
        fifo = name.endswith(".fifo")
        base = name[: -len(".fifo")] if fifo else name
        dlq_name = f"{base}{DLQ_SUFFIX}" + (".fifo" if fifo else "")
        dlq_attributes = {"MessageRetentionPeriod": str(DLQ_RETENTION_SECONDS)}
        if fifo:
            dlq_attributes["FifoQueue"] = "true"
        dlq_url = client.create_queue(QueueName=dlq_name, Attributes=dlq_attributes)["QueueUrl"]
        dlq_arn = client.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        attributes = {
            "VisibilityTimeout": str(visibility_timeout),
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}
            ),
        }
        if fifo:
            attributes["FifoQueue"] = "true"
        urls[name] = client.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        log.info("queue %s ready (dead-letter queue %s)", name, dlq_name)
    return urls
