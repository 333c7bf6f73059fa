"""The run store port: where runs, tokens, keys and maintenance cursors are kept.

Adapter: :mod:`runlane_sqs.adapters.dynamodb.store` (DynamoDB; for tests, over the
in-memory DynamoDB of :mod:`runlane_sqs.adapters.memory.dynamodb`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from runlane_sqs.core.batches import Append, Fill
from runlane_sqs.core.debounce import Collapse
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.machine import HintedClaim, Transition
from runlane_sqs.core.model import Lease, Run, RunEvent, RunStatus, WaitKind
from runlane_sqs.core.ordering import Place
from runlane_sqs.core.progress import AttemptReport
from runlane_sqs.core.rate_deploys import Spacing
from runlane_sqs.ports.bulk import OperationStore
from runlane_sqs.ports.groups import GroupStore
from runlane_sqs.ports.health import HealthStore
from runlane_sqs.ports.keys import KeyClaim, KeyStore
from runlane_sqs.ports.objects import ObjectRecords
from runlane_sqs.ports.ordering import OrderStore
from runlane_sqs.ports.rates import RateStore
from runlane_sqs.ports.schedules import ScheduleStore
from runlane_sqs.ports.slots import SlotStore
from runlane_sqs.ports.tokens import TokenStore
from runlane_sqs.ports.transactions import TransactionStore


@dataclass(frozen=True, slots=True)
class RunQuery:
    """Which runs ``app.runs.list`` and ``prune`` look at (newest first)."""

    statuses: tuple[RunStatus, ...] = tuple(RunStatus)
    task: str | None = None
    queue: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    schedule: str | None = None
    """Only runs made by this schedule (read, then kept: pages may be short)."""
    tags: tuple[tuple[str, str], ...] = ()
    """Only runs carrying every one of these tags (key, value), read from the tag index
    of the first (docs/tags.md)."""


class ProgressStore(Protocol):
    """What maintenance keeps between passes: where it stopped in each agenda partition,
    when it last saw each queue drained, and the rate limits its code last set."""

    def load_cursors(self) -> dict[str, str]:
        """Maintenance's saved cursors, by agenda partition."""
        ...

    def save_cursor(self, partition: str, cursor: str | None) -> None:
        """Remember (or, with ``None``, forget) where maintenance stopped in a partition."""
        ...

    def load_drained(self) -> dict[str, datetime]:
        """When maintenance last saw each queue drained, by queue."""
        ...

    def save_drained(self, queue: str, at: datetime) -> None:
        """Remember that ``queue`` was drained by ``at`` (a later time than the one kept;
        an earlier one is ignored, so overlapping passes never move it back)."""
        ...

    def load_rate_limits(self) -> dict[str, Spacing] | None:
        """The rate limits maintenance last saw, by pattern (``None``: never saved)."""
        ...

    def save_rate_limits(self, limits: Mapping[str, Spacing]) -> None:
        """Keep the rate limits maintenance sees now, by pattern."""
        ...


