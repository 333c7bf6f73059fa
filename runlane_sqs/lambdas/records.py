"""Reading the records of an SQS event-source-mapping batch, each on its own: a broken
record is named (to be reported or logged), never raised out of the invocation
(docs/deploy-lambda.md, "What is reported back to SQS")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runlane_sqs.core.errors import ConfigurationError

FIFO_SUFFIX = ".fifo"
EVENT_SOURCE = "aws:sqs"
RECEIVE_COUNT_MAX_DIGITS = 10
"""Longest ``ApproximateReceiveCount`` read; a longer one is unreadable (counts as 1)."""


class NotAnSqsEvent(ConfigurationError):
    """The function was invoked with something other than an SQS event-source batch."""


def fifo_group_of(record: Mapping[str, Any]) -> str | None:
    """The record's message group on a FIFO queue (``""`` if unreadable), ``None`` on a
    standard queue."""
    arn = record.get("eventSourceARN")
    if not isinstance(arn, str) or not arn.endswith(FIFO_SUFFIX):
        return None
    attributes = record.get("attributes")
    group = attributes.get("MessageGroupId") if isinstance(attributes, Mapping) else None
    return group if isinstance(group, str) else ""


def message_id_of(record: object) -> str | None:
    """The record's ``messageId`` if it can be reported back and logged: a non-empty,
    printable string (SQS gives a UUID)."""
    message_id = record.get("messageId") if isinstance(record, Mapping) else None
    if not isinstance(message_id, str) or not message_id.strip():
        return None
    return message_id if message_id.isprintable() else None


def envelope_of(record: Mapping[str, Any]) -> tuple[str, str, str] | str:
    """The record's queue ARN, receipt handle and body; or, as a string, what makes its
    envelope unusable (SQS never delivers such a record: it is reported, and the
    redrive policy ends its redeliveries)."""
    arn, receipt, body = (record.get(f) for f in ("eventSourceARN", "receiptHandle", "body"))
    if record.get("eventSource") != EVENT_SOURCE:
        return f"its eventSource is not {EVENT_SOURCE!r}"
    if not isinstance(arn, str) or not arn.startswith("arn:"):
        return "it has no usable eventSourceARN"
    if not isinstance(receipt, str) or not receipt:
        return "it has no usable receiptHandle"
    if not isinstance(body, str):
        return "its body is missing or not a string"
    return arn, receipt, body


def receive_count_of(attributes: object) -> int | None:
    """``ApproximateReceiveCount`` as a positive integer; ``None`` if it cannot be read."""
    raw = attributes.get("ApproximateReceiveCount") if isinstance(attributes, Mapping) else None
    text = str(raw) if isinstance(raw, int) and not isinstance(raw, bool) else raw
    if not isinstance(text, str) or not (text.isascii() and text.isdigit()):
        return None
    if len(text) > RECEIVE_COUNT_MAX_DIGITS or int(text) < 1:
        return None
    return int(text)


def records_of(event: Mapping[str, Any]) -> list[object]:
    """The batch's records; raises :class:`NotAnSqsEvent` unless ``Records`` is a list
    with at least one SQS record (an empty list is an empty batch). Each record is
    checked on its own later, so one broken record does not fail the batch."""
    records = event.get("Records") if isinstance(event, Mapping) else None
    if not isinstance(records, list) or (
        records
        and not any(
            isinstance(r, Mapping) and r.get("eventSource") == EVENT_SOURCE for r in records
        )
    ):
        raise NotAnSqsEvent("expected an SQS event-source-mapping batch ({'Records': [...]})")
    return records
