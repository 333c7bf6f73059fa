"""Maintenance: connects due work back to delivery and repairs the same run when
delivery or ownership stopped making progress.

One pass runs four bounded scans of the agenda index (never a table Scan):

- ``run``: runnable runs whose wakeup time has come (retry backoff over, release time
  reached, a queued run whose eager publish failed or was lost) get a fresh wakeup;
  leased runs whose lease or attempt deadline has passed are finalized as timed out,
  cancelled (abandoned cancellation), made runnable again (expired lease) or failed
  with ``lease_lost``; a run listed early with nothing to do yet (a live lease, a
  wakeup still trusted) is listed again at its agenda time;
- ``token``: pending tokens past their timeout are timed out, and decided tokens resume
  their remaining waiters in batches;
- ``schedule``: after the app's schedules are synced with storage, due occurrences of
  schedules of tasks this app registers become runs (``schedules``;
  :mod:`runlane_sqs.engine.scheduling`);
- ``slot``: concurrency slot records with holders or waiters drop holders that lost
  their lease and wake runs waiting for free slots (``slots``;
  :mod:`runlane_sqs.engine.slots`). A recovered lease frees its slots in the recovery's
  own write, which wakes the oldest waiter at once.

Then the app's rate limits are compared with those the last pass saw: a limit a deploy
raised or removed drops the starts reserved under it and wakes its sleeping runs
(``rate_limits``; :mod:`runlane_sqs.engine.rate_changes`). Then parked runs of tasks this
app registers are unparked (``parked_runs``; from the status index, see
:mod:`runlane_sqs.engine.parking`). Last, with the time left (at most ``bulk_seconds``),
bulk operations whose process died (their lease expired: the agenda's ``bulk`` kind) are
taken over and carried on from their last write, then handed back listed at once
(``bulk_operations``; :mod:`runlane_sqs.core.bulk`).

The ``run`` scan also checks runs waiting on a token or a run whose resume may have been
missed (``wait_checks``).

Each candidate is re-checked by a conditional write; one that changed meanwhile is
skipped. Scans resume from opaque cursors kept in DynamoDB, so two passes can overlap
(EventBridge may deliver a schedule twice) without double effects.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from runlane_sqs.core import telemetry as t
from runlane_sqs.core.bulk import BulkOperation
from runlane_sqs.core.clock import Clock
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import (
    ConfigurationError,
    ConflictError,
    IllegalTransition,
    RunlaneError,
)
from runlane_sqs.core.groups import Group
from runlane_sqs.core.indexes import AGENDA_SHARDS, SCANNED_KINDS, AgendaKind
from runlane_sqs.core.machine import Skip, Transition
from runlane_sqs.core.model import LEASED_STATUSES, Run, RunStatus, WaitKind
from runlane_sqs.core.ordering import is_order_scope
from runlane_sqs.core.recovery import (
    RecoverySettings,
    is_held,
    plan_publish,
    recover_lease,
    relist,
)
from runlane_sqs.core.schedule_state import ScheduleState
from runlane_sqs.core.slots import SlotState, slots_freed
from runlane_sqs.core.tokens import Token
from runlane_sqs.core.values import ObjectRecord
from runlane_sqs.core.waits import poll_later
from runlane_sqs.engine.agenda_scan import AGENDA_PAGE_SIZE, AgendaScan, Page
from runlane_sqs.engine.finishing import Finisher
from runlane_sqs.engine.groups import Groups
from runlane_sqs.engine.observing import Observer
from runlane_sqs.engine.ordering import Turns
from runlane_sqs.engine.parking import Parking
from runlane_sqs.engine.publishing import Publisher
from runlane_sqs.engine.queue_progress import QueueProgress
from runlane_sqs.engine.rate_changes import RateChanges
from runlane_sqs.engine.reports import (
    JOB_BULK,
    JOB_DUE,
    JOB_EXPIRED,
    JOB_GROUPS,
    JOB_OBJECTS,
    JOB_PARKED,
    JOB_RATES,
    JOB_SCHEDULES,
    JOB_TOKENS,
    JOB_WAITS,
    JOBS,
    JobReport,
    PassReport,
    SlotsReport,
    job_of,
    keep_pass,
    log_pass,
    pass_counts,
)
from runlane_sqs.engine.republishing import PendingWakeup, Republisher
from runlane_sqs.engine.resuming import Resumer
from runlane_sqs.engine.scheduling import Scheduler
from runlane_sqs.engine.slots import SlotWaker
from runlane_sqs.engine.tasks import TaskRegistry
from runlane_sqs.engine.tokens import TokensApi
from runlane_sqs.engine.values import Values
from runlane_sqs.ports.bulk import OperationConflict
from runlane_sqs.ports.store import RunStore
from runlane_sqs.ports.transport import BacklogProbe

log = logging.getLogger("runlane_sqs.maintenance")
MAINTENANCE_RESUME_BATCH = 100
"""Waiters of one decided token resumed per pass."""


@dataclass(frozen=True)
class MaintenanceConfig:
    """Bounds and thresholds of one maintenance pass."""

    limit_per_job: int = 200
    """Most candidates each scan (runs, tokens) examines per pass, split evenly across
    the scan's partitions: at least one per partition (``AGENDA_SHARDS``)."""
    max_lease_losses: int = 3
    """Consecutive lease expiries after which a run fails with ``lease_lost``."""
    stranded_after: timedelta = timedelta(minutes=15)
    """How long past its due time a run of a task with ``pin_version`` may go unclaimed
    before a pass reports it stranded: no worker of its app version took it."""
    bulk_seconds: float = 30.0
    """The most time a pass spends carrying on bulk operations whose process died (less
    when its time budget ends sooner); the next pass goes on from where it handed them
    back."""

    def __post_init__(self) -> None:
        if self.limit_per_job < AGENDA_SHARDS:
            raise ConfigurationError(
                f"limit_per_job must be at least {AGENDA_SHARDS}, one candidate for each "
                f"agenda partition of a scan; got {self.limit_per_job}"
            )
        if self.max_lease_losses < 1:
            raise ConfigurationError(
                f"max_lease_losses must be at least 1; got {self.max_lease_losses}"
            )


