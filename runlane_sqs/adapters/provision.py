"""Create the table and queues when absent: for local use and tests.

Production deployments create the same resources from ``infra/`` (CloudFormation).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from botocore.exceptions import BotoCoreError, ClientError

from runlane_sqs.adapters.aws import endpoint_of
from runlane_sqs.adapters.dynamodb.errors import PARAMETER_ERRORS, error_code, translate
from runlane_sqs.adapters.dynamodb.items import TTL_ATTRIBUTE, table_definition
from runlane_sqs.core.errors import ConfigurationError, TransportError
from runlane_sqs.core.limits import (
    DEFAULT_MAX_RECEIVE_COUNT,
    DEFAULT_VISIBILITY_TIMEOUT_SECONDS,
)

log = logging.getLogger("runlane_sqs.provision")
DLQ_SUFFIX = "-dlq"
DLQ_RETENTION_SECONDS = 14 * 24 * 3600
TABLE_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
"""DynamoDB's rule for table names, checked before ``CreateTable``."""
INVALID_REQUEST_CODES = frozenset(
    {
        "ValidationException",
        "InvalidParameterValue",
        "InvalidParameterValueException",
        "InvalidAttributeName",
        "InvalidAttributeValue",
        "InvalidParameterCombination",
        "MissingParameter",
    }
)
"""AWS refused the request itself (a bad name or attribute): sending it again cannot
succeed, so provisioning raises :class:`ConfigurationError`."""
QUEUE_EXISTS_CODES = frozenset(
    {"QueueAlreadyExists", "QueueNameExists", "AWS.SimpleQueueService.QueueNameExists"}
)
"""``CreateQueue`` of a queue that exists with other attributes."""


def invalid_request(exc: Exception, what: str, endpoint: str | None) -> ConfigurationError | None:
    """A :class:`ConfigurationError` for a request refused as invalid (by AWS, or by
    botocore's parameter check), else ``None``."""
    if isinstance(exc, ClientError) and error_code(exc) in INVALID_REQUEST_CODES:
        message = exc.response.get("Error", {}).get("Message") or str(exc)
        where = endpoint or "the default AWS endpoint"
        return ConfigurationError(f"cannot create {what} at {where}: {message} ({error_code(exc)})")
    if isinstance(exc, PARAMETER_ERRORS):
        return ConfigurationError(f"cannot create {what}: {exc}")
    return None


def _table_error(exc: Exception, table: str, endpoint: str | None) -> NoReturn:
    invalid = invalid_request(exc, f"DynamoDB table {table!r}", endpoint)
    if invalid is not None:
        raise invalid from exc
    translate(exc, table=table, endpoint=endpoint)


def _queue_error(exc: Exception, name: str, endpoint: str | None) -> NoReturn:
    invalid = invalid_request(exc, f"SQS queue {name!r}", endpoint)
    if invalid is not None:
        raise invalid from exc
    if isinstance(exc, ClientError):
        raise TransportError(f"creating SQS queue {name!r} failed: {exc}") from exc
    where = endpoint or "the default AWS endpoint"
    raise TransportError(f"cannot reach SQS at {where}: {exc}") from exc


def provision_table(client: Any, table: str) -> bool:
    """Create the table (and enable TTL) if it does not exist. True if created.

    A table that exists is left as it is, but for the indexes an earlier version did not
    make, which are added (:func:`add_missing_indexes`). A name DynamoDB refuses, or a request it
    refuses as invalid, is a :class:`ConfigurationError`; other failures are translated
    as the store's are (``StorageUnavailable`` only when trying again may succeed)."""
    if not TABLE_NAME_PATTERN.fullmatch(table):
        raise ConfigurationError(
            f"{table!r} is not a valid DynamoDB table name: 3 to 255 letters, digits, "
            "'_', '-' and '.' (set RUNLANE_TABLE or table=)"
        )
    endpoint = endpoint_of(client)
    try:
        client.create_table(**table_definition(table))
    except ClientError as exc:
        if error_code(exc) == "ResourceInUseException":
            add_missing_indexes(client, table)
            return False
        _table_error(exc, table, endpoint)
    except BotoCoreError as exc:
        _table_error(exc, table, endpoint)
    try:
        client.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 1})
        client.update_time_to_live(
            TableName=table,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
        )
    except (ClientError, BotoCoreError) as exc:
        _table_error(exc, table, endpoint)
    log.info("created table %s", table)
    return True


INDEX_WAIT_SECONDS = 1.0
"""How often an index being added is looked at until DynamoDB says it is active."""


def add_missing_indexes(
    client: Any, table: str, sleep: Callable[[float], None] = time.sleep
) -> list[str]:
    """Add the indexes a table made by an earlier version lacks (the tag indexes,
    docs/tags.md), one at a time (DynamoDB creates one index per ``UpdateTable``), each
    waited for until active; returns their names. Runs written before keep their tags'
    attributes, so DynamoDB fills each new index with them as it builds it."""
    endpoint = endpoint_of(client)
    wanted = table_definition(table)
    added: list[str] = []
    try:
        described = client.describe_table(TableName=table)["Table"]
        present = {i["IndexName"] for i in described.get("GlobalSecondaryIndexes", [])}
        for index in wanted["GlobalSecondaryIndexes"]:
            if index["IndexName"] in present:
                continue
            names = {key["AttributeName"] for key in index["KeySchema"]}
            log.warning(
                "table %s has no index %s: adding it (DynamoDB builds it from the items)",
                table,
                index["IndexName"],
            )
            client.update_table(
                TableName=table,
                AttributeDefinitions=[
                    d for d in wanted["AttributeDefinitions"] if d["AttributeName"] in names
                ],
                GlobalSecondaryIndexUpdates=[{"Create": index}],
            )
            _wait_for_index(client, table, index["IndexName"], sleep)
            added.append(index["IndexName"])
    except (ClientError, BotoCoreError) as exc:
        _table_error(exc, table, endpoint)
    return added


