"""Object records in DynamoDB: how many records reference each object of the payload
bucket (:class:`~runlane_sqs.core.values.ObjectRecord`).

An object record (``OBJECT#{env}#{sha256}`` / ``OBJECT``) holds the object's
generation, its size and ``holders``, the count of records that reference it. A write
that stores references (a new run, an outcome, a step, a wait's result, a token's value)
is one ``TransactWriteItems``: the record's own write, and per object ``ADD holders :n``
on condition that the record is still in the reference's generation (the writer pinned
it moments before). Deleting a run is its ``Delete`` and ``ADD holders -n`` per object,
listing each record on the agenda; maintenance deletes a listed record that no record
references and no writer pinned, then its object.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime
from typing import Any

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.cursors import Query, agenda_key
from runlane_sqs.adapters.dynamodb.errors import ActionRefused, Refused, Send
from runlane_sqs.adapters.dynamodb.expressions import Expressions
from runlane_sqs.adapters.dynamodb.keys import agenda_pk
from runlane_sqs.adapters.dynamodb.requests import Request, query_agenda
from runlane_sqs.core.clock import from_epoch_ms, to_epoch_ms
from runlane_sqs.core.errors import StorageUnavailable
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.values import (
    PIN_DURATION,
    RELEASE_GRACE,
    ObjectRecord,
    Reference,
    generation_of,
    moved_record,
    new_generation,
)

log = logging.getLogger("runlane_sqs.objects")


def _by_object(references: Counter[Reference]) -> dict[Reference, int]:
    """One entry per object: a write holding one content in two generations names a
    record that moved (only one generation is ever current)."""
    seen: dict[str, Reference] = {}
    for reference in references:
        other = seen.setdefault(reference.sha256, reference)
        if other.key != reference.key:
            raise StorageUnavailable(moved_record(reference))
    return dict(references)


def hold_items(table: str, environment: str, references: Counter[Reference]) -> list[Request]:
    """The ``Update`` per object that counts a write's references (off the agenda: the
    object is held)."""
    items = []
    for reference, count in _by_object(references).items():
        x = Expressions()
        x.add("holders", count)
        x.remove("agenda_pk", "agenda_at")
        x.require(x.compare("generation", "=", generation_of(reference)))
        key = keys.object_record_key(environment, reference.sha256)
        items.append({"Update": x.request({"TableName": table, "Key": key})})
    return items


def release_items(
    table: str, environment: str, references: Counter[Reference], now: datetime
) -> list[Request]:
    """The ``Update`` per object that takes a deleted record's references off, listing
    the record for maintenance's look after :data:`RELEASE_GRACE`."""
    at_ms = to_epoch_ms(now + RELEASE_GRACE)
    kind = AgendaKind.OBJECT.value
    items = []
    for reference, count in _by_object(references).items():
        x = Expressions()
        x.add("holders", -count)
        x.set("agenda_pk", agenda_pk(environment, kind, reference.sha256))
        x.set("agenda_at", at_ms)
        x.require(x.compare("generation", "=", generation_of(reference)))
        key = keys.object_record_key(environment, reference.sha256)
        items.append({"Update": x.request({"TableName": table, "Key": key})})
    return items


def refused_holds(reasons: list[ActionRefused], held: int) -> bool:
    """Whether one of the last ``held`` cancellation reasons (a transaction's hold or
    release items, which come last) is a failed condition."""
    if held <= 0:
        return False
    return any(r.condition_failed for r in reasons[-held:])


def record_from_wire(wire: dict[str, Any]) -> ObjectRecord:
    listed, pinned = wire.get("agenda_at", {}).get("N"), wire.get("pinned_until", {}).get("N")
    return ObjectRecord(
        sha256=wire["sha256"]["S"],
        generation=wire["generation"]["S"],
        holders=int(wire.get("holders", {}).get("N", "0")),
        size=int(wire.get("size", {}).get("N", "0")),
        listed_at=from_epoch_ms(int(listed)) if listed is not None else None,
        pinned_until=from_epoch_ms(int(pinned)) if pinned is not None else None,
    )


class DynamoObjectRecords:
    """The object records of one environment, in the run store's table."""

    def __init__(self, send: Send, query: Query, table: str, environment: str) -> None:
        self._send = send
        self._query = query
        self.table = table
        self.environment = environment

    def pin(self, sha256: str, size: int, now: datetime) -> str:
        x = Expressions()
        until = x.value(to_epoch_ms(now + PIN_DURATION))
        x.set("generation", x.if_not_exists("generation", new_generation()))
        x.set("size", size)
        x.set("environment", self.environment)
        x.set("sha256", sha256)
        x.set("pinned_until", until)
        x.set("agenda_pk", agenda_pk(self.environment, AgendaKind.OBJECT.value, sha256))
        x.set("agenda_at", until)
        key = keys.object_record_key(self.environment, sha256)
        request = x.request({"TableName": self.table, "Key": key, "ReturnValues": "ALL_NEW"})
        attributes = self._send("update_item", request)["Attributes"]
        return str(attributes["generation"]["S"])

    def get(self, sha256: str) -> ObjectRecord | None:
        request = {
            "TableName": self.table,
            "Key": keys.object_record_key(self.environment, sha256),
            "ConsistentRead": True,
        }
        wire = self._send("get_item", request).get("Item")
        return record_from_wire(wire) if wire else None

    def object_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[ObjectRecord], str | None]:
        request = query_agenda(self.table, partition, to_epoch_ms(until), limit)
        page = self._query(request, cursor, agenda_key(partition))
        prefix = keys.object_pk(self.environment, "")
        records = []
        for listed in page.items:
            record = self.get(listed["pk"]["S"][len(prefix) :])
            if record is not None and record.listed_at is not None:
                records.append(record)
        return records, page.cursor

    def remove(self, record: ObjectRecord, now: datetime) -> bool:
        assert record.listed_at is not None
        key = keys.object_record_key(self.environment, record.sha256)
        x = self._still_listed(record)
        x.require(
            x.either(x.absent("holders"), x.compare("holders", "<=", 0)),
            x.either(x.absent("pinned_until"), x.compare("pinned_until", "<=", to_epoch_ms(now))),
        )
        request = x.request(
            {"TableName": self.table, "Key": key, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
        )
        sent = self._send.conditional("delete_item", request)
        if not isinstance(sent, Refused):
            return True
        found = record_from_wire(sent.item) if sent.item else None
        if found is not None and found.holders > 0 and found.generation == record.generation:
            x = self._still_listed(record)
            x.remove("agenda_pk", "agenda_at")
            x.require(x.compare("holders", ">", 0))
            unlist = x.request({"TableName": self.table, "Key": key})
            self._send.conditional("update_item", unlist)  # refused: it moved on
        return False

    def _still_listed(self, record: ObjectRecord) -> Expressions:
        """Expressions made on the record being in its generation and listed as it was."""
        assert record.listed_at is not None
        x = Expressions()
        x.require(
            x.compare("generation", "=", record.generation),
            x.compare("agenda_at", "=", to_epoch_ms(record.listed_at)),
        )
        return x