class BulkCarrier(Protocol):
    """What carries a bulk operation on (the app's ``app.bulk``,
    :class:`~runlane_sqs.api.bulk.BulkApi`): maintenance takes over one whose process
    died."""

    def take_over(
        self, operation: BulkOperation, *, owner: str, until: datetime
    ) -> BulkOperation: ...


_FIRST_KINDS = tuple(kind for kind in SCANNED_KINDS if kind is not AgendaKind.BULK)
"""The kinds a pass scans first; bulk operations come last, with the time left."""


@dataclass(frozen=True)
class _Budget:
    """A pass's time budget (``None``: unbounded), from ``started`` (monotonic)."""

    started: float
    seconds: float | None

    def over(self) -> bool:
        return self.seconds is not None and time.monotonic() - self.started > self.seconds

    def left(self) -> float:
        if self.seconds is None:
            return float("inf")
        return self.seconds - (time.monotonic() - self.started)


@dataclass
class _BulkTakeOver:
    """One pass's take-over of the bulk operations whose lease expired: one after
    another, each carried on until ``until`` at most."""

    carrier: Callable[[], BulkCarrier]
    clock: Clock
    seconds: float
    """How long it may carry operations on, from its start."""
    job: JobReport
    owner: str = field(default_factory=lambda: f"maintenance:{socket.gethostname()}:{os.getpid()}")
    until: datetime = field(init=False)

    def __post_init__(self) -> None:
        self.until = self.clock.now() + timedelta(seconds=max(0.0, self.seconds))

    def scan(self, scan: AgendaScan) -> None:
        """Read the agenda's ``bulk`` partitions with :meth:`handle`."""
        partitions = scan.store.agenda_partitions(AgendaKind.BULK)
        scan.scan(AgendaKind.BULK, partitions, AGENDA_PAGE_SIZE)

    def handle(self, kind: AgendaKind, page: Page) -> None:
        for operation in page:
            assert isinstance(operation, BulkOperation)
            self.job.examined += 1
            if self.clock.now() >= self.until:
                self.job.skipped += 1  # out of time: the next pass takes it over
                continue
            self._take_over(operation)

    def _take_over(self, operation: BulkOperation) -> None:
        try:
            carried = self.carrier().take_over(operation, owner=self.owner, until=self.until)
        except IllegalTransition:
            self.job.skipped += 1  # its process renewed its lease, or it ended, since listed
            return
        except OperationConflict:
            self.job.conflicts += 1  # another process took it first
            return
        except RunlaneError as exc:
            log.warning(
                "maintenance could not carry bulk operation %s on: %s",
                operation.id,
                exc,
                extra={"operation": operation.id},
            )
            return
        self.job.acted += 1
        log.info(
            "maintenance carried bulk operation %s on: %s, %d of %s runs examined",
            operation.id,
            carried.status.value,
            carried.tally.selected,
            carried.selected_at_start,
            extra={"operation": operation.id},
        )


