"""Schedules at work: keeping stored schedules in sync with the app's code, and turning
due occurrences into runs.

**Sync.** The app's schedules are defined in code; their state is stored. At the start
of a pass, maintenance compares one fingerprint of every schedule the app defines with
the one it last stored for the app's task set (one ``GetItem``); only when they differ
does it read the stored schedules and write the ones that are new, changed or gone. A
schedule belongs to its task: an app removes only schedules of tasks it registers, so
apps with different tasks can share an environment.

**Occurrences.** An occurrence's run has a deterministic id (schedule, time), so its
creation, conditioned on no run having that id, is the one write that claims it: two
passes at once create it once. Then the schedule's state moves on, conditioned on the
version read; a pass that crashes in between leaves the state behind, and the next pass
meets the existing run and moves the state on.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from runlane_sqs.core import machine
from runlane_sqs.core import telemetry as t
from runlane_sqs.core.clock import Clock
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import ConflictError, ValueUnreadable
from runlane_sqs.core.model import Run, ScheduleOrigin, new_run_id
from runlane_sqs.core.schedule_state import (
    DuePlan,
    ScheduleState,
    ScheduleStatus,
    new_state,
    plan_due,
    redefined,
    removed,
)
from runlane_sqs.core.schedules import Schedule, occurrence_run_id
from runlane_sqs.core.values import Holder, ValueField, ValuePlace
from runlane_sqs.engine.observing import Observer
from runlane_sqs.engine.tasks import TaskRegistry, concurrency_key_of, retention_for
from runlane_sqs.engine.values import Values
from runlane_sqs.ports.schedules import ScheduleConflict, ScheduleStore
from runlane_sqs.ports.store import RunStore

log = logging.getLogger("runlane_sqs.schedules")
SYNC_PAGE = 100
"""Stored schedules read per ``Query`` when syncing."""


@dataclass
class SyncReport:
    """What one sync wrote."""

    created: int = 0
    changed: int = 0
    removed: int = 0
    conflicts: int = 0

    @property
    def wrote(self) -> int:
        return self.created + self.changed + self.removed


@dataclass
class Materialized:
    """What one due schedule gave: runs to publish and what happened to its state."""

    runs: list[Run]
    """Runs this pass created (their wakeups are still to publish)."""
    existing: int = 0
    """Occurrences whose run another pass created first."""
    skipped: int = 0
    """Missed occurrences the catch-up policy left out."""
    moved_on: bool = False
    """The schedule's state moved on (False: another pass moved it first)."""


def task_set_key(tasks: TaskRegistry) -> str:
    """Names the set of tasks an app registers (its sync mark is kept under it)."""
    text = "\n".join(tasks.names())
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def definitions_fingerprint(schedules: list[Schedule], codecs: Iterable[str] = ()) -> str:
    """One digest of what the app defines and the codecs it stores payloads with."""
    text = "\n".join(sorted(f"{s.id}={s.fingerprint}" for s in schedules))
    text += "\ncodecs=" + ",".join(codecs)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


