"""Schedules in memory, for tests: the same conditions and agenda order as DynamoDB."""

from __future__ import annotations

import threading
from datetime import datetime

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.cursors import (
    STRING,
    KeyShape,
    agenda_key,
    decode_cursor,
    encode_cursor,
)
from runlane_sqs.core.clock import to_epoch_ms
from runlane_sqs.core.indexes import schedule_agenda_pk
from runlane_sqs.core.schedule_state import ScheduleState
from runlane_sqs.ports.schedules import ScheduleConflict


class InMemoryScheduleStore:
    """Schedules in a dict, guarded by a lock."""

    def __init__(self, environment: str = "dev") -> None:
        self.environment = environment
        self._schedules: dict[str, ScheduleState] = {}
        self._marks: dict[str, str] = {}
        self._lock = threading.Lock()

    def get_schedule(self, schedule_id: str) -> ScheduleState | None:
        with self._lock:
            return self._schedules.get(schedule_id)

    def list_schedules(
        self, limit: int, cursor: str | None
    ) -> tuple[list[ScheduleState], str | None]:
        pk = keys.schedule_pk(self.environment)
        start = decode_cursor(cursor, KeyShape({"pk": STRING, "sk": STRING}, ("pk", pk)))
        after = start["sk"]["S"] if start else ""
        with self._lock:
            found = sorted((s for s in self._schedules.values() if s.id > after), key=_by_id)
        page = found[:limit]
        if len(found) <= limit:
            return page, None
        return page, encode_cursor({"pk": {"S": pk}, "sk": {"S": page[-1].id}})

    def put_schedule(self, state: ScheduleState, *, expected_version: int | None) -> None:
        with self._lock:
            current = self._schedules.get(state.id)
            stored_version = current.version if current else None
            if stored_version != expected_version:
                raise ScheduleConflict(state.id, current)
            self._schedules[state.id] = state

    def schedule_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[ScheduleState], str | None]:
        start = decode_cursor(cursor, agenda_key(partition))
        begin = (int(start["agenda_at"]["N"]), start["sk"]["S"]) if start else None
        with self._lock:
            listed = [
                ((to_epoch_ms(s.due_at), s.id), s)
                for s in self._schedules.values()
                if s.due_at is not None
                and s.due_at <= until
                and schedule_agenda_pk(self.environment, s.id) == partition
            ]
        listed = sorted((e for e in listed if begin is None or e[0] > begin), key=lambda e: e[0])
        page = listed[:limit]
        if len(listed) <= limit:
            return [s for _, s in page], None
        (at, schedule_id), _ = page[-1]
        last = {
            "pk": {"S": keys.schedule_pk(self.environment)},
            "sk": {"S": schedule_id},
            "agenda_pk": {"S": partition},
            "agenda_at": {"N": str(at)},
        }
        return [s for _, s in page], encode_cursor(last)

    def load_sync_mark(self, key: str) -> str | None:
        with self._lock:
            return self._marks.get(key)

    def save_sync_mark(self, key: str, fingerprint: str) -> None:
        with self._lock:
            self._marks[key] = fingerprint


def _by_id(state: ScheduleState) -> str:
    return state.id
