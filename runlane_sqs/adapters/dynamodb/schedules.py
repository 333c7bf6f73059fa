"""Schedules in DynamoDB: one item per schedule in the environment's schedule
collection (``SCHED#{env}``, sorted by id), listed on the agenda index at its next
occurrence while active. Every write is a ``PutItem`` conditioned on the version read.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.cursors import STRING, KeyShape, Query, agenda_key
from runlane_sqs.adapters.dynamodb.errors import Refused, Send
from runlane_sqs.adapters.dynamodb.expressions import Expressions
from runlane_sqs.adapters.dynamodb.items import ScheduleItem
from runlane_sqs.adapters.dynamodb.keys import schedule_agenda_pk
from runlane_sqs.adapters.dynamodb.requests import query_agenda
from runlane_sqs.core.clock import from_epoch_ms, to_epoch_ms
from runlane_sqs.core.schedule_state import ScheduleState, ScheduleStatus
from runlane_sqs.core.schedules import Schedule
from runlane_sqs.ports.schedules import ScheduleConflict


def schedule_to_wire(environment: str, state: ScheduleState) -> dict[str, Any]:
    due = state.due_at
    item = ScheduleItem(
        pk=keys.schedule_pk(environment),
        sk=state.id,
        environment=environment,
        task=state.schedule.task or "",
        definition=json.dumps(state.schedule.to_json(), separators=(",", ":")),
        fingerprint=state.schedule.fingerprint,
        schedule_status=state.status.value,
        next_at=to_epoch_ms(state.next_at) if state.next_at else None,
        last_at=to_epoch_ms(state.last_at) if state.last_at else None,
        updated_at=to_epoch_ms(state.updated_at),
        version=state.version,
        runs=state.runs,
        agenda_pk=schedule_agenda_pk(environment, state.id) if due else None,
        agenda_at=to_epoch_ms(due) if due else None,
    )
    wire: dict[str, Any] = item.serialize()
    return wire


def schedule_from_wire(wire: dict[str, Any]) -> ScheduleState:
    item = ScheduleItem.from_raw_data(wire)
    return ScheduleState(
        schedule=Schedule.from_json(json.loads(item.definition)),
        status=ScheduleStatus(item.schedule_status),
        next_at=from_epoch_ms(int(item.next_at)) if item.next_at is not None else None,
        last_at=from_epoch_ms(int(item.last_at)) if item.last_at is not None else None,
        updated_at=from_epoch_ms(int(item.updated_at)),
        version=int(item.version),
        runs=int(item.runs),
    )


def _listing_key(environment: str) -> KeyShape:
    return KeyShape({"pk": STRING, "sk": STRING}, ("pk", keys.schedule_pk(environment)))


class DynamoScheduleStore:
    """The schedules of one environment, sent through its run store's client."""

    def __init__(self, send: Send, query: Query, table: str, environment: str) -> None:
        self._send = send
        self._query = query
        self.table = table
        self.environment = environment

    def get_schedule(self, schedule_id: str) -> ScheduleState | None:
        request = {
            "TableName": self.table,
            "Key": keys.schedule_key(self.environment, schedule_id),
            "ConsistentRead": True,
        }
        wire = self._send("get_item", request).get("Item")
        return schedule_from_wire(wire) if wire else None

    def list_schedules(
        self, limit: int, cursor: str | None
    ) -> tuple[list[ScheduleState], str | None]:
        x = Expressions(ScheduleItem)
        x.key(x.compare("pk", "=", keys.schedule_pk(self.environment)))
        request = x.request({"TableName": self.table, "ConsistentRead": True, "Limit": limit})
        page = self._query(request, cursor, _listing_key(self.environment))
        return [schedule_from_wire(item) for item in page.items], page.cursor

    def put_schedule(self, state: ScheduleState, *, expected_version: int | None) -> None:
        x = Expressions(ScheduleItem)
        if expected_version is None:
            x.require(x.absent("pk"))
        else:
            x.require(x.compare("version", "=", expected_version))
        request = x.request(
            {
                "TableName": self.table,
                "Item": schedule_to_wire(self.environment, state),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        )
        sent = self._send.conditional("put_item", request)
        if isinstance(sent, Refused):
            stored = schedule_from_wire(sent.item) if sent.item else None
            raise ScheduleConflict(state.id, stored)

    def schedule_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[ScheduleState], str | None]:
        request = query_agenda(self.table, partition, to_epoch_ms(until), limit)
        page = self._query(request, cursor, agenda_key(partition))
        listed = [{"pk": item["pk"], "sk": item["sk"]} for item in page.items]
        found: list[ScheduleState] = []
        # the index holds no schedule state: read the items (a page is <= 100); keys left
        # unprocessed (throttling) stay due, and the next pass reads them
        if listed:
            batch = {self.table: {"Keys": listed, "ConsistentRead": True}}
            got = self._send("batch_get_item", {"RequestItems": batch})
            states = [schedule_from_wire(w) for w in got.get("Responses", {}).get(self.table, [])]
            by_id = {state.id: state for state in states}
            found = [by_id[key["sk"]["S"]] for key in listed if key["sk"]["S"] in by_id]
        return found, page.cursor

    def load_sync_mark(self, key: str) -> str | None:
        request = {
            "TableName": self.table,
            "Key": {
                "pk": {"S": keys.maintenance_pk(self.environment)},
                "sk": {"S": keys.sync_sk(key)},
            },
            "ConsistentRead": True,
        }
        item = self._send("get_item", request).get("Item")
        return item["fingerprint"]["S"] if item else None

    def save_sync_mark(self, key: str, fingerprint: str) -> None:
        item = {
            "pk": {"S": keys.maintenance_pk(self.environment)},
            "sk": {"S": keys.sync_sk(key)},
            "fingerprint": {"S": fingerprint},
        }
        self._send("put_item", {"TableName": self.table, "Item": item})
