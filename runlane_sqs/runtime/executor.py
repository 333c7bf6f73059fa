"""How attempts run with sync I/O, in the sync worker and the Lambda consumer: the driver
of the per-message path (:mod:`runlane_sqs.engine.driver`), which performs each call
with the engine's sync ports and calls the handler on the current thread; what an
attempt's context may do with storage (:class:`AttemptRuntime`); the book of a worker's
attempts in flight (:class:`LeaseBook`, shared with the async runtime: what each lease
renewal means, with no I/O) and the heartbeat thread that renews their leases.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from time import monotonic
from typing import Any, TypeVar

from runlane_sqs.core import machine, waits
from runlane_sqs.core.clock import Clock
from runlane_sqs.core.errors import (
    ConflictError,
    LeaseLost,
    RunlaneError,
    StorageError,
    StorageUnavailable,
)
from runlane_sqs.core.groups import Group, group_id_for, group_root
from runlane_sqs.core.model import JSON, Lease, Run, RunStatus
from runlane_sqs.core.progress import (
    DEFAULT_PROGRESS_INTERVAL_SECONDS,
    AttemptReport,
    ReportBuffer,
)
from runlane_sqs.core.tokens import Token
from runlane_sqs.core.values import Holder, ValueField, ValuePlace
from runlane_sqs.engine import driver
from runlane_sqs.engine.context import Child, GroupOptions, TaskContext
from runlane_sqs.engine.driver import Disposition
from runlane_sqs.engine.engine import Engine
from runlane_sqs.engine.groups import Groups
from runlane_sqs.engine.message import MessagePath
from runlane_sqs.engine.tasks import Task, TaskRegistry
from runlane_sqs.engine.value_types import PLAIN_TYPES, TaskTypes
from runlane_sqs.engine.values import Values
from runlane_sqs.ports.store import RunStore
from runlane_sqs.ports.transport import ReceivedWakeup
from runlane_sqs.runtime.budget import call_again, default_budget, write_budget

log = logging.getLogger("runlane_sqs.worker")
A = TypeVar("A")
R = TypeVar("R")


def retried(
    request: Callable[[A], R], argument: A, budget: Callable[[], timedelta] = default_budget
) -> R:
    """``request(argument)``, called again on :class:`StorageUnavailable` while the
    request's retry budget lasts (:mod:`runlane_sqs.runtime.budget`, entered only after a
    failure: ``budget`` is asked then)."""
    started = monotonic()
    try:
        return request(argument)
    except StorageUnavailable as failure:
        return call_again(request, argument, failure, started, budget())


@dataclass
class TrackedAttempt:
    """One in-flight attempt: the latest known run, its context, whether its lease is
    lost, and what it reported that is not written yet (once it reported anything)."""

    run: Run
    ctx: TaskContext
    lost: bool = False
    reports: ReportBuffer | None = None

    @property
    def token(self) -> str | None:
        return self.run.lease.token if self.run.lease is not None else None


class LeaseBook:
    """The in-flight attempts of one worker and what a renewal means for each (no I/O).

    A refused renewal of an attempt still in flight marks it lost and sets its
    cancellation; a renewal that shows ``cancel_requested``, or an attempt past its
    deadline, sets it too. What a renewal returns for an attempt that finished after
    :meth:`renewals` listed it is ignored: its own outcome write ended the lease, so a
    refusal then is expected, not a lost lease. A newer attempt of a run whose older
    attempt is still in flight here (its lease expired, or maintenance timed it out, and
    this worker claimed the run again) displaces it: the older one's lease is gone, so it
    is lost and told to stop at once, and its end leaves the newer one tracked. The sync
    :class:`LeaseKeeper` and the async worker's keeper differ only in how they send the
    renewals this book decides.

    It also coalesces what the attempts report (``ctx.progress``, ``ctx.set_state``):
    :meth:`report` only takes a report in; the keeper writes those due
    (:meth:`reports_due`, at most one per attempt per ``report_interval``), and the last
    one rides on the attempt's outcome (:meth:`untrack` hands it over). ``nudge``, set by
    the keeper, is called when an attempt with nothing pending reports, so a keeper
    asleep until its next heartbeat wakes for it; a worker whose attempts never report
    never calls it."""

    def __init__(
        self,
        clock: Clock,
        duration: timedelta,
        report_interval: timedelta = timedelta(seconds=DEFAULT_PROGRESS_INTERVAL_SECONDS),
    ) -> None:
        self._clock = clock
        self._duration = duration
        self._report_interval = report_interval
        self.nudge: Callable[[], None] | None = None
        self._attempts: dict[str, TrackedAttempt] = {}
        self._displaced: dict[str, TrackedAttempt] = {}
        """Older attempts still in flight whose run a newer attempt holds, by lease token."""
        self._lock = threading.Lock()
        self.occupancy: Callable[[bool], None] | None = None
        """Told ``True`` when an attempt starts with none in flight and ``False`` when the
        last one ends (the runtime's ECS task protection, when it runs on ECS)."""

    @property
    def interval_seconds(self) -> float:
        return self._duration.total_seconds() / 3

    def track(self, run: Run, ctx: TaskContext) -> None:
        with self._lock:
            first = not self._attempts
            older = self._attempts.get(run.id)
            self._attempts[run.id] = TrackedAttempt(run, ctx)
            if older is not None and older.token is not None:
                older.lost = True
                self._displaced[older.token] = older
        if older is not None:
            older.ctx.cancellation.set()
            older.ctx.log.warning(
                "attempt %d of this run started here; this one's lease is gone", run.attempt
            )
        if first and self.occupancy is not None:
            self.occupancy(True)

    def untrack(
        self, run_id: str, token: str | None = None
    ) -> tuple[Run, bool, AttemptReport | None] | None:
        """Stop renewing the attempt that holds ``token`` (default: the run's latest);
        returns the latest known run, whether the lease was lost, and what the attempt
        reported that may not be written yet (for its outcome's write to carry)."""
        with self._lock:
            displaced = self._displaced.pop(token, None) if token is not None else None
            if displaced is not None:
                return displaced.run, True, None
            attempt = self._attempts.get(run_id)
            if attempt is not None and token is not None and attempt.token != token:
                return None
            self._attempts.pop(run_id, None)
            last = attempt is not None and not self._attempts
        if last and self.occupancy is not None:
            self.occupancy(False)
        if attempt is None:
            return None
        return attempt.run, attempt.lost, attempt.reports.final() if attempt.reports else None

    def report(self, run_id: str, token: str, report: AttemptReport) -> None:
        """Take in what the attempt holding ``token`` reported; nothing is written here.
        A report of an attempt whose lease is lost is dropped (its write would be
        refused)."""
        with self._lock:
            attempt = self._attempts.get(run_id)
            if attempt is None or attempt.token != token or attempt.lost:
                attempt = None
            else:
                if attempt.reports is None:
                    attempt.reports = ReportBuffer(self._report_interval)
                fresh = attempt.reports.add(report)
        if attempt is None:
            log.debug("report of run %s after its lease was lost or ended: dropped", run_id)
        elif fresh and self.nudge is not None:
            self.nudge()

    def next_report_at(self) -> datetime | None:
        """When the earliest pending report is due (``None``: none is pending)."""
        with self._lock:
            due = [a.reports.due_at() for a in self._attempts.values() if a.reports and not a.lost]
        return min((d for d in due if d is not None), default=None)

    def reports_due(self) -> list[tuple[TrackedAttempt, AttemptReport]]:
        """The reports to write now, one per attempt at most: each is marked as being
        sent until :meth:`reported` takes its answer."""
        now = self._clock.now()
        due: list[tuple[TrackedAttempt, AttemptReport]] = []
        with self._lock:
            for attempt in self._attempts.values():
                report = attempt.reports.take(now) if attempt.reports and not attempt.lost else None
                if report is not None:
                    due.append((attempt, report))
        return due

    def reported(
        self, attempt: TrackedAttempt, report: AttemptReport, answer: Run | RunlaneError
    ) -> None:
        """Take in the answer to a report's write: the stored run, or its error. A refusal
        (another attempt holds the run, or it ended) is logged, never raised: a report
        never fails its handler. A write that could not be sent is pending again."""
        with self._lock:
            assert attempt.reports is not None
            attempt.reports.sent(report, written=not isinstance(answer, StorageError))
        if isinstance(answer, LeaseLost) and self.tracks(attempt):
            attempt.ctx.log.warning("progress report refused: this attempt's lease is gone")
        if isinstance(answer, StorageError):
            attempt.ctx.log.warning("progress report not written, will retry: %s", answer)
            return
        self.settle(attempt, answer)

    def current(self, run_id: str, token: str | None = None) -> Run | None:
        """The latest known state of a tracked attempt's run (of the attempt that holds
        ``token``, if given)."""
        with self._lock:
            attempt = self._attempts.get(run_id)
            if attempt is None or (token is not None and attempt.token != token):
                attempt = self._displaced.get(token) if token is not None else None
            return attempt.run if attempt else None

    def update(self, run: Run) -> None:
        """Remember a state the attempt itself wrote (a recorded step)."""
        with self._lock:
            attempt = self._attempts.get(run.id)
            if attempt is not None and attempt.token == (run.lease.token if run.lease else None):
                attempt.run = run

    def tracks(self, attempt: TrackedAttempt) -> bool:
        """Whether ``attempt`` is still in flight: not untracked since :meth:`renewals`
        listed it."""
        with self._lock:
            return self._attempts.get(attempt.run.id) is attempt

    def run_ids(self) -> list[str]:
        """The runs of the attempts in flight."""
        with self._lock:
            return list(self._attempts)

    def contexts(self) -> list[TaskContext]:
        with self._lock:
            return [a.ctx for a in self._attempts.values()]

    def cancel_all(self) -> None:
        """Set the cancellation of every in-flight attempt."""
        for ctx in self.contexts():
            ctx.cancellation.set()

    def renewals(self) -> list[tuple[TrackedAttempt, Lease]]:
        """The renewed lease each live attempt should write now: a snapshot, which
        :meth:`settle` checks against the attempts still in flight."""
        with self._lock:
            attempts = [a for a in self._attempts.values() if not a.lost]
        due: list[tuple[TrackedAttempt, Lease]] = []
        for attempt in attempts:
            run = attempt.run
            assert run.lease is not None
            try:
                lease = machine.renew_lease(
                    run, token=run.lease.token, now=self._clock.now(), duration=self._duration
                )
            except LeaseLost:
                self.settle(attempt, LeaseLost(run.id))
                continue
            due.append((attempt, lease))
        return due

    def settle(self, attempt: TrackedAttempt, renewal: Run | RunlaneError) -> None:
        """Take in what a renewal request returned: the stored run, or its error.

        Ignored for an attempt no longer tracked: it finished between the snapshot of
        :meth:`renewals` and this answer, and its outcome write (fenced on its own lease
        token) ended the lease. Only a refusal of an attempt still tracked is a lost
        lease, and it is marked under the lock, so :meth:`untrack` sees it."""
        with self._lock:
            in_flight = self._attempts.get(attempt.run.id) is attempt
            if in_flight and isinstance(renewal, LeaseLost):
                attempt.lost = True
        if not in_flight:
            attempt.ctx.log.debug("renewal answered after the attempt ended; ignored")
        elif isinstance(renewal, LeaseLost):
            self.lost(attempt)
        elif isinstance(renewal, RunlaneError):
            self.failed(attempt, renewal)
        else:
            self.renewed(attempt, renewal)

    @staticmethod
    def lost(attempt: TrackedAttempt) -> None:
        attempt.lost = True
        attempt.ctx.cancellation.set()
        attempt.ctx.log.warning("lease lost; the attempt's writes will be refused")

    @staticmethod
    def failed(attempt: TrackedAttempt, exc: RunlaneError) -> None:
        attempt.ctx.log.warning("lease renewal failed, will retry: %s", exc)

    def renewed(self, attempt: TrackedAttempt, current: Run) -> None:
        attempt.run = current
        if attempt.ctx.cancelled:
            return
        if current.status is RunStatus.CANCEL_REQUESTED:
            attempt.ctx.log.info("cancellation requested")
            attempt.ctx.cancellation.set()
        elif current.deadline_at is not None and current.deadline_at <= self._clock.now():
            attempt.ctx.log.warning("attempt passed its deadline; asking the handler to stop")
            attempt.ctx.cancellation.set()


class AttemptRuntime:
    """The :class:`~runlane_sqs.engine.context.AttemptServices` a worker gives each context."""

    def __init__(
        self,
        store: RunStore,
        groups: Groups,
        tasks: TaskRegistry,
        clock: Clock,
        values: Values,
        leases: LeaseBook,
        run: Run,
        token: str,
    ) -> None:
        self._store = store
        self._groups = groups
        self._tasks = tasks
        self._joined: dict[str, Group] = {}
        self._clock = clock
        self._leases = leases
        self._run = run
        self._token = token
        self.values = values

    def now(self) -> datetime:
        return self._clock.now()

    def run(self) -> Run:
        return self._leases.current(self._run.id, self._token) or self._run

    def record_step(self, name: str, value: JSON) -> None:
        """Write the step under this attempt's lease; a concurrent change that keeps the
        lease (a cancel request) is decided again, a lost lease raises :class:`LeaseLost`. A
        refusal that finds the step recorded under this lease is this write's own: it
        landed, its answer was lost, and the run moved on before it was sent again."""
        current = self.run()
        for _ in range(machine.MAX_REDECISIONS):
            transition = waits.record_step(
                current, token=self._token, name=name, value=value, now=self.now()
            )
            try:  # within the lease's budget, as the path's own fenced writes
                stored = retried(
                    self._store.apply, transition, partial(write_budget, transition, self.now())
                )
            except ConflictError as conflict:
                if conflict.current is None:
                    break
                current = conflict.current
                if not waits.step_recorded_under(current, token=self._token, name=name):
                    continue
                stored = current  # this write landed, its answer was lost, the run moved on
            self._run = stored
            self._leases.update(stored)
            return
        raise LeaseLost(self._run.id)

    def report(self, report: AttemptReport) -> None:
        self._leases.report(self._run.id, self._token, report)

    def open_value(self, value: JSON, place: ValuePlace) -> JSON:
        """Opened again within its budget if the bucket's read fails a moment."""
        return retried(partial(self.values.open, place=place), value)

    def get_token(self, token_id: str) -> Token | None:
        token = retried(self._store.tokens.get_token, token_id)
        return self.values.open_token(token) if token is not None else None

    def get_run(self, run_id: str) -> Run | None:
        run = retried(self._store.get_run, run_id)
        return self.values.open_run(run, payload=False) if run is not None else None

    def watch_run(self, run_id: str) -> Run | None:
        run = retried(self._store.watch_run, run_id)  # marks it watched: the same twice
        return self.values.open_run(run, payload=False) if run is not None else None

    def open_group(self, wait_name: str, children: Iterable[Child], options: GroupOptions) -> Group:
        """Open the run's group at ``wait_name``, fenced on this attempt's lease, and
        start its first children. The group an earlier attempt opened is taken as it is:
        ``children`` is not read again (a generator paging an API is read once)."""
        group_id = group_id_for(group_root(self._run), wait_name)
        stored = self.get_group(group_id)
        if stored is not None:
            return retried(self._groups.opened, stored)
        items = self._groups.items(children, group_id)
        group, chunks = self._groups.new_group(
            items, group_id=group_id, parent=self._run, options=options
        )
        fence = (self._run.id, self._token)
        stored, written = retried(lambda _: self._groups.store(group, chunks, fence), None)
        if stored.parent_run_id == self._run.id:  # the opening marked the stored run too
            self._run = self.run().with_changes(opened_groups=True)
            self._leases.update(self._run)
        # Storing and starting are retried apart, so a failure while the children start
        # does not store the group again; a second try takes the children as they are.
        fresh = iter((written,))
        return retried(lambda g: self._groups.first_children(g, next(fresh, False)), stored)

    def get_group(self, group_id: str) -> Group | None:
        return retried(self._store.groups.get_group, group_id)

    def group_children(self, group_id: str, start: int, limit: int) -> list[Run | None]:
        """A page of a joined group's children; the group record (which names them) is
        read once per attempt, not once per page."""
        group = self._joined.get(group_id)
        if group is None:
            group = self.get_group(group_id)
            if group is None:
                return []
            self._joined[group_id] = group
        joined = group
        children = retried(lambda _: self._store.groups.children(joined, start, limit), None)
        return [
            self.values.open_run(child, payload=False) if child is not None else None
            for child in children
        ]

    def task_types(self, task: str) -> TaskTypes:
        return self._tasks.resolve(task).types


def begin_attempt(
    call: driver.Begin, engine: Engine, leases: LeaseBook, worker_id: str
) -> TaskContext:
    """The context of a claimed run's attempt, its lease tracked by ``leases`` (shared by
    both drivers: steps and waits in a context use the engine's sync store)."""
    services = AttemptRuntime(
        engine.store,
        engine.groups,
        engine.tasks,
        engine.clock,
        engine.values,
        leases,
        call.run,
        call.token,
    )
    ctx = TaskContext.for_attempt(call.run, worker_id, services)
    leases.track(call.run, ctx)
    return ctx


def run_handler(task: Task, ctx: TaskContext, payload: JSON) -> object:
    """Call ``task``'s handler here with the stored ``payload`` converted to its payload
    type (:class:`PayloadMismatch` when it no longer validates), and return its result
    as stored (:class:`InvalidResult` when its result type refuses it): an ``async def``
    one to completion on a fresh event loop. The hooks' call wraps all of it, so their
    ``on_failure`` sees a conversion's failure as it sees the handler's."""
    types = task.types
    if types.payload is not None:
        payload = types.handler_payload(payload)
    if task.is_async:
        import asyncio  # noqa: PLC0415 (only for async handlers: a sync app never loads it)

        result = asyncio.run(task.fn(ctx, payload))
    else:
        result = task.fn(ctx, payload)
    return result if types.result is None else types.stored_result(result)


class Executor:
    """Drives ``path`` (one worker identity's) with sync I/O."""

    def __init__(
        self,
        engine: Engine,
        leases: LeaseBook,
        path: MessagePath,
        hold: Callable[[ReceivedWakeup, datetime], bool] | None = None,
    ) -> None:
        self.engine = engine
        self.leases = leases
        self.path = path
        self.hooks = engine.hooks
        self._hold = hold
        """Where a message waits for its run's reserved start (the worker's intake), if
        anywhere; False once that intake is closed."""
        self._perform = driver.performer_table(self)

    def handle(self, received: ReceivedWakeup) -> Disposition:
        return driver.drive(self.path.handle(received), self.perform)

    def perform(self, call: driver.DriverCall | driver.EngineCall) -> Any:
        method: Callable[[Any], Any] = self._perform.get(type(call), self.serve)
        return method(call)

    def read(self, call: driver.ReadRun) -> Run | None:
        return retried(self.engine.store.get_run, call.run_id)

    def claim_hinted(self, call: driver.ClaimHinted) -> Run:
        return retried(self.engine.store.claim_hinted, call.claim)

    def write(self, call: driver.Write) -> Run:
        transition, clock = call.transition, self.engine.clock
        return retried(
            self.engine.store.apply, transition, lambda: write_budget(transition, clock.now())
        )

    def begin(self, call: driver.Begin) -> TaskContext:
        return begin_attempt(call, self.engine, self.leases, self.path.worker_id)

    def call_handler(self, call: driver.CallHandler) -> object:
        """The handler, called with the run's payload (opened, and converted to its task's
        payload type), the app's hooks around it and the conversions (if it has any); its
        result (converted from its result type), sealed. An ``async def`` handler runs to
        completion on a fresh event loop."""
        values = self.engine.values
        with call.span.active():
            run_id = call.ctx.run_id
            payload = call.payload
            if values.sealed(payload):  # kept in the bucket, or encoded: read again if need be
                place = ValuePlace(Holder.RUN, run_id, ValueField.PAYLOAD)
                payload = retried(partial(values.open, place=place), payload)
            task = call.task
            if self.hooks.active:
                result = self.hooks.call(call.ctx, partial(run_handler, task, call.ctx, payload))
            elif task.types is not PLAIN_TYPES or task.is_async:
                result = run_handler(task, call.ctx, payload)
            else:
                result = task.fn(call.ctx, payload)
            place = ValuePlace(Holder.RUN, run_id, ValueField.RESULT)
            sealing = partial(values.seal, what="handler result", place=place)
            return retried(sealing, result).value  # kept again if the bucket's write failed

    def end(self, call: driver.End) -> tuple[Run, bool, AttemptReport | None] | None:
        return self.leases.untrack(call.run_id, call.token)

    def pause(self, call: driver.Pause) -> None:
        self.engine.pause(call.delay.total_seconds())

    def hold(self, call: driver.Hold) -> bool:
        """Keep the message for its run's reserved start; a stopping worker keeps none
        and makes it visible again at once, for a worker that stays."""
        if self._hold is None:
            return False
        if not self._hold(call.message, call.until):
            self.engine.transport.release([call.message])
        return True

    def publish(self, call: driver.Publish) -> None:
        self.engine.publisher.publish_many([call.run], delay=call.delay)

    def serve(self, call: driver.EngineCall) -> Any:
        return self.engine.serve(call)


class LeaseKeeper(LeaseBook):
    """Renews every tracked lease on :meth:`beat`, and writes the reports due on
    :meth:`flush`; a background thread beats every third of the lease duration, and
    wakes earlier for a report due before then."""

    def __init__(
        self,
        store: RunStore,
        clock: Clock,
        duration: timedelta,
        report_interval: timedelta = timedelta(seconds=DEFAULT_PROGRESS_INTERVAL_SECONDS),
    ) -> None:
        super().__init__(clock, duration, report_interval)
        self._store = store
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.nudge = self._wake.set
        self._thread: threading.Thread | None = None

    def flush(self) -> None:
        """Write every report due now, one after the other."""
        for attempt, report in self.reports_due():
            answer: Run | RunlaneError
            try:
                answer = self._store.report_progress(attempt.run, attempt.token or "", report)
            except RunlaneError as exc:
                answer = exc
            except Exception:  # the keeper's thread must not end with an unlogged error
                log.exception("progress report failed")
                answer = StorageError("progress report failed")
            self.reported(attempt, report, answer)

    def beat(self) -> None:
        """Renew every tracked lease once. Several renewals go out at once, each on a
        thread of its own, so one held up by the AWS SDK's retries while DynamoDB fails
        does not delay the others' (the async keeper sends them concurrently too)."""
        due = self.renewals()
        if len(due) == 1:
            self._renew(*due[0])
            return
        threads = [
            threading.Thread(
                target=self._renew, args=pair, name="runlane-heartbeat-renewal", daemon=True
            )
            for pair in due
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _renew(self, attempt: TrackedAttempt, lease: Lease) -> None:
        if not self.tracks(attempt):
            return  # it finished since the snapshot; its outcome write ended the lease
        renewal: Run | RunlaneError
        try:
            renewal = self._store.renew_lease(attempt.run, lease)
        except RunlaneError as exc:
            renewal = exc
        except Exception:  # a renewal thread must not end with an unlogged error
            log.exception("heartbeat failed")
            return
        self.settle(attempt, renewal)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="runlane-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _loop(self) -> None:
        beat_at = monotonic() + self.interval_seconds
        while not self._stop.is_set():
            self._wake.wait(self._sleep(beat_at))
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                if monotonic() >= beat_at:
                    beat_at = monotonic() + self.interval_seconds
                    self.beat()
                self.flush()
            except Exception:  # the heartbeat thread must outlive any one failure
                log.exception("heartbeat failed")

    def _sleep(self, beat_at: float) -> float:
        """Seconds until the next beat, or until the next report is due if sooner."""
        sleep = beat_at - monotonic()
        report_at = self.next_report_at()
        if report_at is not None:
            sleep = min(sleep, (report_at - self._clock.now()).total_seconds())
        return max(sleep, 0.0)
