"""The table's item shapes, declared once with PynamoDB.

One table holds every record. Items are addressed by ``pk``/``sk``; the key formats
live in :mod:`runlane_sqs.adapters.dynamodb.keys`. The models are used to (de)serialise items
and to build condition and update expressions; requests are sent by the adapters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pynamodb.attributes import (
    ListAttribute,
    MapAttribute,
    NumberAttribute,
    UnicodeAttribute,
    UnicodeSetAttribute,
)
from pynamodb.indexes import GlobalSecondaryIndex, IncludeProjection, KeysOnlyProjection
from pynamodb.models import Model

AttributeMap = dict[str, Any]
"""An item in the low-level DynamoDB wire format (``{"name": {"S": ...}}``)."""

AGENDA_INDEX = "agenda"
STATUS_INDEX = "by_status"
WAITS_INDEX = "waits"
TAG_INDEXES = ("tag_0", "tag_1", "tag_2", "tag_3")
"""One index per tag position of a run (its first tag by key in ``tag_0``, ...): a run
with ``n`` tags has one entry in each of the first ``n`` (``MAX_TAGS`` in all)."""
TAG_KEY_ATTRIBUTES = ("tag_pk_0", "tag_pk_1", "tag_pk_2", "tag_pk_3")
_TAG_PROJECTION = ["tags", "task", "queue"]
"""What the tag indexes carry besides their keys: a run's tags (a listing by several tags
filters on the others), its task and queue; none of them ever changes, so no write but
the run's creation (and deletion) writes to a tag index."""
TTL_ATTRIBUTE = "expires_at"

_AGENDA_PROJECTION = [
    "environment",
    "created_at",
    "token_id",
    "token_status",
    "timeout_at",
    "decided_at",
]
"""What the agenda index carries besides its keys: a token's state (maintenance decides
tokens from their entries), and for runs only attributes that never change, so no write
but one that moves a run's listing writes to the index; maintenance reads the listed
runs themselves."""


class AgendaIndex(GlobalSecondaryIndex[Any]):  # type: ignore[no-untyped-call]
    """Unfinished runs and tokens with work left, by the time maintenance should next
    look at them (sparse)."""

    class Meta:
        index_name = AGENDA_INDEX
        projection = IncludeProjection(_AGENDA_PROJECTION)

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


class WaitsIndex(GlobalSecondaryIndex[Any]):  # type: ignore[no-untyped-call]
    """Released runs by what they wait for (``{env}#{kind}#{target}``): signal senders,
    token deciders and finishing runs find their waiters here. Keys only: a resume reads
    the run itself before its conditional write."""

    class Meta:
        index_name = WAITS_INDEX
        projection = KeysOnlyProjection()

    wait_pk = UnicodeAttribute(hash_key=True)
    wait_sk = UnicodeAttribute(range_key=True)


class TagIndex0(GlobalSecondaryIndex[Any]):  # type: ignore[no-untyped-call]
    """Runs by their first tag (by key), newest first: ``{env}#{key}={value}#{shard}``
    (sparse: runs without tags are not on it)."""

    class Meta:
        index_name = TAG_INDEXES[0]
        projection = IncludeProjection(_TAG_PROJECTION)

    tag_pk_0 = UnicodeAttribute(hash_key=True)
    created_sk = UnicodeAttribute(range_key=True)


class TagIndex1(GlobalSecondaryIndex[Any]):  # type: ignore[no-untyped-call]
    """Runs by their second tag (as :class:`TagIndex0`)."""

    class Meta:
        index_name = TAG_INDEXES[1]
        projection = IncludeProjection(_TAG_PROJECTION)

    tag_pk_1 = UnicodeAttribute(hash_key=True)
    created_sk = UnicodeAttribute(range_key=True)


class TagIndex2(GlobalSecondaryIndex[Any]):  # type: ignore[no-untyped-call]
    """Runs by their third tag (as :class:`TagIndex0`)."""

    class Meta:
        index_name = TAG_INDEXES[2]
        projection = IncludeProjection(_TAG_PROJECTION)

    tag_pk_2 = UnicodeAttribute(hash_key=True)
    created_sk = UnicodeAttribute(range_key=True)


