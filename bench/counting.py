"""Requests, capacity units, items read and S3 bytes, counted with botocore event hooks.

Hooks are registered on a :class:`boto3.Session` before the app builds its clients from
it (a client copies its session's hooks when it is created), so every request the app
sends is seen. Every DynamoDB request that accepts ``ReturnConsumedCapacity`` is sent
with ``INDEXES``, and the units DynamoDB reports are summed per operation. S3 bytes are
the bodies of ``PutObject`` requests and the ``Content-Length`` of ``GetObject``
responses (a large value's object, docs/payloads.md).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import boto3

DYNAMODB_WRITES = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}
)
DYNAMODB_READS = frozenset({"GetItem", "Query", "Scan", "TransactGetItems", "BatchGetItem"})
SERVICES = ("dynamodb", "sqs", "s3")


@dataclass
class Counts:
    """A snapshot of what a :class:`RequestCounter` saw."""

    requests: Counter[str] = field(default_factory=Counter)
    """``service.Operation`` -> requests sent."""
    read_units: float = 0.0
    write_units: float = 0.0
    index_write_units: float = 0.0
    """Of ``write_units``, those consumed in global secondary indexes."""
    capacity_reported: int = 0
    """DynamoDB responses that carried ``ConsumedCapacity``."""
    items_read: int = 0
    """``ScannedCount`` summed over Query and Scan responses."""
    items_returned: int = 0
    """``Count`` summed over Query and Scan responses."""
    write_units_by_operation: dict[str, float] = field(default_factory=dict)
    """``dynamodb.Operation`` -> of ``write_units``, those its responses reported."""
    s3_bytes_put: int = 0
    """Bytes of ``PutObject`` bodies."""
    s3_bytes_got: int = 0
    """Bytes of ``GetObject`` responses' bodies (their ``Content-Length``)."""

    def service(self, name: str) -> Counter[str]:
        prefix = f"{name}."
        return Counter(
            {k[len(prefix) :]: v for k, v in self.requests.items() if k.startswith(prefix)}
        )

    @property
    def dynamodb_writes(self) -> int:
        return sum(v for k, v in self.service("dynamodb").items() if k in DYNAMODB_WRITES)

    @property
    def dynamodb_reads(self) -> int:
        return sum(v for k, v in self.service("dynamodb").items() if k in DYNAMODB_READS)

    @property
    def dynamodb_requests(self) -> int:
        return sum(self.service("dynamodb").values())

    @property
    def sqs_requests(self) -> int:
        """SQS requests; every wakeup is far below 64 KB, so each is one billed request."""
        return sum(self.service("sqs").values())

    @property
    def s3_requests(self) -> int:
        return sum(self.service("s3").values())

    @property
    def capacity_complete(self) -> bool:
        """Did every DynamoDB response report its consumed capacity?"""
        return self.capacity_reported >= self.dynamodb_requests

    def plus(self, other: Counts) -> Counts:
        units = dict(self.write_units_by_operation)
        for op, value in other.write_units_by_operation.items():
            units[op] = units.get(op, 0.0) + value
        return Counts(
            requests=self.requests + other.requests,
            read_units=self.read_units + other.read_units,
            write_units=self.write_units + other.write_units,
            index_write_units=self.index_write_units + other.index_write_units,
            capacity_reported=self.capacity_reported + other.capacity_reported,
            items_read=self.items_read + other.items_read,
            items_returned=self.items_returned + other.items_returned,
            write_units_by_operation=units,
            s3_bytes_put=self.s3_bytes_put + other.s3_bytes_put,
            s3_bytes_got=self.s3_bytes_got + other.s3_bytes_got,
        )

    def minus(self, other: Counts) -> Counts:
        return Counts(
            requests=self.requests - other.requests,
            read_units=self.read_units - other.read_units,
            write_units=self.write_units - other.write_units,
            index_write_units=self.index_write_units - other.index_write_units,
            capacity_reported=self.capacity_reported - other.capacity_reported,
            items_read=self.items_read - other.items_read,
            items_returned=self.items_returned - other.items_returned,
            write_units_by_operation={
                op: units - other.write_units_by_operation.get(op, 0.0)
                for op, units in self.write_units_by_operation.items()
            },
            s3_bytes_put=self.s3_bytes_put - other.s3_bytes_put,
            s3_bytes_got=self.s3_bytes_got - other.s3_bytes_got,
        )