def _wait_for_index(client: Any, table: str, name: str, sleep: Callable[[float], None]) -> None:
    while True:
        described = client.describe_table(TableName=table)["Table"]
        status = {
            i["IndexName"]: i.get("IndexStatus", "ACTIVE")
            for i in described.get("GlobalSecondaryIndexes", [])
        }
        if status.get(name) == "ACTIVE" and described.get("TableStatus", "ACTIVE") == "ACTIVE":
            log.info("table %s: index %s is active", table, name)
            return
        sleep(INDEX_WAIT_SECONDS)


def provision_bucket(client: Any, bucket: str) -> bool:
    """Create the payload bucket (public access blocked) if it does not exist. True if
    created. Local use only: on AWS the stack's template makes it, with its lifecycle
    rule and encryption (docs/payloads.md)."""
    try:
        client.head_bucket(Bucket=bucket)
        return False
    except ClientError as exc:
        if error_code(exc) not in ("404", "NoSuchBucket", "NotFound"):
            raise
    region = client.meta.region_name
    request: dict[str, Any] = {"Bucket": bucket}
    if region and region != "us-east-1":  # us-east-1 refuses a location constraint
        request["CreateBucketConfiguration"] = {"LocationConstraint": region}
    client.create_bucket(**request)
    client.put_public_access_block(
        Bucket=bucket,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
    )
    log.info("created bucket %s", bucket)
    return True


def provision_queues(
    client: Any,
    names: Sequence[str],
    *,
    visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT_SECONDS,
    max_receive_count: int = DEFAULT_MAX_RECEIVE_COUNT,
) -> dict[str, str]:
    """Create each queue (SQS names) with its dead-letter queue; returns name -> URL.

    Safe to repeat: a queue that exists is left as it is, and when its attributes differ
    from these, a warning names them (:func:`ensure_queue`). A name SQS refuses is a
    :class:`ConfigurationError`; other failures a :class:`TransportError`."""
    urls: dict[str, str] = {}
    for name in names:
        fifo = name.endswith(".fifo")
        base = name[: -len(".fifo")] if fifo else name
        dlq_name = f"{base}{DLQ_SUFFIX}" + (".fifo" if fifo else "")
        dlq_attributes = {"MessageRetentionPeriod": str(DLQ_RETENTION_SECONDS)}
        if fifo:
            dlq_attributes["FifoQueue"] = "true"
        dlq_url = ensure_queue(client, dlq_name, dlq_attributes)
        dlq_arn = _queue_attributes(client, dlq_name, dlq_url, ["QueueArn"])["QueueArn"]
        attributes = {
            "VisibilityTimeout": str(visibility_timeout),
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}
            ),
        }
        if fifo:
            attributes["FifoQueue"] = "true"
        urls[name] = ensure_queue(client, name, attributes)
        log.info("queue %s ready (dead-letter queue %s)", name, dlq_name)
    return urls


def ensure_queue(client: Any, name: str, attributes: Mapping[str, str]) -> str:
    """The URL of queue ``name``, created with ``attributes`` if it does not exist.

    ``CreateQueue`` returns an existing queue whose attributes are the same, and refuses
    one whose attributes differ (``QueueAlreadyExists``): that queue is left as it is,
    with a warning naming the attributes that differ."""
    endpoint = endpoint_of(client)
    try:
        return str(client.create_queue(QueueName=name, Attributes=dict(attributes))["QueueUrl"])
    except ClientError as exc:
        if error_code(exc) not in QUEUE_EXISTS_CODES:
            _queue_error(exc, name, endpoint)
    except BotoCoreError as exc:
        _queue_error(exc, name, endpoint)
    try:
        url = str(client.get_queue_url(QueueName=name)["QueueUrl"])
    except (ClientError, BotoCoreError) as exc:
        _queue_error(exc, name, endpoint)
    current = _queue_attributes(client, name, url, list(attributes))
    differences = differing_attributes(attributes, current)
    if differences:
        log.warning(
            "queue %s exists with other attributes; left as they are: %s",
            name,
            "; ".join(f"{k} is {current.get(k)!r}, not {v!r}" for k, v in differences.items()),
            extra={"queue": name, "differences": sorted(differences)},
        )
    else:
        log.info("queue %s exists with other settings; left as it is", name)
    return url


def _queue_attributes(client: Any, name: str, url: str, names: list[str]) -> dict[str, str]:
    try:
        response = client.get_queue_attributes(QueueUrl=url, AttributeNames=names)
    except (ClientError, BotoCoreError) as exc:
        _queue_error(exc, name, endpoint_of(client))
    return dict(response.get("Attributes", {}))


def differing_attributes(wanted: Mapping[str, str], current: Mapping[str, str]) -> dict[str, str]:
    """The attributes of ``wanted`` whose value ``current`` does not have (a redrive
    policy compared as JSON, its numbers as text)."""
    return {k: v for k, v in wanted.items() if _normal(k, v) != _normal(k, current.get(k))}


def _normal(name: str, value: str | None) -> object:
    if name == "RedrivePolicy" and value:
        try:
            policy = json.loads(value)
        except ValueError:
            return value
        return {k: str(v) for k, v in policy.items()} if isinstance(policy, dict) else value
    return value
