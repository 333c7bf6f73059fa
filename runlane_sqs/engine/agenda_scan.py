"""How a maintenance pass reads the agenda index: partition by partition, page by page,
each partition from the cursor the last pass saved for it.

A pass is never stopped by its own saved state. When the first page of a partition,
read from its saved cursor, fails for good (:class:`~runlane_sqs.errors.InvalidCursor`,
or a permanent :class:`~runlane_sqs.errors.StorageError` such as DynamoDB's
``ValidationException``), the cursor is logged, discarded and the partition read from
its start. A transient error (:class:`~runlane_sqs.errors.StorageUnavailable`) keeps the
cursor for the next pass; any error without a saved cursor behind it is raised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from runlane_sqs.core.bulk import BulkOperation
from runlane_sqs.core.errors import InvalidCursor, StorageError, StorageUnavailable
from runlane_sqs.core.groups import Group
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.model import Run
from runlane_sqs.core.schedule_state import ScheduleState
from runlane_sqs.core.slots import SlotState
from runlane_sqs.core.tokens import Token
from runlane_sqs.core.values import ObjectRecord
from runlane_sqs.ports.store import RunStore

log = logging.getLogger("runlane_sqs.maintenance")
AGENDA_PAGE_SIZE = 25
"""Candidates asked for in one ``Query``."""

Page = (
    list[Run]
    | list[Token]
    | list[ScheduleState]
    | list[SlotState]
    | list[Group]
    | list[ObjectRecord]
    | list[BulkOperation]
)
"""One page of an agenda partition: runs, tokens, schedules, slot records, groups, object
records or bulk operations, by the partition's kind."""


@dataclass
class AgendaScan:
    """The agenda reads of one pass; ``cursors`` (partition to saved cursor) is kept up
    to date in memory and in the store."""

    store: RunStore
    now: datetime
    cursors: dict[str, str]
    out_of_time: Callable[[], bool]
    handle: Callable[[AgendaKind, Page], None]
    """Decides and writes the candidates of one page."""

    def scan(self, kind: AgendaKind, partitions: list[str], per_partition: int) -> None:
        """Up to ``per_partition`` candidates of each partition, saving where each stopped."""
        for partition in partitions:
            if self.out_of_time():
                return
            saved = self.cursors.get(partition)
            cursor, saved = self._partition(kind, partition, saved, per_partition)
            if cursor != saved:
                self.store.progress.save_cursor(partition, cursor)
            if cursor:
                self.cursors[partition] = cursor
            else:
                self.cursors.pop(partition, None)

    def _partition(
        self, kind: AgendaKind, partition: str, saved: str | None, budget: int
    ) -> tuple[str | None, str | None]:
        """Read one partition from its saved cursor. Returns where the scan stopped and
        the cursor still saved (``None`` once a refused one was discarded)."""
        cursor, resuming = saved, saved is not None
        while budget > 0 and not self.out_of_time():
            try:
                listed, cursor = self._page(kind, partition, min(budget, AGENDA_PAGE_SIZE), cursor)
            except (InvalidCursor, StorageError) as exc:
                if not resuming or isinstance(exc, StorageUnavailable):
                    raise
                self._discard(partition, exc)
                cursor = saved = None
                resuming = False
                continue
            resuming = False
            self.handle(kind, listed)
            budget -= len(listed)
            if cursor is None or not listed:
                return None, saved
        return cursor, saved

    def _page(
        self, kind: AgendaKind, partition: str, limit: int, cursor: str | None
    ) -> tuple[Page, str | None]:
        store = self.store
        pages: dict[AgendaKind, Callable[..., tuple[Page, str | None]]] = {
            AgendaKind.TOKEN: store.tokens.token_agenda_page,
            AgendaKind.SCHEDULE: store.schedules.schedule_agenda_page,
            AgendaKind.SLOT: store.slots.slot_agenda_page,
            AgendaKind.GROUP: store.groups.group_agenda_page,
            AgendaKind.OBJECT: store.object_records.object_agenda_page,
            AgendaKind.BULK: store.operations.operation_agenda_page,
        }
        return pages.get(kind, store.agenda_page)(partition, self.now, limit, cursor)

    def _discard(self, partition: str, exc: Exception) -> None:
        log.warning(
            "discarding the saved cursor of %s and scanning it from the start: %s",
            partition,
            exc,
            extra={"partition": partition},
        )
        self.store.progress.save_cursor(partition, None)
