"""Slot records in memory, for tests: the same conditions and order as DynamoDB.

The run store takes and frees slots inside its own writes (:meth:`take_and_free`, under
the run store's lock), as the DynamoDB store does in one transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.cursors import agenda_key, decode_cursor, encode_cursor
from runlane_sqs.core.clock import to_epoch_ms
from runlane_sqs.core.errors import NoFreeSlot
from runlane_sqs.core.indexes import slot_agenda_pk
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run
from runlane_sqs.core.slots import SlotState, slot_holder, slots_freed, slots_taken


class InMemorySlotStore:
    """Slot records in a dict, guarded by the run store's lock."""

    def __init__(
        self, environment: str, lock: threading.Lock, runs: Callable[[], list[Run]]
    ) -> None:
        self.environment = environment
        self._lock = lock
        self._runs = runs
        self._slots: dict[str, SlotState] = {}

    def take_and_free(self, transition: Transition) -> None:
        """Check and apply a run write's slot changes; the caller holds the lock and has
        checked the run's own condition. Raises :class:`NoFreeSlot` before changing
        anything."""
        taken, freed = slots_taken(transition), slots_freed(transition)
        for slot in taken:
            state = self._slots.get(slot.scope)
            if state is not None and len(state.holders) >= slot.limit:
                raise NoFreeSlot(transition.run_id, slot.scope, len(state.holders), slot.limit)
        after, before = transition.after, transition.before
        for slot in taken:
            assert after.lease is not None
            state = self._slots.get(slot.scope) or SlotState(slot.scope, slot.limit, frozenset())
            self._slots[slot.scope] = replace(
                state,
                limit=slot.limit,
                holders=state.holders | {slot_holder(after.lease.token, after.id)},
                listed_at=state.listed_at or after.lease.expires_at,
            )
        for slot in freed:
            assert before.lease is not None
            state = self._slots.get(slot.scope)
            if state is not None:
                holder = slot_holder(before.lease.token, before.id)
                self._slots[slot.scope] = replace(state, holders=state.holders - {holder})

    def list_scope(self, scope: str, at: datetime) -> None:
        """List a scope's record for maintenance at ``at`` (the caller holds the lock)."""
        state = self._slots.get(scope) or SlotState(scope, 0, frozenset())
        self._slots[scope] = replace(state, listed_at=at)

    def unlist_scope(self, scope: str, listed_at: datetime) -> None:
        """Take a record off the agenda if it is still listed at ``listed_at``."""
        with self._lock:
            state = self._slots.get(scope)
            if state is not None and state.listed_at == listed_at:
                self._slots[scope] = replace(state, listed_at=None)

    def get_slot(self, scope: str) -> SlotState | None:
        with self._lock:
            return self._slots.get(scope)

    def slot_waiters(self, scope: str, limit: int) -> list[str]:
        with self._lock:
            waiting = [r for r in self._runs() if r.slot_wait == scope and r.status.is_runnable]
        waiting.sort(key=lambda r: (to_epoch_ms(r.created_at), r.id))
        return [r.id for r in waiting[:limit]]

    def count_slot_waiters(self, scope: str, up_to: int) -> int:
        return len(self.slot_waiters(scope, up_to))

    def drop_holder(self, scope: str, holder: str) -> bool:
        with self._lock:
            state = self._slots.get(scope)
            if state is None or holder not in state.holders:
                return False
            self._slots[scope] = replace(state, holders=state.holders - {holder})
            return True

    def slot_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[SlotState], str | None]:
        start = decode_cursor(cursor, agenda_key(partition))
        begin = (int(start["agenda_at"]["N"]), start["pk"]["S"]) if start else None
        with self._lock:
            listed = sorted(
                ((to_epoch_ms(s.listed_at), keys.slot_pk(self.environment, s.scope)), s)
                for s in self._slots.values()
                if s.listed_at is not None
                and s.listed_at <= until
                and slot_agenda_pk(self.environment, s.scope) == partition
            )
        listed = [(key, s) for key, s in listed if begin is None or key > begin]
        page = listed[:limit]
        if len(listed) <= limit:
            return [s for _, s in page], None
        at, pk = page[-1][0]
        last = {
            "pk": {"S": pk},
            "sk": {"S": keys.SLOT_SK},
            "agenda_pk": {"S": partition},
            "agenda_at": {"N": str(at)},
        }
        return [s for _, s in page], encode_cursor(last)

    def relist_slot(self, scope: str, at: datetime | None) -> None:
        with self._lock:
            state = self._slots.get(scope)
            if state is None or (at is None and state.holders):
                return
            self._slots[scope] = replace(state, listed_at=at)