def _units(capacity: Any) -> tuple[float, float, float]:
    """(read units, write units, index units) of one ``ConsumedCapacity`` entry."""
    if not isinstance(capacity, dict):
        return 0.0, 0.0, 0.0
    total = float(capacity.get("CapacityUnits", 0.0))
    read = float(capacity.get("ReadCapacityUnits", 0.0))
    write = float(capacity.get("WriteCapacityUnits", 0.0))
    indexes = sum(
        float(entry.get("CapacityUnits", 0.0))
        for entry in (capacity.get("GlobalSecondaryIndexes") or {}).values()
    )
    if not read and not write:
        return total, 0.0, indexes  # the caller decides by operation
    return read, write, indexes


class RequestCounter:
    """Counts every request sent by the clients of one boto3 session (thread-safe)."""

    def __init__(self, session: boto3.Session, *, capacity: str = "INDEXES") -> None:
        self._lock = threading.Lock()
        self._counts = Counts()
        self._capacity = capacity
        events = session.events
        for service in SERVICES:
            events.register(f"before-call.{service}", self._before_call)
        events.register("provide-client-params.dynamodb", self._ask_for_capacity)
        events.register("after-call.dynamodb", self._after_call)
        events.register("provide-client-params.s3.PutObject", self._put_object)
        events.register("after-call.s3.GetObject", self._got_object)

    def _before_call(self, model: Any, **_: Any) -> None:
        name = f"{model.service_model.service_name}.{model.name}"
        with self._lock:
            self._counts.requests[name] += 1

    def _ask_for_capacity(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if "ReturnConsumedCapacity" in model.input_shape.members:
            params.setdefault("ReturnConsumedCapacity", self._capacity)

    def _put_object(self, params: dict[str, Any], **_: Any) -> None:
        body = params.get("Body")
        if isinstance(body, str):
            body = body.encode("utf-8")
        size = len(body) if isinstance(body, bytes | bytearray) else 0
        with self._lock:
            self._counts.s3_bytes_put += size

    def _got_object(self, parsed: Any, **_: Any) -> None:
        size = int(parsed.get("ContentLength") or 0) if isinstance(parsed, dict) else 0
        with self._lock:
            self._counts.s3_bytes_got += size

    def _after_call(self, parsed: Any, model: Any, **_: Any) -> None:
        if not isinstance(parsed, dict):
            return
        reported = parsed.get("ConsumedCapacity")
        entries = reported if isinstance(reported, list) else [reported] if reported else []
        is_write = model.name in DYNAMODB_WRITES
        with self._lock:
            counts = self._counts
            if entries:
                counts.capacity_reported += 1
            for entry in entries:
                read, write, indexes = _units(entry)
                if is_write and not write:
                    read, write = 0.0, read
                counts.read_units += read
                counts.write_units += write
                if write:
                    units = counts.write_units_by_operation
                    op = f"dynamodb.{model.name}"
                    units[op] = units.get(op, 0.0) + write
                if is_write:
                    counts.index_write_units += indexes
            if model.name in ("Query", "Scan"):
                returned = int(parsed.get("Count") or 0)
                counts.items_read += int(parsed.get("ScannedCount") or returned)
                counts.items_returned += returned

    def snapshot(self) -> Counts:
        with self._lock:
            c = self._counts
            return Counts(
                requests=Counter(c.requests),
                read_units=c.read_units,
                write_units=c.write_units,
                index_write_units=c.index_write_units,
                capacity_reported=c.capacity_reported,
                items_read=c.items_read,
                items_returned=c.items_returned,
                write_units_by_operation=dict(c.write_units_by_operation),
                s3_bytes_put=c.s3_bytes_put,
                s3_bytes_got=c.s3_bytes_got,
            )

    def reset(self) -> None:
        """Forget everything counted so far (call after set-up)."""
        with self._lock:
            self._counts = Counts()


def counting_session(region: str | None = None) -> tuple[boto3.Session, RequestCounter]:
    """A fresh boto3 session with a counter attached; pass it as ``Runlane(session=...)``."""
    session = boto3.Session(region_name=region)
    return session, RequestCounter(session)
