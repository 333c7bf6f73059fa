"""The slot store port: the records of concurrency limits, beside the runs.

A claim takes slots and an attempt's end frees them inside the run store's own write
(:meth:`RunStore.apply <runlane_sqs.ports.store.RunStore.apply>`); this port reads the
records and does what maintenance and the waking of waiters need. Adapter:
:mod:`runlane_sqs.adapters.dynamodb.slots` (DynamoDB, or the in-memory DynamoDB of
:mod:`runlane_sqs.testing`). Each run store hands out its slot store as ``store.slots``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from runlane_sqs.core.slots import SlotState


class SlotStore(Protocol):
    """Slot records of one environment (:mod:`runlane_sqs.core.slots`)."""

    def get_slot(self, scope: str) -> SlotState | None:
        """The record of ``scope`` (a consistent read), ``None`` if no slot was ever
        taken there."""
        ...

    def slot_waiters(self, scope: str, limit: int) -> list[str]:
        """Ids of up to ``limit`` runs waiting for a slot of ``scope``, oldest first."""
        ...

    def count_slot_waiters(self, scope: str, up_to: int) -> int:
        """How many runs wait for a slot of ``scope``, counting no further than
        ``up_to``."""
        ...

    def drop_holder(self, scope: str, holder: str) -> bool:
        """Remove a holder whose attempt no longer holds its lease; False if it
        was not listed."""
        ...

    def slot_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[SlotState], str | None]:
        """Like :meth:`RunStore.agenda_page <runlane_sqs.ports.store.RunStore.
        agenda_page>`, for slot records (read consistently)."""
        ...

    def relist_slot(self, scope: str, at: datetime | None) -> None:
        """List the record for maintenance at ``at``; with ``None`` take it off the agenda,
        unless a slot was taken meanwhile."""
        ...
