"""The DynamoDB group store: a group's record and its item chunks share a partition.

A child is counted by one ``UpdateItem`` of the record, conditional on its lane still
holding its position (``lanes.#lane = :position``), which empties the lane or gives it
the next position: ``SET lanes.#lane = started, started = started + 1`` reads
``started`` as it was before the write, so concurrent finishers each start their own
position with no read and no retry."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.cursors import STRING, KeyShape, Query, agenda_key, every_page
from runlane_sqs.adapters.dynamodb.errors import (
    Refused,
    Send,
    cancellation_reasons,
)
from runlane_sqs.adapters.dynamodb.expressions import Expressions
from runlane_sqs.adapters.dynamodb.items import AttributeMap, GroupChunkItem, GroupItem, RunItem
from runlane_sqs.adapters.dynamodb.keys import agenda_pk
from runlane_sqs.adapters.dynamodb.requests import query_agenda
from runlane_sqs.adapters.dynamodb.runs import compact_json
from runlane_sqs.core.clock import from_epoch_ms, to_epoch_ms
from runlane_sqs.core.errors import LeaseLost
from runlane_sqs.core.groups import COUNTED, Group, Item, Then
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.model import Run, RunStatus
from runlane_sqs.core.values import ENVELOPE_MARK
from runlane_sqs.ports.groups import Counted

BatchGet = Callable[[list[dict[str, Any]]], list[Run]]
"""Reads runs by their keys, in order (the run store's ``BatchGetItem``)."""


def group_to_wire(group: Group) -> AttributeMap:
    listed = group.review_at if group.joined_at is None else None
    item = GroupItem(
        pk=keys.group_pk(group.environment, group.id),
        sk=keys.GROUP_SK,
        group_id=group.id,
        environment=group.environment,
        total=group.total,
        window=group.window,
        tolerate=group.tolerate,
        bounds=compact_json(list(group.bounds)),
        items_key=group.items_key,
        parent_run_id=group.parent_run_id,
        then_task=group.then.task if group.then else None,
        then_payload=group.then.payload_text if group.then else None,
        next_tasks=compact_json(list(group.next_tasks)) if group.next_tasks else None,
        child_tags=compact_json(dict(group.tags)) if group.tags else None,
        started=group.started,
        positions=group.positions,
        allowance=group.allowance,
        generation=group.generation or None,
        redriven=compact_json([list(pair) for pair in group.redriven]) if group.redriven else None,
        redrive_by=compact_json(list(group.redrive_by)) if group.redrive_by else None,
        succeeded=group.succeeded or None,
        failed=group.failed or None,
        cancelled=group.cancelled or None,
        created_at=to_epoch_ms(group.created_at),
        joined_at=to_epoch_ms(group.joined_at) if group.joined_at else None,
        stopped_at=to_epoch_ms(group.stopped_at) if group.stopped_at else None,
        agenda_pk=agenda_pk(group.environment, AgendaKind.GROUP.value, group.id)
        if listed
        else None,
        agenda_at=to_epoch_ms(listed) if listed else None,
    )
    wire: AttributeMap = item.serialize()
    wire["lanes"] = {"M": {str(lane): {"N": str(at)} for lane, at in group.lanes.items()}}
    return wire


def group_from_wire(wire: AttributeMap) -> Group:
    item: GroupItem = GroupItem.from_raw_data(wire)
    then = None
    if item.then_task is not None:
        then = Then(item.then_task, item.then_payload or "null")
    return Group(
        id=item.group_id,
        environment=item.environment,
        total=int(item.total),
        window=int(item.window),
        tolerate=int(item.tolerate),
        created_at=from_epoch_ms(int(item.created_at)),
        bounds=tuple(json.loads(item.bounds)),
        items_key=item.items_key,
        parent_run_id=item.parent_run_id,
        then=then,
        next_tasks=tuple(json.loads(item.next_tasks)) if item.next_tasks else (),
        tags=json.loads(item.child_tags) if item.child_tags else {},
        started=int(item.started),
        lanes={int(lane): int(at["N"]) for lane, at in wire.get("lanes", {}).get("M", {}).items()},
        generation=int(item.generation or 0),
        redriven=tuple((int(i), int(g)) for i, g in json.loads(item.redriven or "[]")),
        redrive_by=tuple(json.loads(item.redrive_by)) if item.redrive_by else None,
        succeeded=int(item.succeeded or 0),
        failed=int(item.failed or 0),
        cancelled=int(item.cancelled or 0),
        joined_at=from_epoch_ms(int(item.joined_at)) if item.joined_at is not None else None,
        stopped_at=from_epoch_ms(int(item.stopped_at)) if item.stopped_at is not None else None,
        review_at=from_epoch_ms(int(item.agenda_at)) if item.agenda_at is not None else None,
    )


def chunk_item_text(item: Item) -> str:
    """An item in its chunk: ``[task, payload]`` with the payload's JSON as is, or
    ``[task, null, envelope]`` for a payload its codecs encoded."""
    if item.payload_text.startswith(ENVELOPE_MARK):
        return f"[{json.dumps(item.task)},null,{json.dumps(item.payload_text)}]"
    return f"[{json.dumps(item.task)},{item.payload_text}]"


def chunk_items(text: str) -> list[Item]:
    """The items a chunk's text holds (:func:`chunk_item_text`)."""
    return [
        Item(pair[0], pair[2] if len(pair) == 3 else compact_json(pair[1]))
        for pair in json.loads(text)
    ]


def chunk_to_wire(group: Group, chunk: int, items: Sequence[Item]) -> AttributeMap:
    key = keys.chunk_key(group.environment, group.id, group.items_key, chunk)
    text = "[" + ",".join(chunk_item_text(i) for i in items) + "]"
    wire: AttributeMap = GroupChunkItem(
        pk=key["pk"]["S"], sk=key["sk"]["S"], items=text
    ).serialize()
    return wire


def require_running(x: Expressions, failing: bool = False) -> None:
    """The condition of starting a position: the group has not joined, was not stopped
    and has not failed (nor fails by the failure counted in the same write)."""
    x.require(
        x.absent("joined_at"),
        x.absent("stopped_at"),
        x.compare("allowance", ">" if failing else ">=", 0),
    )


class DynamoGroupStore:
    """The groups of one environment (``store.groups``)."""

    def __init__(
        self, send: Send, query: Query, batch_get: BatchGet, table: str, environment: str
    ) -> None:
        self._send = send
        self._query = query
        self._batch_get = batch_get
        self.table = table
        self.environment = environment

    def open_group(
        self, group: Group, chunks: Sequence[Sequence[Item]], fence: tuple[str, str] | None
    ) -> tuple[Group, bool]:
        """The chunks first, one ``PutItem`` each under this opening's key (no group
        record names them yet: an opening that dies here leaves them unread), then the
        record, conditional on none being stored and, with a fence, in a transaction
        with the parent's update: on its lease, it marks the parent ``opened_groups``
        (no event, no sequence change; so it carries no TTL expiry)."""
        for n, items in enumerate(chunks):
            self._send(
                "put_item", {"TableName": self.table, "Item": chunk_to_wire(group, n, items)}
            )
        x = Expressions(GroupItem)
        x.require(x.absent("pk"))
        record = x.request({"TableName": self.table, "Item": group_to_wire(group)})
        if fence is None:
            if isinstance(self._send.conditional("put_item", record), Refused):
                return self._stored(group.id), False
            return group, True
        run_id, token = fence
        x = Expressions(RunItem)
        x.set("opened_groups", 1)
        x.require(x.compare("lease_token", "=", token))
        parent = x.request({"TableName": self.table, "Key": keys.run_key(self.environment, run_id)})
        try:
            self._send(
                "transact_write_items",
                {"TransactItems": [{"Update": parent}, {"Put": record}]},
            )
        except ClientError as exc:
            reasons = cancellation_reasons(exc)
            if not reasons:
                raise
            if reasons[0].condition_failed:
                raise LeaseLost(run_id) from None
            return self._stored(group.id), False
        return group, True

    def _stored(self, group_id: str) -> Group:
        stored = self.get_group(group_id)
        if stored is None:
            raise RuntimeError(f"group {group_id} was refused as existing but is not stored")
        return stored

    def get_group(self, group_id: str) -> Group | None:
        response = self._send(
            "get_item",
            {
                "TableName": self.table,
                "Key": keys.group_key(self.environment, group_id),
                "ConsistentRead": True,
            },
        )
        wire = response.get("Item")
        return group_from_wire(wire) if wire and "group_id" in wire else None

    def get_items(self, group: Group, chunk: int) -> list[Item]:
        response = self._send(
            "get_item",
            {
                "TableName": self.table,
                "Key": keys.chunk_key(self.environment, group.id, group.items_key, chunk),
                "ConsistentRead": True,
            },
        )
        wire = response.get("Item")
        if not wire:
            return []
        return chunk_items(wire["items"]["S"])

    def mark_started(
        self, group_id: str, seen: int, lanes: Mapping[int, int]
    ) -> tuple[bool, Group | None]:
        x = Expressions(GroupItem)
        x.set("started", seen + len(lanes))
        for lane, position in sorted(lanes.items()):
            x.set(("lanes", str(lane)), position)
        x.require(x.compare("started", "=", seen))
        require_running(x)
        sent = self._send.conditional(
            "update_item",
            x.request(
                {
                    "TableName": self.table,
                    "Key": keys.group_key(self.environment, group_id),
                    "ReturnValues": "ALL_NEW",
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            ),
        )
        if isinstance(sent, Refused):
            return False, group_from_wire(sent.item) if sent.item else None
        return True, group_from_wire(sent["Attributes"])

    def count(
        self, group_id: str, lane: int, position: int, status: RunStatus, *, start: bool
    ) -> Counted:
        x = Expressions(GroupItem)
        path = ("lanes", str(lane))
        x.add(COUNTED[status], 1)
        unsuccessful = status is not RunStatus.SUCCEEDED
        if unsuccessful:
            x.add("allowance", -1)
        x.require(x.compare(path, "=", position))
        if start:
            x.set(path, x.name("started"))
            x.set("started", x.plus("started", 1))
            x.require(x.compare("started", "<", x.name("positions")))
            require_running(x, unsuccessful)
        else:
            x.remove(path)
        sent = self._send.conditional(
            "update_item",
            x.request(
                {
                    "TableName": self.table,
                    "Key": keys.group_key(self.environment, group_id),
                    "ReturnValues": "ALL_NEW",
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            ),
        )
        if isinstance(sent, Refused):
            return Counted(False, group_from_wire(sent.item) if sent.item else None)
        return Counted(True, group_from_wire(sent["Attributes"]))

    def mark_joined(self, group_id: str, at: datetime) -> bool:
        x = Expressions(GroupItem)
        x.set("joined_at", to_epoch_ms(at))
        x.remove("agenda_pk", "agenda_at")
        return not isinstance(self._update_unjoined(group_id, x), Refused)

    def mark_stopped(self, group_id: str, at: datetime, seen_generation: int) -> Group | None:
        x = Expressions(GroupItem)
        x.set("stopped_at", x.if_not_exists("stopped_at", to_epoch_ms(at)))
        x.require(_at_generation(x, seen_generation))
        sent = self._update_unjoined(group_id, x, returns="ALL_NEW")
        if isinstance(sent, Refused):
            return None
        return group_from_wire(sent["Attributes"])

    def reopen(self, reopened: Group, seen_generation: int, failed: int, cancelled: int) -> bool:
        x = Expressions(GroupItem)
        x.set("generation", reopened.generation)
        x.set("redriven", compact_json([list(pair) for pair in reopened.redriven]))
        x.set("redrive_by", compact_json(list(reopened.redrive_by or ())))
        x.set("agenda_pk", agenda_pk(self.environment, AgendaKind.GROUP.value, reopened.id))
        x.set("agenda_at", to_epoch_ms(reopened.review_at or reopened.created_at))
        zero = x.value(0)
        x.set("failed", x.minus(x.if_not_exists("failed", zero), failed))
        x.set("cancelled", x.minus(x.if_not_exists("cancelled", zero), cancelled))
        x.set("positions", reopened.positions)
        x.add("allowance", failed + cancelled)
        x.remove("joined_at")
        x.require(x.exists("joined_at"), x.absent("stopped_at"))
        x.require(_at_generation(x, seen_generation))
        key = keys.group_key(self.environment, reopened.id)
        sent = self._send.conditional(
            "update_item", x.request({"TableName": self.table, "Key": key})
        )
        return not isinstance(sent, Refused)

    def relist(self, group_id: str, at: datetime) -> None:
        x = Expressions(GroupItem)
        x.set("agenda_pk", agenda_pk(self.environment, AgendaKind.GROUP.value, group_id))
        x.set("agenda_at", to_epoch_ms(at))
        self._update_unjoined(group_id, x)

    def _update_unjoined(
        self, group_id: str, x: Expressions, returns: str = "NONE"
    ) -> dict[str, Any] | Refused:
        """Update a group record that exists and has not joined (refused otherwise)."""
        x.require(x.exists("pk"), x.absent("joined_at"))
        request = {
            "TableName": self.table,
            "Key": keys.group_key(self.environment, group_id),
            "ReturnValues": returns,
        }
        return self._send.conditional("update_item", x.request(request))

    def delete_group(self, group_id: str) -> None:
        """Read the keys of the group's partition a page at a time, then delete every
        item chunk (those of openings that lost or died too) and the record last, one
        ``DeleteItem`` each."""
        pk = keys.group_pk(self.environment, group_id)
        x = Expressions()
        x.key(x.compare("pk", "=", pk))
        x.project("pk", "sk")
        request = x.request({"TableName": self.table, "ConsistentRead": True})
        shape = KeyShape({"pk": STRING, "sk": STRING}, ("pk", pk))
        found = [
            {"pk": item["pk"], "sk": item["sk"]}
            for page in every_page(self._query, request, shape)
            for item in page.items
        ]
        for key in sorted(found, key=lambda k: k["sk"]["S"] == keys.GROUP_SK):
            self._send("delete_item", {"TableName": self.table, "Key": key})

    def group_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[Group], str | None]:
        request = query_agenda(self.table, partition, to_epoch_ms(until), limit)
        page = self._query(request, cursor, agenda_key(partition))
        groups = []
        for listed in page.items:
            group_id = listed["pk"]["S"][len(keys.group_pk(self.environment, "")) :]
            group = self.get_group(group_id)
            if group is not None:
                groups.append(group)
        return groups, page.cursor

    def children(self, group: Group, start: int, limit: int) -> list[Run | None]:
        indexes = range(max(0, start), min(group.total, start + min(limit, 100)))
        return self._runs([group.child_id(i) for i in indexes])

    def children_at(self, group: Group, positions: Sequence[int]) -> list[Run | None]:
        return self._runs([group.at(position)[1] for position in positions[:100]])

    def _runs(self, ids: list[str]) -> list[Run | None]:
        found = {
            run.id: run for run in self._batch_get([keys.run_key(self.environment, i) for i in ids])
        }
        return [found.get(i) for i in ids]


def _at_generation(x: Expressions, seen: int) -> str:
    """The group is still at generation ``seen`` (``runs retry-failed`` has not reopened
    it since it was read; a group never reopened stores no generation)."""
    return x.compare("generation", "=", seen) if seen else x.absent("generation")
