"""The in-memory group store: the DynamoDB group store's conditions, in dicts."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.codec import compact_json
from runlane_sqs.adapters.dynamodb.cursors import agenda_key, decode_cursor, encode_cursor
from runlane_sqs.core.clock import to_epoch_ms, truncate_ms
from runlane_sqs.core.errors import LeaseLost
from runlane_sqs.core.groups import COUNTED, Group, Item
from runlane_sqs.core.indexes import AgendaKind, agenda_pk
from runlane_sqs.core.model import Run, RunStatus
from runlane_sqs.core.values import ENVELOPE_MARK
from runlane_sqs.ports.groups import Counted


class InMemoryGroupStore:
    """The groups of one environment (``store.groups``); shares the run store's lock."""

    def __init__(
        self, environment: str, lock: threading.Lock, get_run: Callable[[str], Run | None]
    ) -> None:
        self.environment = environment
        self._lock = lock
        self._get_run = get_run
        self._groups: dict[str, Group] = {}
        self._chunks: dict[tuple[str, int], list[Item]] = {}

    def open_group(
        self, group: Group, chunks: Sequence[Sequence[Item]], fence: tuple[str, str] | None
    ) -> tuple[Group, bool]:
        with self._lock:
            if fence is not None:
                parent = self._get_run(fence[0])
                if parent is None or parent.lease is None or parent.lease.token != fence[1]:
                    raise LeaseLost(fence[0])
            stored = self._groups.get(group.id)
            if stored is not None:
                return stored, False
            group = replace(
                group,
                created_at=truncate_ms(group.created_at),
                review_at=truncate_ms(group.review_at) if group.review_at else None,
            )
            self._groups[group.id] = group
            for n, items in enumerate(chunks):
                self._chunks[(group.id, n)] = [
                    Item(i.task, compact_json_text(i.payload_text)) for i in items
                ]
            return group, True

    def get_group(self, group_id: str) -> Group | None:
        with self._lock:
            return self._groups.get(group_id)

    def get_items(self, group: Group, chunk: int) -> list[Item]:
        with self._lock:
            return list(self._chunks.get((group.id, chunk), []))

    def mark_started(
        self, group_id: str, seen: int, lanes: Mapping[int, int]
    ) -> tuple[bool, Group | None]:
        with self._lock:
            group = self._groups.get(group_id)
            if group is None or group.started != seen or not _still_runs(group):
                return False, group
            group = replace(group, started=seen + len(lanes), lanes={**group.lanes, **dict(lanes)})
            self._groups[group_id] = group
            return True, group

    def count(
        self, group_id: str, lane: int, position: int, status: RunStatus, *, start: bool
    ) -> Counted:
        with self._lock:
            group = self._groups.get(group_id)
            if group is None or group.lanes.get(lane) != position:
                return Counted(False, group)
            name = COUNTED[status]
            after = replace(group, **{name: getattr(group, name) + 1})
            if start:
                if group.started >= group.positions or not _still_runs(after):
                    return Counted(False, group)
                lanes = {**group.lanes, lane: group.started}
                after = replace(after, lanes=lanes, started=group.started + 1)
            else:
                after = replace(after, lanes={k: v for k, v in group.lanes.items() if k != lane})
            self._groups[group_id] = after
            return Counted(True, after)

    def mark_joined(self, group_id: str, at: datetime) -> bool:
        with self._lock:
            group = self._groups.get(group_id)
            if group is None or group.joined_at is not None:
                return False
            self._groups[group_id] = replace(group, joined_at=truncate_ms(at), review_at=None)
            return True

    def mark_stopped(self, group_id: str, at: datetime) -> Group | None:
        with self._lock:
            group = self._groups.get(group_id)
            if group is None or group.joined_at is not None:
                return None
            if group.stopped_at is None:
                group = replace(group, stopped_at=truncate_ms(at))
                self._groups[group_id] = group
            return group

    def reopen(self, reopened: Group, seen_generation: int, failed: int, cancelled: int) -> bool:
        with self._lock:
            group = self._groups.get(reopened.id)
            if (
                group is None
                or group.joined_at is None
                or group.stopped_at is not None
                or group.generation != seen_generation
            ):
                return False
            self._groups[group.id] = replace(
                group,
                generation=reopened.generation,
                redriven=reopened.redriven,
                redrive_by=reopened.redrive_by,
                failed=group.failed - failed,
                cancelled=group.cancelled - cancelled,
                joined_at=None,
                review_at=truncate_ms(reopened.review_at or group.created_at),
            )
            return True

    def relist(self, group_id: str, at: datetime) -> None:
        with self._lock:
            group = self._groups.get(group_id)
            if group is not None and group.joined_at is None:
                self._groups[group_id] = replace(group, review_at=truncate_ms(at))

    def group_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[Group], str | None]:
        start = decode_cursor(cursor, agenda_key(partition))
        after = (int(start["agenda_at"]["N"]), start["pk"]["S"]) if start else None
        with self._lock:
            candidates = [
                ((to_epoch_ms(g.review_at), keys.group_pk(self.environment, g.id)), g)
                for g in self._groups.values()
                if g.review_at is not None
                and g.joined_at is None
                and g.review_at <= until
                and agenda_pk(self.environment, AgendaKind.GROUP.value, g.id) == partition
            ]
        candidates.sort(key=lambda pair: pair[0])
        listed = [pair for pair in candidates if after is None or pair[0] > after]
        page = listed[:limit]
        if not page or len(listed) <= limit:
            return [g for _, g in page], None
        at, pk = page[-1][0]
        key = {"pk": {"S": pk}, "sk": {"S": keys.GROUP_SK}, "agenda_pk": {"S": partition}}
        return [g for _, g in page], encode_cursor({**key, "agenda_at": {"N": str(at)}})

    def children(self, group: Group, start: int, limit: int) -> list[Run | None]:
        indexes = range(max(0, start), min(group.total, start + min(limit, 100)))
        with self._lock:
            return [self._get_run(group.child_id(i)) for i in indexes]

    def children_at(self, group: Group, positions: Sequence[int]) -> list[Run | None]:
        with self._lock:
            return [self._get_run(group.at(position)[1]) for position in positions[:100]]


def _still_runs(group: Group) -> bool:
    """A group may start a position: not joined, not stopped, not failed."""
    return group.joined_at is None and group.stopped_at is None and group.allowance >= 0


def compact_json_text(payload_text: str) -> str:
    """A payload's stored text as the DynamoDB store gives it back (JSON compacted, an
    envelope as is)."""
    if payload_text.startswith(ENVELOPE_MARK):
        return payload_text
    return compact_json(json.loads(payload_text))