class TagIndex3(GlobalSecondaryIndex[Any]):  # type: ignore[no-untyped-call]
    """Runs by their fourth tag (as :class:`TagIndex0`)."""

    class Meta:
        index_name = TAG_INDEXES[3]
        projection = IncludeProjection(_TAG_PROJECTION)

    tag_pk_3 = UnicodeAttribute(hash_key=True)
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
    line_at = NumberAttribute(null=True)
    publishes = NumberAttribute(null=True)
    failures = NumberAttribute(null=True)
    waiting = UnicodeAttribute(null=True)
    """JSON of the wait a released (or parked) run is in."""
    parked_from = UnicodeAttribute(null=True)
    """The status a parked run returns to when it is unparked."""
    parked_reason = UnicodeAttribute(null=True)
    """Why a parked run is parked (``unknown_task``, ``history_diverged``)."""
    wait_results = MapAttribute[str, Any](null=True)  # type: ignore[no-untyped-call]
    """Wait name -> JSON of its result; entries are only ever added."""
    steps = MapAttribute[str, Any](null=True)  # type: ignore[no-untyped-call]
    """Step name -> JSON of ``{"value", "site"}``; entries are only ever added."""
    watched = NumberAttribute(null=True)
    """1 once another run waits for this one."""
    opened_groups = NumberAttribute(null=True)
    """1 once the run opened a group: set by the group's opening, in its transaction."""
    source_run_id = UnicodeAttribute(null=True)
    source_kind = UnicodeAttribute(null=True)
    schedule_id = UnicodeAttribute(null=True)
    """The schedule that made the run; ``scheduled_for`` its occurrence (epoch ms)."""
    scheduled_for = NumberAttribute(null=True)
    concurrency_key = UnicodeAttribute(null=True)
    """The key its task's ``key_limit`` counts runs by, fixed at trigger time."""
    slots = UnicodeAttribute(null=True)
    """JSON ``[[scope, limit], ...]``: the slots the current attempt holds."""
    slot_wait = UnicodeAttribute(null=True)
    """The scope whose slot a runnable run waits for."""
    rate_start = NumberAttribute(null=True)
    """The start (epoch ms) its rate limits reserved for it."""
    ordering_key = UnicodeAttribute(null=True)
    """Runs with the same ordering key execute one at a time in trigger order."""
    place = NumberAttribute(null=True)
    """The run's number among its ordering key's runs, fixed at trigger time."""
    turn_wait = NumberAttribute(null=True)
    """1 while the run waits for earlier runs of its ordering key to finish."""
    trace = UnicodeAttribute(null=True)
    app_version = UnicodeAttribute(null=True)
    """The app version its first attempt ran under."""
    """The packed W3C trace context of the span that triggered the run."""
    group_id = UnicodeAttribute(null=True)
    """The group a child run belongs to; ``group_index`` its item's index."""
    group_index = NumberAttribute(null=True)
    joined_group = UnicodeAttribute(null=True)
    """The group whose join triggered this run (a callback)."""
    debounce_key = UnicodeAttribute(null=True)
    """The debounce key later triggers collapse into this run by, until it starts."""
    retention = NumberAttribute(null=True)
    """Seconds a finished run is kept (``expires_at`` is set from it when it finishes)."""
    expires_at = NumberAttribute(null=True)
    """Epoch seconds: DynamoDB's TTL deletes the finished run after this."""
    batch_key = UnicodeAttribute(null=True)
    """The batch key later triggers add their items to this run by, until it starts."""
    batch_items = ListAttribute(of=UnicodeAttribute, null=True)
    """A batch run's items (each as a payload is kept), in the order they were added; a
    batch run has no ``payload``."""
    batch_bytes = NumberAttribute(null=True)
    """The bytes of ``batch_items``: an append holds only while they stay within the
    batch's limit."""
    collapsed = NumberAttribute(null=True)
    """Triggers that went to the run after the first (a collapse, a batch's item)."""
    progress = UnicodeAttribute(null=True)
    """The latest ``ctx.progress`` an attempt reported, as compact JSON (written with no
    event, fenced on the attempt's lease token: docs/progress.md)."""
    state = UnicodeAttribute(null=True)
    """The latest ``ctx.set_state`` value, as its stored text."""
    events = ListAttribute(of=EventMap, null=True)
    tags = MapAttribute[str, Any](null=True)  # type: ignore[no-untyped-call]
    """Tag key -> value (text); written once, when the run is created."""
    # index attributes, derived from the state above on every write
    status_pk = UnicodeAttribute(null=True)
    created_sk = UnicodeAttribute(null=True)
    agenda_pk = UnicodeAttribute(null=True)
    agenda_at = NumberAttribute(null=True)
    wait_pk = UnicodeAttribute(null=True)
    wait_sk = UnicodeAttribute(null=True)
    tag_pk_0 = UnicodeAttribute(null=True)
    tag_pk_1 = UnicodeAttribute(null=True)
    tag_pk_2 = UnicodeAttribute(null=True)
    tag_pk_3 = UnicodeAttribute(null=True)

    agenda_index = AgendaIndex()
    status_index = StatusIndex()
    waits_index = WaitsIndex()
    tag_index_0 = TagIndex0()
    tag_index_1 = TagIndex1()
    tag_index_2 = TagIndex2()
    tag_index_3 = TagIndex3()