class RunStore(Protocol):
    """Authoritative storage of runs. Every state change is one conditional write."""

    @property
    def schedules(self) -> ScheduleStore:
        """The schedules of the same environment (:mod:`runlane_sqs.ports.schedules`)."""
        ...

    @property
    def slots(self) -> SlotStore:
        """The concurrency slot records of the same environment (:mod:`runlane_sqs.ports.
        slots`)."""
        ...

    @property
    def orders(self) -> OrderStore:
        """The ordering keys of the same environment (:mod:`runlane_sqs.ports.ordering`)."""
        ...

    @property
    def health(self) -> HealthStore:
        """Bounded reads of the same environment and its last maintenance pass
        (:mod:`runlane_sqs.ports.health`)."""
        ...

    @property
    def tokens(self) -> TokenStore:
        """The tokens of the same environment (:mod:`runlane_sqs.ports.tokens`)."""
        ...

    @property
    def keys(self) -> KeyStore:
        """The idempotency and singleton keys of the same environment (a new run's keys
        are claimed by :meth:`create_run`)."""
        ...

    @property
    def groups(self) -> GroupStore:
        """The groups of the same environment (:mod:`runlane_sqs.ports.groups`); a
        child's terminal write counts it in its group (:meth:`apply`)."""
        ...

    @property
    def object_records(self) -> ObjectRecords:
        """The records counting the references to each object of the payload bucket
        (:mod:`runlane_sqs.ports.objects`): the writes here that store a reference, or
        delete a run, count them in the same transaction."""
        ...

    @property
    def rates(self) -> RateStore:
        """The rate limit records of the same environment (:mod:`runlane_sqs.ports.rates`):
        a claim takes its run's starts there before its own write."""
        ...

    @property
    def transactions(self) -> TransactionStore:
        """Transactions holding the caller's own writes and new runs
        (:mod:`runlane_sqs.ports.transactions`)."""
        ...

    @property
    def operations(self) -> OperationStore:
        """The bulk operations of the same environment (:mod:`runlane_sqs.ports.
        operations`)."""
        ...

    @property
    def progress(self) -> ProgressStore:
        """Where maintenance's passes stopped, in the same environment."""
        ...

    def create_run(
        self,
        run: Run,
        event: RunEvent,
        payload_text: str,
        claims: Sequence[KeyClaim] = (),
        place: Place | None = None,
    ) -> None:
        """Store a new run (and its key claims and its place in an ordering key's line,
        atomically); raises :class:`KeyConflict`, or
        :class:`~runlane_sqs.core.errors.OrderMoved` if the key's order record is no
        longer as ``place`` saw it."""
        ...

    def get_run(self, run_id: str) -> Run | None: ...

    def get_events(self, run_id: str) -> list[RunEvent]: ...

    def get_history(self, run_id: str) -> tuple[Run, list[RunEvent]] | None:
        """The run and its events from one read (``None``: no such run)."""
        ...

    def get_histories(self, run_ids: Sequence[str]) -> dict[str, tuple[Run, list[RunEvent]]]:
        """Up to 100 runs and their events by id, from one consistent read (runs that do
        not exist are left out)."""
        ...

    def apply(self, transition: Transition) -> Run:
        """Write ``transition`` if the run is still as it was read.

        Raises :class:`~runlane_sqs.core.errors.ConflictError` carrying the stored run otherwise.
        A claim that takes concurrency slots takes them in the same atomic write, or raises
        :class:`~runlane_sqs.core.errors.NoFreeSlot` and writes nothing; a write that ends
        an attempt frees the slots it held in the same write, a write that makes an
        ordered run terminal leaves its key's line in the same write, and a write that
        makes a group's child terminal counts it in its group in the same write.
        """
        ...

    def collapse(self, collapse: Collapse) -> Run:
        """Replace the payload and the due time of a debounced run that has not started
        (queued, no attempt, with the collapse's debounce key and, with ``seen``, that
        many collapses so far), counting one more collapse; returns the stored run.
        Raises :class:`~runlane_sqs.core.errors.ConflictError` carrying the stored run
        (``None`` if there is none) otherwise."""
        ...

    def append_item(self, append: Append) -> Run:
        """Add an item to a batch run that has not started (queued, no attempt, with the
        append's batch key) and has room for it, counting one more item; returns the
        stored run. Raises :class:`~runlane_sqs.core.errors.ConflictError` carrying the
        stored run (``None`` if there is none) otherwise."""
        ...

    def fill_batch(self, fill: Fill) -> Run:
        """Make a batch run that has not started due at ``fill.now``, if it is due later;
        returns the stored run. Raises :class:`~runlane_sqs.core.errors.ConflictError`
        carrying the stored run otherwise."""
        ...

    def claim_hinted(self, claim: HintedClaim) -> Run:
        """Write ``claim`` without reading the run first, if its hint still holds
        (:meth:`HintedClaim.holds <runlane_sqs.core.machine.HintedClaim.holds>`); returns
        the claimed run. Raises :class:`~runlane_sqs.core.errors.ConflictError` carrying
        the stored run (``None`` if there is none) otherwise."""
        ...

    def renew_lease(self, run: Run, lease: Lease) -> Run:
        """Extend a lease; raises :class:`~runlane_sqs.core.errors.LeaseLost` if it is not
        current."""
        ...

    def report_progress(self, run: Run, token: str, report: AttemptReport) -> Run:
        """Write what the attempt holding ``token`` reported (no event); raises
        :class:`~runlane_sqs.core.errors.LeaseLost` if that lease is not current."""
        ...

    def agenda_partitions(self, kind: AgendaKind) -> list[str]:
        """Every agenda partition of the environment that holds entries of ``kind`` (what
        maintenance scans, one page at a time each: :meth:`agenda_page`)."""
        ...

    def agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[Run], str | None]:
        """Up to ``limit`` runs listed in an agenda ``partition`` at or before ``until``,
        in time order, after ``cursor``; returns them and the next cursor (``None`` at the
        end). Runs read from the index carry no payload, result or history."""
        ...

    def watch_run(self, run_id: str) -> Run | None:
        """Mark a run as awaited by another and return it (``None`` if unknown)."""
        ...

    def waiting_runs(
        self, kind: WaitKind, target: str, limit: int, cursor: str | None
    ) -> tuple[list[str], str | None]:
        """Ids of runs released to wait for ``target``, a page at a time."""
        ...

    def list_runs(
        self, query: RunQuery, limit: int, cursor: str | None
    ) -> tuple[list[Run], str | None]:
        """A page of runs matching ``query``, newest first, from the status index (or, by
        tags, the tag indexes)."""
        ...

    def delete_run(self, run: Run, now: datetime) -> bool:
        """Remove a finished run that has not changed since read, taking its references
        off their object records; False if it had changed."""
        ...