class Scheduler:
    """Syncs the app's schedules and materializes due occurrences."""

    def __init__(
        self,
        *,
        store: RunStore,
        tasks: TaskRegistry,
        clock: Clock,
        config: RunlaneConfig,
        observer: Observer,
        values: Values,
    ) -> None:
        self._runs = store
        self._values = values
        self._observer = observer
        self._store: ScheduleStore = store.schedules
        self._tasks = tasks
        self._clock = clock
        self._config = config

    @property
    def period(self) -> timedelta:
        return self._config.maintenance_period

    # sync ---------------------------------------------------------------------------

    def sync(self) -> SyncReport:
        """Store what the app's code defines, unless it is already stored."""
        report = SyncReport()
        defined = {s.id: s for s in self._tasks.schedules()}
        mark_key = task_set_key(self._tasks)
        codecs = [codec.name for codec in self._values.codecs]
        fingerprint = definitions_fingerprint(list(defined.values()), codecs)
        if self._store.load_sync_mark(mark_key) == fingerprint:
            return report
        now = self._clock.now()
        registered = set(self._tasks.names())
        for stored in self.stored():
            schedule = defined.pop(stored.id, None)
            if schedule is None:
                if stored.schedule.task in registered and stored.status is not (
                    ScheduleStatus.REMOVED
                ):
                    self._write(stored, removed(stored, now), report, "removed")
            elif stored.status is ScheduleStatus.REMOVED or self._changed(stored, schedule):
                changed = redefined(stored, schedule, now, self.period)
                self._write(stored, changed, report, "changed")
        for schedule in defined.values():
            self._write(None, new_state(schedule, now, self.period), report, "created")
        if not report.conflicts:
            self._store.save_sync_mark(mark_key, fingerprint)
        if report.wrote:
            log.info(
                "schedules synced: %d new, %d changed, %d removed",
                report.created,
                report.changed,
                report.removed,
            )
        return report

    def stored(self) -> Iterator[ScheduleState]:
        """Every stored schedule of the environment, by id (one ``Query`` per 100)."""
        cursor: str | None = None
        while True:
            page, cursor = self._store.list_schedules(SYNC_PAGE, cursor)
            yield from page
            if cursor is None:
                return

    def _changed(self, stored: ScheduleState, schedule: Schedule) -> bool:
        """Whether the stored definition differs from ``schedule``, the app's, or keeps
        its payload another way than the app's codecs would now (one that cannot be
        opened any more counts as changed: it is stored again)."""
        if not self._values.sealed_alike(stored.schedule.payload):
            return True
        try:
            opened = self._values.open_schedule(stored.schedule)
        except ValueUnreadable:
            return True
        return opened.fingerprint != schedule.fingerprint

    def put(self, state: ScheduleState, expected_version: int | None) -> None:
        """Store ``state``, its payload sealed by the app's codecs, conditioned on
        ``expected_version`` (``None``: on no schedule with its id); raises
        :class:`~runlane_sqs.ports.schedules.ScheduleConflict`."""
        sealed = self._values.seal_schedule(state.schedule)
        if sealed is not state.schedule:
            state = replace(state, schedule=sealed)
        self._store.put_schedule(state, expected_version=expected_version)

    def _write(
        self, before: ScheduleState | None, after: ScheduleState, report: SyncReport, what: str
    ) -> None:
        try:
            self.put(after, before.version if before else None)
        except ScheduleConflict:
            report.conflicts += 1
            return
        setattr(report, what, getattr(report, what) + 1)
        log.info("schedule %s %s", after.id, what, extra={"schedule": after.id})

    # occurrences --------------------------------------------------------------------

    def materialize(self, state: ScheduleState, now: datetime, pass_id: str) -> Materialized:
        """Create the runs of the due occurrences of ``state`` (by its catch-up policy)
        and move its state on; ``pass_id`` names the maintenance pass in each run's first
        event."""
        plan = plan_due(state, now, self.period)
        result = Materialized(runs=[], skipped=plan.skipped)
        for occurrence in plan.occurrences:
            run = self._occurrence_run(state.schedule, occurrence, now, pass_id)
            if run is None:
                result.existing += 1
            else:
                result.runs.append(run)
        result.moved_on = self._move_on(state, plan)
        if plan.skipped:
            log.info(
                "schedule %s skipped %s missed occurrence(s) (catch-up %s)",
                state.id,
                plan.skipped,
                state.schedule.catch_up.value,
                extra={"schedule": state.id},
            )
        return result

    def _move_on(self, state: ScheduleState, plan: DuePlan) -> bool:
        if plan.after == state:
            return False
        try:
            self.put(plan.after, state.version)
        except ScheduleConflict:
            return False
        return True

    def _occurrence_run(
        self, schedule: Schedule, occurrence: datetime, now: datetime, pass_id: str
    ) -> Run | None:
        """The new run of one occurrence, or ``None`` if it exists already."""
        run_id = occurrence_run_id(self._config.environment, schedule.id, occurrence)
        try:
            return self._create(schedule, run_id, occurrence, now, pass_id)
        except ConflictError:
            return None

    def trigger_now(self, state: ScheduleState) -> Run:
        """An extra run of the schedule now, linked to it; its cadence does not move."""
        return self._create(state.schedule, new_run_id(), None, self._clock.now(), None)

    def _create(
        self,
        schedule: Schedule,
        run_id: str,
        occurrence: datetime | None,
        now: datetime,
        pass_id: str | None,
    ) -> Run:
        assert schedule.task is not None and schedule.queue is not None
        conflict: ConflictError | None = None
        with self._observer.trigger(schedule.task, schedule.queue) as span:
            span.set({t.SCHEDULE: schedule.id, t.RUN_ID: run_id})
            try:
                run = self._new_run(schedule, run_id, occurrence, now, pass_id, span.trace)
            except ConflictError as exc:  # another pass created it: not this span's failure
                span.set({t.OUTCOME: "exists"})
                conflict = exc
        if conflict is not None:
            raise conflict
        self._observer.triggered([run])
        return run

    def _new_run(
        self,
        schedule: Schedule,
        run_id: str,
        occurrence: datetime | None,
        now: datetime,
        pass_id: str | None,
        trace: str | None,
    ) -> Run:
        schedule = self._values.open_schedule(schedule)
        assert schedule.task is not None and schedule.queue is not None
        due = occurrence + schedule.jitter_of(occurrence) if occurrence else None
        run, event = machine.new_run(
            run_id=run_id,
            environment=self._config.environment,
            task=schedule.task,
            queue=schedule.queue,
            payload=schedule.payload,
            now=now,
            due_at=due if due and due > now else None,
            republish=self._config.republish,
            schedule=ScheduleOrigin(schedule.id, occurrence, pass_id),
        )
        task = self._tasks.get(schedule.task)
        # a registered task's payload gives its key (registration checked that it does),
        # as its key function sees it: validated into the task's payload type
        key = (
            concurrency_key_of(task, task.types.trigger_payload(run.payload)[0], None)
            if task is not None and task.concurrency_key is not None
            else None
        )
        retention = retention_for(task, self._config)
        run = run.with_changes(
            concurrency_key=key, trace=trace, retention=retention, tags=dict(schedule.tags)
        )
        place = ValuePlace(Holder.RUN, run.id, ValueField.PAYLOAD)
        payload_text = self._values.seal(schedule.payload, what="payload", place=place).text
        self._runs.create_run(run, event, payload_text)
        log.info(
            "schedule %s created run %s of %s",
            schedule.id,
            run.id,
            run.task,
            extra={"run_id": run.id, "task": run.task, "schedule": schedule.id},
        )
        return run