class TokenItem(Model):
    """A token: one durable external decision, listed on the agenda while it has work."""

    class Meta:
        table_name = "runlane"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    token_id = UnicodeAttribute()
    environment = UnicodeAttribute()
    token_status = UnicodeAttribute()
    value = UnicodeAttribute(null=True)
    metadata = UnicodeAttribute(null=True)
    created_at = NumberAttribute()
    timeout_at = NumberAttribute(null=True)
    decided_at = NumberAttribute(null=True)
    decision_trace = UnicodeAttribute(null=True)
    agenda_pk = UnicodeAttribute(null=True)
    agenda_at = NumberAttribute(null=True)


class ScheduleItem(Model):
    """A schedule: its definition (as the app last defined it) and where it stands,
    listed on the agenda at its next occurrence while it is active."""

    class Meta:
        table_name = "runlane"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    """The schedule id."""
    environment = UnicodeAttribute()
    task = UnicodeAttribute()
    definition = UnicodeAttribute()
    """JSON of the definition (:meth:`~runlane_sqs.core.schedules.Schedule.to_json`)."""
    fingerprint = UnicodeAttribute()
    schedule_status = UnicodeAttribute()
    next_at = NumberAttribute(null=True)
    last_at = NumberAttribute(null=True)
    updated_at = NumberAttribute()
    version = NumberAttribute()
    runs = NumberAttribute()
    agenda_pk = UnicodeAttribute(null=True)
    agenda_at = NumberAttribute(null=True)


class SlotItem(Model):
    """A concurrency limit's scope: the lease tokens holding its slots, listed on the
    agenda while maintenance has something to check."""

    class Meta:
        table_name = "runlane"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    environment = UnicodeAttribute()
    scope = UnicodeAttribute()
    slot_limit = NumberAttribute()
    """The limit of the last claim that took a slot."""
    holders = UnicodeSetAttribute(null=True)
    """``{lease token}:{run id}`` of each attempt holding a slot (absent: none)."""
    updated_at = NumberAttribute()
    agenda_pk = UnicodeAttribute(null=True)
    agenda_at = NumberAttribute(null=True)


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


class GroupItem(Model):
    """A group (:mod:`runlane_sqs.core.groups`): its size, window and counts, listed on
    the agenda until it has joined. Its items are in :class:`GroupChunkItem` records of
    the same partition."""

    class Meta:
        table_name = "runlane"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    group_id = UnicodeAttribute()
    environment = UnicodeAttribute()
    total = NumberAttribute()
    window = NumberAttribute()
    tolerate = NumberAttribute()
    bounds = UnicodeAttribute()
    """JSON list of each chunk's first item index."""
    items_key = UnicodeAttribute()
    """The opening whose :class:`GroupChunkItem` records hold the items."""
    parent_run_id = UnicodeAttribute(null=True)
    then_task = UnicodeAttribute(null=True)
    then_payload = UnicodeAttribute(null=True)
    next_tasks = UnicodeAttribute(null=True)
    """JSON list of a chain's tasks after this group's one child."""
    child_tags = UnicodeAttribute(null=True)
    """JSON object of the tags its children are created with."""
    started = NumberAttribute()
    lanes = MapAttribute[str, Any](null=True)  # type: ignore[no-untyped-call]
    """Lane number -> the position running in it (numbers); written on the wire by
    ``group_to_wire`` (an empty map too: a lane is set inside it)."""
    positions = NumberAttribute()
    """``total`` plus the reruns: a lane starts a position only below it."""
    allowance = NumberAttribute()
    """``tolerate`` less ``failed`` and ``cancelled``: a lane starts a position only
    while it is not below 0."""
    generation = NumberAttribute(null=True)
    """How many times ``runs retry-failed`` reran failed children."""
    redriven = UnicodeAttribute(null=True)
    """JSON ``[[index, generation], ...]`` of the reruns, in position order."""
    redrive_by = UnicodeAttribute(null=True)
    """JSON ``[actor, reason]`` of the latest redrive."""
    succeeded = NumberAttribute(null=True)
    """Added to by the write that counts a child (as are ``failed`` and ``cancelled``)."""
    failed = NumberAttribute(null=True)
    cancelled = NumberAttribute(null=True)
    created_at = NumberAttribute()
    joined_at = NumberAttribute(null=True)
    stopped_at = NumberAttribute(null=True)
    agenda_pk = UnicodeAttribute(null=True)
    agenda_at = NumberAttribute(null=True)


class GroupChunkItem(Model):
    """One chunk of a group's items: JSON ``[[task, payload], ...]`` in index order."""

    class Meta:
        table_name = "runlane"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    items = UnicodeAttribute()


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