def _polls_target(run: Run) -> bool:
    """A released run waiting on a token or a run is listed to have its target checked."""
    waiting = run.waiting
    return (
        run.status is RunStatus.RELEASED
        and waiting is not None
        and waiting.kind in (WaitKind.TOKEN, WaitKind.RUN, WaitKind.GROUP)
        and run.due_at is None
    )


class Maintenance:
    """``app.maintenance``: run passes from a schedule, a loop or a test."""

    def __init__(
        self,
        *,
        store: RunStore,
        publisher: Publisher,
        resumer: Resumer,
        finisher: Finisher,
        tokens: TokensApi,
        parking: Parking,
        scheduler: Scheduler,
        slot_waker: SlotWaker,
        turns: Turns,
        groups: Groups,
        values: Values,
        tasks: TaskRegistry,
        clock: Clock,
        config: RunlaneConfig,
        observer: Observer,
        bounds: MaintenanceConfig | None = None,
        backlog: BacklogProbe | None = None,
        bulk: Callable[[], BulkCarrier] | None = None,
    ) -> None:
        self._observer = observer
        self._store = store
        self._publisher = publisher
        self._resumer = resumer
        self._finisher = finisher
        self._tokens = tokens
        self._parking = parking
        self._scheduler = scheduler
        self._slots = slot_waker
        self._turns = turns
        self._groups = groups
        self._values = values
        self._tasks = tasks
        self._clock = clock
        self._config = config
        self.bounds = bounds or MaintenanceConfig()
        """This app's maintenance bounds and thresholds (set a new
        :class:`MaintenanceConfig` to change them)."""
        self._backlog = backlog
        self._bulk = bulk
        self._rate_changes = RateChanges(store=store, tasks=tasks, config=config)

    @property
    def recovery(self) -> RecoverySettings:
        """How a pass recovers leases and republishes wakeups."""
        return RecoverySettings(
            max_lease_losses=self.bounds.max_lease_losses, republish=self._config.republish
        )

    def run_pass(self, *, time_budget_seconds: float | None = None) -> PassReport:
        """One bounded pass over the agenda's scans; stops starting pages when out of time.
        Logs its report (the ``report`` field of one line) and records its span and
        metrics."""
        with self._observer.spanning(t.MAINTENANCE_PASS, t.SpanKind.INTERNAL, {}) as span:
            republisher = Republisher(self._publisher, self._observer, span)
            report = self._pass(time_budget_seconds, republisher)
            counts, seconds = pass_counts(report), report.duration_ms / 1000
            self._observer.maintained(span, report.pass_id, counts, seconds)
        log_pass(report, counts)
        keep_pass(self._store.health, report, counts, self._clock.now())
        return report

    def _pass(self, time_budget_seconds: float | None, wakeups: Republisher) -> PassReport:
        budget = _Budget(time.monotonic(), time_budget_seconds)
        out_of_time = budget.over
        now = self._clock.now()
        report = PassReport(started_at=now.isoformat())
        for name in JOBS:
            report.job(name)
        cursors = self._store.progress.load_cursors()

        progress = QueueProgress(self._store.progress, self._backlog, self._config.republish, now)
        progress.sample(self._tasks.queues())

        def handle(kind: AgendaKind, page: Page) -> None:
            wakeups.add(self._handle(page, now, report, progress))

        scan = AgendaScan(self._store, now, cursors, out_of_time, handle)
        for kind in _FIRST_KINDS:
            if kind is AgendaKind.SCHEDULE:
                if out_of_time():
                    break
                self._scheduler.sync()
            partitions = self._store.agenda_partitions(kind)
            try:
                scan.scan(kind, partitions, self.bounds.limit_per_job // len(partitions))
            finally:  # what this pass wrote is published even if a later page fails
                wakeups.send()
        if not out_of_time():
            job = report.job(JOB_RATES)
            wakeups.add([(run, job, None) for run in self._rate_changes.check(now, job)])
            wakeups.send()
        if not out_of_time():
            self._unpark(report.job(JOB_PARKED))
        if not out_of_time() and self._bulk is not None:
            seconds = min(self.bounds.bulk_seconds, budget.left())
            bulk = _BulkTakeOver(self._bulk, self._clock, seconds, report.job(JOB_BULK))
            bulk.scan(AgendaScan(self._store, now, cursors, out_of_time, bulk.handle))
        report.cursors = {p: c for p, c in cursors.items() if c}
        report.out_of_time = out_of_time()
        report.duration_ms = int((time.monotonic() - budget.started) * 1000)
        return report

    def _unpark(self, job: JobReport) -> None:
        """Parked runs of tasks this app registers, each at most once per
        ``republish_after`` (workers without the task may park them again)."""
        unparked = self._parking.unpark_known(
            by="maintenance",
            parked_for=self._config.republish_after,
            limit=self.bounds.limit_per_job,
        )
        job.examined += unparked.examined
        job.acted += unparked.unparked
        job.published += unparked.unparked

    def _handle(
        self, listed: Page, now: datetime, report: PassReport, progress: QueueProgress
    ) -> list[PendingWakeup]:
        """Decide and write each candidate of a page; returns the wakeups they call for
        (published in batches across the scan's pages)."""
        wakeups: list[PendingWakeup] = []
        for item in listed:
            if isinstance(item, Token):
                self._tokens.maintain(item, now, report.job(JOB_TOKENS), MAINTENANCE_RESUME_BATCH)
                continue
            if isinstance(item, ScheduleState):
                job = report.job(JOB_SCHEDULES)
                wakeups.extend(self._schedule(item, now, job, report.pass_id))
                continue
            if isinstance(item, SlotState):
                wakeups.extend(self._slot(item, now, report.slots))
                continue
            if isinstance(item, Group):
                self._group(item, now, report.job(JOB_GROUPS))
                continue
            if isinstance(item, ObjectRecord):
                self._object(item, report.job(JOB_OBJECTS))
                continue
            assert isinstance(item, Run)  # bulk operations have a scan of their own
            wakeup = self._candidate(item, now, report, progress)
            if wakeup is not None:
                wakeups.append(wakeup)
        return wakeups

    def _schedule(
        self, state: ScheduleState, now: datetime, job: JobReport, pass_id: str
    ) -> list[PendingWakeup]:
        """Create the runs of a due schedule's occurrences (schedules of tasks this app
        does not register are left to an app that does)."""
        job.examined += 1
        if self._tasks.get(state.schedule.task or "") is None:
            job.skipped += 1
            return []
        made = self._scheduler.materialize(state, now, pass_id)
        job.acted += len(made.runs)
        job.skipped += made.skipped
        job.conflicts += made.existing + (0 if made.moved_on else 1)
        return [
            (run, job, max(run.due_at - now, timedelta(0)) if run.due_at else None)
            for run in made.runs
            if run.wake_at is not None
        ]

    def _slot(self, state: SlotState, now: datetime, job: SlotsReport) -> list[PendingWakeup]:
        """Drop holders that no longer hold their lease; wake waiters for free slots."""
        job.examined += 1
        if is_order_scope(state.scope):  # an ordering key's record: hand its turn on
            if state.listed_at is None:  # taken off the agenda since the page was read
                job.skipped += 1
                return []
            woken = self._turns.check(state.scope, state.listed_at)
            job.acted += woken is not None
            return [(woken, job, None)] if woken is not None else []
        checked = self._slots.check(state, now)
        job.repaired += checked.repaired
        job.acted += len(checked.woken)
        return [(run, job, None) for run in checked.woken]

    def _group(self, group: Group, now: datetime, job: JobReport) -> None:
        """Start the children and do the join an interrupted finisher left undone."""
        job.examined += 1
        try:
            acted = self._groups.review(group, now)
        except RunlaneError as exc:
            log.warning(
                "maintenance could not move group %s on: %s",
                group.id,
                exc,
                extra={"group_id": group.id, "run_id": group.parent_run_id},
            )
            return
        if acted:
            job.acted += 1
        else:
            job.skipped += 1

    def _object(self, record: ObjectRecord, job: JobReport) -> None:
        """Delete an object of the payload bucket that no record references any more
        (and its record); one still referenced leaves the agenda."""
        job.examined += 1
        try:
            removed = self._values.remove(record)
        except RunlaneError as exc:
            log.warning("maintenance could not remove object %s: %s", record.sha256, exc)
            return
        if removed:
            job.acted += 1
        else:
            job.skipped += 1

    def _waiting(self, run: Run, now: datetime, job: JobReport) -> Run | None:
        """A run waiting on a token or a run: resume it if the target has decided (a resume
        the decider missed), otherwise look again later."""
        job.examined += 1
        assert run.waiting is not None
        resumption = self._resumer.target_resumption(run.waiting)
        if resumption is not None:
            resumed = self._resumer.resume_one(run, resumption)
            if resumed is None:
                job.conflicts += 1
            else:
                job.acted += 1
            return resumed
        decision = poll_later(run, now=now, policy=self.recovery.republish)
        if isinstance(decision, Transition):
            try:
                self._store.apply(decision)
            except ConflictError:
                job.conflicts += 1
                return None
        job.skipped += 1
        return None

    def _candidate(
        self, run: Run, now: datetime, report: PassReport, progress: QueueProgress
    ) -> PendingWakeup | None:
        """Decide and write one candidate; returns the wakeup it calls for, if any."""
        if _polls_target(run):
            job = report.job(JOB_WAITS)
            resumed = self._waiting(run, now, job)
            return (resumed, job, None) if resumed is not None else None
        recovering = run.status in LEASED_STATUSES
        if not recovering:
            line = progress.line(run.queue) if run.wake_at is not None else None
            decision = plan_publish(run, now=now, policy=self.recovery.republish, line=line)
            job = report.job(JOB_DUE)
        else:
            task = self._tasks.get(run.task)
            decision = recover_lease(
                run, now=now, retry=task.retry if task else None, settings=self.recovery
            )
            job = report.job(job_of(decision) if isinstance(decision, Transition) else JOB_EXPIRED)
        job.examined += 1
        if isinstance(decision, Skip):
            job.skipped += 1
            self._relist(run, job)
            return None
        try:
            stored = self._store.apply(decision)
        except ConflictError:
            job.conflicts += 1
            return None
        except RunlaneError as exc:
            log.warning(
                "maintenance write for run %s failed: %s",
                run.id,
                exc,
                extra={"run_id": run.id, "task": run.task, "attempt": run.attempt},
            )
            return None
        job.acted += 1
        if not recovering:
            self._note_stranded(stored, now, report)
        if not recovering and is_held(decision):
            report.due.in_line += 1  # its wakeup waits in line: listed again later
            return None
        if recovering and run.slots:  # the recovered attempt's slots are free
            self._slots.wake(slot.scope for slot in slots_freed(decision))
        return self._follow_up(stored, recovering, job, now)

    def _note_stranded(self, run: Run, now: datetime, report: PassReport) -> None:
        """Count (and warn of) a due run that only a worker of its app version may claim
        and none has for ``stranded_after`` (docs/versions.md, "Pinning")."""
        task = self._tasks.get(run.task)
        version = run.app_version
        if task is None or not task.pin_version or version is None or run.due_at is None:
            return
        if now - run.due_at < self.bounds.stranded_after:
            return
        stranded = report.due.stranded
        stranded[version] = stranded.get(version, 0) + 1
        log.warning(
            "run %s of task %s is pinned to app version %s and no worker of it has claimed "
            "it since %s: run a worker of that version, or cancel and rerun the run",
            run.id,
            run.task,
            version,
            run.due_at.isoformat(),
            extra={"run_id": run.id, "task": run.task, "app_version": version},
        )

    def _relist(self, run: Run, job: JobReport) -> None:
        """List a run looked at early, with nothing to do yet, at its agenda time."""
        decision = relist(run)
        if decision is None:
            return
        try:
            self._store.apply(decision)
        except ConflictError:
            job.conflicts += 1
        except RunlaneError as exc:  # listed early still: the next pass tries again
            log.warning(
                "could not list run %s at its agenda time: %s",
                run.id,
                exc,
                extra={"run_id": run.id, "task": run.task, "attempt": run.attempt},
            )

    def _follow_up(
        self, run: Run, recovering: bool, job: JobReport, now: datetime
    ) -> PendingWakeup | None:
        """Free keys of finished runs; say which wakeup a written decision calls for."""
        extra = {"run_id": run.id, "task": run.task, "attempt": run.attempt}
        if run.is_terminal:
            log.info("run %s is now %s", run.id, run.status.value, extra=extra)
            self._finisher.after_finished(run)
            return None
        if not recovering:
            return run, job, None
        log.info("run %s is %s again after recovery", run.id, run.status.value, extra=extra)
        if not (run.status.is_runnable and run.wake_at is not None):
            return None
        delay = (run.due_at - now) if run.due_at and run.due_at > now else None
        return run, job, delay
