"""The table's item shapes, declared once with PynamoDB.

One table holds every record. Items are addressed by ``pk``/``sk``; the key formats
live in :mod:`runlane_sqs.storage.keys`. The models are used to (de)serialise items
and to build condition and update expressions; requests are sent by the adapters.
"""

from __future__ import annotations

from typing import Any

from pynamodb.attributes import (
    ListAttribute,
    MapAttribute,
    NumberAttribute,
    UnicodeAttribute,
)
from pynamodb.indexes import GlobalSecondaryIndex, IncludeProjection
from pynamodb.models import Model

AGENDA_INDEX = "agenda"
STATUS_INDEX = "by_status"
TTL_ATTRIBUTE = "expires_at"

_SUMMARY = [
    "run_id",
    "environment",
    "task",
    "queue",
    "status",
    "attempt",
    "seq",
    "due_at",
    "created_at",
    "updated_at",
    "lease_owner",
    "lease_token",
    "lease_expires_at",
    "deadline_at",
    "lease_losses",
    "wake_at",
    "publishes",
    "idempotency_key",
    "singleton_key",
]
"""Attributes the indexes carry: enough for maintenance to decide and write a transition
without reading the item (payload, result and history stay in the table only)."""


class AgendaIndex(GlobalSecondaryIndex[Any]):  # type: ignore[no-untyped-call]
    """Non-terminal runs by the time maintenance should next look at them (sparse)."""

    class Meta:
        index_name = AGENDA_INDEX
        projection = IncludeProjection(_SUMMARY)

    agenda_pk = UnicodeAttribute(hash_key=True)
    agenda_at = NumberAttribute(range_key=True)


class StatusIndex(GlobalSecondaryIndex[Any]):  # type: ignore[no-untyped-call]
    """Runs by environment and status, oldest first: for listing.

    Projects only attributes that never change, so heartbeats and other writes that keep
    the status do not write to this index."""

    class Meta:
        index_name = STATUS_INDEX
        projection = IncludeProjection(["run_id", "task", "queue", "created_at"])

    status_pk = UnicodeAttribute(hash_key=True)
    created_sk = UnicodeAttribute(range_key=True)


class EventMap(MapAttribute[str, Any]):
    seq = NumberAttribute()
    type = UnicodeAttribute()
    at = NumberAttribute()
    attempt = NumberAttribute()
    data = UnicodeAttribute(null=True)


class RunItem(Model):
    """A run: its state, its payload and (inline, append-only) its history."""

    class Meta:
        table_name = "runlane"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    run_id = UnicodeAttribute()
    environment = UnicodeAttribute()
    task = UnicodeAttribute()
    queue = UnicodeAttribute()
    status = UnicodeAttribute()
    payload = UnicodeAttribute(null=True)
    """Absent on items read from an index projection."""
    created_at = NumberAttribute()
    updated_at = NumberAttribute()
    seq = NumberAttribute()
    attempt = NumberAttribute()
    due_at = NumberAttribute(null=True)
    lease_owner = UnicodeAttribute(null=True)
    lease_token = UnicodeAttribute(null=True)
    lease_expires_at = NumberAttribute(null=True)
    result = UnicodeAttribute(null=True)
    failure = UnicodeAttribute(null=True)
    idempotency_key = UnicodeAttribute(null=True)
    singleton_key = UnicodeAttribute(null=True)
    deadline_at = NumberAttribute(null=True)
    lease_losses = NumberAttribute(null=True)
    wake_at = NumberAttribute(null=True)
    publishes = NumberAttribute(null=True)
    events = ListAttribute(of=EventMap, null=True)
    # index attributes, derived from the state above on every write
    status_pk = UnicodeAttribute(null=True)
    created_sk = UnicodeAttribute(null=True)
    agenda_pk = UnicodeAttribute(null=True)
    agenda_at = NumberAttribute(null=True)

    agenda_index = AgendaIndex()
    status_index = StatusIndex()


class KeyItem(Model):
    """An idempotency or singleton key held by one run."""

    class Meta:
        table_name = "runlane"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    run_id = UnicodeAttribute()
    created_at = NumberAttribute()
    expires_at = NumberAttribute(null=True)
    """Epoch seconds; DynamoDB TTL removes the item after this (conditions check it too)."""
