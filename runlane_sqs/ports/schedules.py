"""The schedule store port: schedule definitions and their state, beside the runs.

Adapter: :mod:`runlane_sqs.adapters.dynamodb.schedules` (DynamoDB, or the in-memory
DynamoDB of :mod:`runlane_sqs.testing`). Each run store hands out its schedule store as
``store.schedules``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.schedule_state import ScheduleState


class ScheduleConflict(RunlaneError):
    """A schedule write lost: the stored state is not the version the write expected
    (``current``; ``None`` when there is none)."""

    def __init__(self, schedule_id: str, current: ScheduleState | None) -> None:
        super().__init__(f"schedule {schedule_id!r} changed before the write")
        self.schedule_id = schedule_id
        self.current = current


class ScheduleStore(Protocol):
    """Stored schedules of one environment. Every write is conditional on the version."""

    def get_schedule(self, schedule_id: str) -> ScheduleState | None: ...

    def list_schedules(
        self, limit: int, cursor: str | None
    ) -> tuple[list[ScheduleState], str | None]:
        """A page of stored schedules, by id, and the next cursor (``None`` at the end)."""
        ...

    def put_schedule(self, state: ScheduleState, *, expected_version: int | None) -> None:
        """Store ``state`` if the stored version is ``expected_version`` (``None``: if no
        schedule of that id is stored); raises :class:`ScheduleConflict` otherwise."""
        ...

    def schedule_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[ScheduleState], str | None]:
        """Active schedules due at or before ``until`` in one agenda partition, in time
        order, after ``cursor`` (read consistently from the table, not the index)."""
        ...

    def load_sync_mark(self, key: str) -> str | None:
        """The definitions fingerprint last synced by apps registering the task set
        ``key`` (see :mod:`runlane_sqs.engine.scheduling`)."""
        ...

    def save_sync_mark(self, key: str, fingerprint: str) -> None: ...
