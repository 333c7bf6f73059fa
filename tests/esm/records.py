"""What the event source mapping hands the function and makes of its answer, as pure
functions: Lambda SQS event records built from received messages, and the records a
response lets the mapping delete (``ReportBatchItemFailures``).

The record layout is AWS's (docs.aws.amazon.com/lambda/latest/dg/with-sqs.html): the
message's system attributes as strings (``ApproximateReceiveCount``, ``SentTimestamp``,
``SenderId``, ``ApproximateFirstReceiveTimestamp``; on a FIFO queue also
``SequenceNumber``, ``MessageGroupId`` and ``MessageDeduplicationId``), message attributes
in camel case with base64 binary values, ``eventSource`` ``aws:sqs``, the queue's ARN and
the region.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

EVENT_SOURCE = "aws:sqs"
BATCH_ITEM_FAILURES = "batchItemFailures"
ITEM_IDENTIFIER = "itemIdentifier"


def message_attributes(message: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A received message's ``MessageAttributes`` as Lambda writes them in a record."""
    converted: dict[str, dict[str, Any]] = {}
    for name, value in message.get("MessageAttributes", {}).items():
        entry: dict[str, Any] = {
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": value["DataType"],
        }
        if "StringValue" in value:
            entry["stringValue"] = value["StringValue"]
        if "BinaryValue" in value:
            entry["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode()
        converted[name] = entry
    return converted


def lambda_record(message: Mapping[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """The Lambda SQS event record of one message received with every system attribute
    (``MessageSystemAttributeNames=["All"]``) and message attribute."""
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {k: str(v) for k, v in message.get("Attributes", {}).items()},
        "messageAttributes": message_attributes(message),
        "md5OfBody": message["MD5OfBody"],
        "eventSource": EVENT_SOURCE,
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }
    if "MD5OfMessageAttributes" in message:
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record


def sqs_event(messages: Sequence[Mapping[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    return {"Records": [lambda_record(m, queue_arn, region) for m in messages]}


def reported_ids(response: object, message_ids: Sequence[str]) -> set[str] | None:
    """The records a function's response reports for redelivery, or ``None`` when the
    response fails the whole batch.

    As Lambda reads it: ``None``, an empty object, or a ``batchItemFailures`` that is
    ``None`` or empty is complete success; anything else than an object, a
    ``batchItemFailures`` that is not a list, or an entry that is not an object whose
    ``itemIdentifier`` is the ``messageId`` of a record of the batch fails the whole
    batch."""
    if response is None:
        return set()
    if not isinstance(response, Mapping):
        return None
    failures = response.get(BATCH_ITEM_FAILURES)
    if failures is None:
        return set()
    if not isinstance(failures, list):
        return None
    known = set(message_ids)
    reported: set[str] = set()
    for failure in failures:
        identifier = failure.get(ITEM_IDENTIFIER) if isinstance(failure, Mapping) else None
        if not isinstance(identifier, str) or identifier not in known:
            return None
        reported.add(identifier)
    return reported


def deletable(response: object, message_ids: Sequence[str]) -> list[str]:
    """The records the mapping deletes after the function returned ``response``: every
    record it did not report; none when the response fails the whole batch."""
    reported = reported_ids(response, message_ids)
    if reported is None:
        return []
    return [m for m in message_ids if m not in reported]


def fifo_group(message: Mapping[str, Any]) -> str | None:
    group = message.get("Attributes", {}).get("MessageGroupId")
    return group if isinstance(group, str) else None


def sequence_number(message: Mapping[str, Any]) -> int | None:
    number = message.get("Attributes", {}).get("SequenceNumber")
    return int(number) if isinstance(number, str) and number.isdigit() else None
