"""Reading concurrency and rate limits: ``app.queues`` (how many slots each limit's
scope has held and how many runs wait for one; each rate limit's next start and the
starts reserved ahead).

The scopes listed are the queues the app's code defines (with their limits) and every
scope whose slot record maintenance has listed, that is every limit with holders or
waiters lately, read from the agenda index: an operator's app needs none of the code
that sets the limits to see them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from runlane_sqs.core.clock import EPOCH
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.ordering import is_order_scope
from runlane_sqs.core.rates import RateLimit, to_epoch_us, view_of
from runlane_sqs.core.slots import KEY_SCOPE, QUEUE_SCOPE, SlotState, queue_scope
from runlane_sqs.engine.engine import Engine

WAITING_COUNTED = 1000
"""Waiting runs counted per scope; more show as this many."""
ACTIVE_PAGE = 100
FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Occupancy:
    """One concurrency limit's scope and how its slots are used now."""

    scope: str
    """``queue#{queue}`` or ``key#{task}#{key}``."""
    kind: str
    """``queue`` or ``key``."""
    name: str
    """The queue's name, or ``{task}#{key}``."""
    limit: int | None
    """The limit this app's code sets (``None``: not one this app defines)."""
    stored_limit: int | None
    """The limit of the last claim that took a slot (``None``: no slot taken yet)."""
    holding: int
    """Attempts holding a slot now."""
    waiting: int
    """Runs waiting for a slot (at most :data:`WAITING_COUNTED`)."""

    def to_json(self) -> dict[str, object]:
        return {
            "scope": self.scope,
            "kind": self.kind,
            "name": self.name,
            "limit": self.limit,
            "stored_limit": self.stored_limit,
            "holding": self.holding,
            "waiting": self.waiting,
        }


@dataclass(frozen=True, slots=True)
class RateState:
    """One rate limit's scope and where its reservations stand now."""

    scope: str
    """``rate#queue#{queue}``, ``rate#task#{task}#{per}`` or ``rate#key#{task}#{per}#{key}``."""
    limit: RateLimit
    """The limit this app's code sets."""
    next_start: datetime | None
    """The earliest start a claim made now would get (``None``: no start reserved yet,
    so now)."""
    available: int
    """Runs that could start at once, one after another (``1 + burst`` when idle)."""
    reserved_ahead: int
    """Starts whose spacing reaches beyond now, in cost units: the runs waiting for their
    start, and the last one to start while its spacing lasts."""
    stored_matches: bool
    """Whether the last reservation was made under this limit (a deploy that changed it
    applies to reservations made from then on, and the next maintenance pass applies a
    raised or removed one to the starts reserved before; docs/rate-limits.md)."""

    @property
    def limit_text(self) -> str:
        """The limit as ``rate/per`` and ``+burst`` (``10/1s +2``)."""
        per = self.limit.per
        assert isinstance(per, timedelta)  # a RateLimit keeps its per as a timedelta
        text = f"{self.limit.rate}/{per.total_seconds():g}s"
        return text + f" +{self.limit.burst}" if self.limit.burst else text

    def to_json(self) -> dict[str, object]:
        per = self.limit.per
        assert isinstance(per, timedelta)
        return {
            "scope": self.scope,
            "rate": self.limit.rate,
            "per_seconds": per.total_seconds(),
            "burst": self.limit.burst,
            "per_key": self.limit.per_key,
            "next_start": self.next_start.isoformat() if self.next_start else None,
            "available": self.available,
            "reserved_ahead": self.reserved_ahead,
            "stored_matches": self.stored_matches,
        }


RateStates = list[RateState]
"""(``QueuesApi.list`` hides the built-in name inside the class.)"""


class QueuesApi:
    """``app.queues``: the occupancy of the environment's concurrency limits."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def _active(self) -> list[SlotState]:
        slots = self._engine.store.slots
        found: list[SlotState] = []
        for partition in self._engine.store.agenda_partitions(AgendaKind.SLOT):
            cursor: str | None = None
            while True:
                page, cursor = slots.slot_agenda_page(partition, FAR_FUTURE, ACTIVE_PAGE, cursor)
                found.extend(page)
                if cursor is None:
                    break
        return found

    def _occupancy(
        self, scope: str, limits: dict[str, int | None], state: SlotState | None
    ) -> Occupancy:
        kind, _, name = scope.partition("#")
        limit = limits.get(scope)
        if kind == KEY_SCOPE:
            task = self._engine.tasks.get(name.partition("#")[0])
            limit = task.key_limit if task is not None else None
        assert kind in (QUEUE_SCOPE, KEY_SCOPE), scope
        return Occupancy(
            scope=scope,
            kind=kind,
            name=name,
            limit=limit,
            stored_limit=state.limit if state is not None else None,
            holding=len(state.holders) if state is not None else 0,
            waiting=self._engine.store.slots.count_slot_waiters(scope, WAITING_COUNTED),
        )

    def list(self) -> list[Occupancy]:
        """Every queue the app defines, and every scope with holders or waiters lately,
        by scope."""
        tasks = self._engine.tasks
        limits = {queue_scope(q.name): q.concurrency_limit for q in tasks.defined_queues()}
        stored = {
            state.scope: state
            for state in self._active()
            if not is_order_scope(state.scope)  # an ordering key's record, not a limit
        }
        for scope in limits.keys() - stored.keys():
            state = self._engine.store.slots.get_slot(scope)
            if state is not None:
                stored[scope] = state
        return [
            self._occupancy(scope, limits, stored.get(scope)) for scope in sorted(limits | stored)
        ]

    def rates(self, keys: Iterable[str] = ()) -> RateStates:
        """Every rate limit this app defines, by scope, with its reservations now: the
        queues' and the tasks' limits, and the per-key ones of every key with a record
        (and of ``keys``, which may have none yet)."""
        now_us = to_epoch_us(self._engine.clock.now())
        tasks, found = self._engine.tasks, []
        stored = self._engine.store.rates.scopes() if tasks.keyed_rates() else []
        for scope, limit in tasks.defined_rates(keys, stored):
            rate = limit.rate_in(scope)
            record = self._engine.store.rates.read(scope)
            if record is None:
                found.append(RateState(scope, limit, None, limit.burst + 1, 0, True))
                continue
            view = view_of(record, now_us)
            found.append(
                RateState(
                    scope,
                    limit,
                    EPOCH + timedelta(microseconds=view.next_start_us),
                    view.available,
                    view.reserved_ahead,
                    (record.interval_us, record.tolerance_us)
                    == (rate.interval_us, rate.tolerance_us),
                )
            )
        return found
