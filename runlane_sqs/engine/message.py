"""One wakeup in, at most one attempt out: the per-message path, written once.

A wakeup with a hint is claimed at once (one conditional write on the hint; when the
hint no longer holds, the refusal returns the run and the claim is decided on it); a
wakeup without one re-reads the run first. Then: run the handler -> record the outcome
under the lease token -> follow up (next wakeup, finished-run bookkeeping). A wakeup of
another environment is returned to its queue for that environment's workers; anything
else that is not a runnable, due run is acknowledged and ignored.

Timeline of a plain run (what the driver is asked for)::

    ClaimHinted -> Begin -> CallHandler -> End -> Write(outcome) [-> follow-up]

and of a wakeup without a hint, or whose hint no longer holds::

    ReadRun | ClaimHinted (refused) -> Write(claim) -> Begin -> ...

and of a rate-limited run, whose handler is entered at its reserved start::

    ReadRun -> Reservation -> Write(claim) -> Pause (until the start) -> Begin -> ...

The path performs no I/O itself: it yields the calls of
:mod:`runlane_sqs.engine.driver`, whose drivers perform them. What it decides at each
step (the claim, what a handler's result or exception means, the follow-up) is decided
by the pure functions at the end of this module, from what happened and the time given
to them: they send no request, read no clock and log nothing. A run that a plain run
is not (rate-limited, slotted, debounced, pinned, or claimed too late to start) takes a
turn through the module of its concept: :mod:`.rates`, :mod:`.slots`, :mod:`.debouncing`,
:mod:`.pinning`, :mod:`.withdrawal`.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable, Generator
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from runlane_sqs.core import machine, parking, waits
from runlane_sqs.core.clock import Clock
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.debounce import collapsed_since
from runlane_sqs.core.errors import (
    CodecError,
    ConflictError,
    InvalidPayloadError,
    LeaseLost,
    NoFreeSlot,
    PayloadMismatch,
    RunlaneError,
    StepError,
    StorageError,
    StorageUnavailable,
    ValueUnreadable,
)
from runlane_sqs.core.groups import GroupFailed
from runlane_sqs.core.limits import MAX_TRACEBACK_CHARS
from runlane_sqs.core.machine import HintedClaim, Skip, SkipReason, Transition, claimed_too_late
from runlane_sqs.core.model import (
    JSON,
    Failure,
    Run,
    RunStatus,
    Slot,
    Wait,
    finishing_needs_storage,
    new_lease_token,
)
from runlane_sqs.core.parking import park_unknown_task
from runlane_sqs.core.progress import AttemptReport, with_report
from runlane_sqs.core.rates import ClaimLead, from_epoch_us, past_grace, to_epoch_us
from runlane_sqs.core.redaction import Redact, apply_redaction, shortened
from runlane_sqs.core.replay import HistoryDiverged
from runlane_sqs.core.retry import RetryDecision, qualified_name
from runlane_sqs.core.versions import pinned_elsewhere
from runlane_sqs.core.wakeup import MalformedWakeup, Wakeup, parse_wakeup
from runlane_sqs.engine.context import TaskContext, WaitRequested
from runlane_sqs.engine.debouncing import wait_for_quiet
from runlane_sqs.engine.driver import (
    Begin,
    CallHandler,
    ClaimHinted,
    Disposition,
    DriverCall,
    End,
    EngineCall,
    Handling,
    Hold,
    Publish,
    ReadRun,
    Write,
    log_skip,
)
from runlane_sqs.engine.engine import Engine
from runlane_sqs.engine.finishing import Finish
from runlane_sqs.engine.observing import Observer
from runlane_sqs.engine.pinning import leave_to_version
from runlane_sqs.engine.rates import (
    MAX_RESERVES,
    enter_at_start,
    pause_until_due,
    reserved_start,
    sleep_until_start,
    sleeps_first,
)
from runlane_sqs.engine.resuming import Recheck
from runlane_sqs.engine.slots import wait_for_free_slot, wake_waiters
from runlane_sqs.engine.tasks import Task, TaskRegistry
from runlane_sqs.engine.withdrawal import Withdrawal, withdraw
from runlane_sqs.ports.telemetry import Span
from runlane_sqs.ports.transport import ReceivedWakeup

log = logging.getLogger("runlane_sqs.worker")
PathPart = Generator[DriverCall | EngineCall, Any, Run | None]
"""Part of a message's handling that ends with the stored run (or ``None``)."""


def always() -> bool:
    """The default of :attr:`MessagePath.may_start`: attempts may always start."""
    return True


class MessagePath:
    """The per-message path of one worker identity (sync, async or a Lambda invocation).

    ``may_start`` says whether an attempt may still start (a Lambda invocation says no
    once its safety margin is reached): a claim made after that is given back unrun, and
    an attempt begun as the margin passed has its cancellation set at once."""

    def __init__(
        self,
        *,
        tasks: TaskRegistry,
        clock: Clock,
        config: RunlaneConfig,
        worker_id: str,
        observer: Observer | None = None,
        may_start: Callable[[], bool] = always,
        foreign: ForeignEnvironments | None = None,
        app_version: str | None = None,
        claim_lead: ClaimLead | None = None,
    ) -> None:
        self.tasks = tasks
        self.clock = clock
        self.config = config
        self.worker_id = worker_id
        self.app_version = app_version
        """Recorded on every attempt this path starts (docs/versions.md)."""
        self.observer = observer or Observer()
        self.may_start = may_start
        self.foreign = foreign or ForeignEnvironments()
        """The other environments this path has warned about (an async worker keeps one
        across its sessions, a Lambda function between its invocations)."""
        self.claim_lead = claim_lead or ClaimLead()
        """How far ahead this path's claims reserve their runs' starts under rate limits,
        kept as ``foreign`` is."""

    @classmethod
    def of(
        cls,
        engine: Engine,
        worker_id: str,
        *,
        may_start: Callable[[], bool] = always,
        foreign: ForeignEnvironments | None = None,
        claim_lead: ClaimLead | None = None,
    ) -> MessagePath:
        """The path of ``worker_id`` over ``engine``'s tasks, clock and configuration."""
        return cls(
            tasks=engine.tasks,
            clock=engine.clock,
            config=engine.config,
            worker_id=worker_id,
            observer=engine.observer,
            may_start=may_start,
            foreign=foreign,
            app_version=engine.app_version,
            claim_lead=claim_lead,
        )

    def handle(self, message: ReceivedWakeup) -> Handling:
        """The calls for one received message."""
        try:
            wakeup = parse_wakeup(message.body)
        except MalformedWakeup as exc:
            log.warning(
                "deleting malformed message %s from queue %r: %s",
                message.message_id,
                message.queue,
                exc,
                extra={"message_id": message.message_id, "worker_id": self.worker_id},
            )
            self.observer.skipped(SkipReason.MALFORMED.value)
            return Disposition.SKIPPED
        if wakeup.environment != self.config.environment:
            self.observer.skipped(SkipReason.FOREIGN_ENVIRONMENT.value)
            return self._foreign(wakeup, message.queue)
        try:
            return (yield from self._wakeup(wakeup, message))
        except StorageUnavailable as exc:
            log.warning(
                "storage unavailable, leaving wakeup for redelivery: %s",
                exc,
                extra={"run_id": wakeup.run_id, "worker_id": self.worker_id},
            )
            return Disposition.DEFERRED

    def _foreign(self, wakeup: Wakeup, queue: str) -> Disposition:
        """A wakeup of another environment, received on a queue both use: left for that
        environment's workers, never deleted (docs/concepts.md, "Why a wakeup is only a
        hint")."""
        return log_foreign(
            wakeup,
            self.config.sqs_queue_name(queue),
            self.config.environment,
            self.worker_id,
            first=self.foreign.first(queue, wakeup.environment),
        )

    def _wakeup(self, wakeup: Wakeup, message: ReceivedWakeup) -> Handling:
        task = self.tasks.get(wakeup.hint.task) if wakeup.hint is not None else None
        hinted = self._hinted_claim(wakeup, task)
        if hinted is None or task is None:
            run: Run | None = yield ReadRun(wakeup.run_id)
        else:
            try:
                claimed: Run = yield ClaimHinted(hinted)
            except ConflictError as conflict:  # the run moved on: decide on what it is now
                run = conflict.current
            else:
                return (yield from self._claimed(claimed, task, wakeup, message.message_id))
        if run is None:
            return self._skip(wakeup, SkipReason.UNKNOWN_RUN)
        return (yield from self._read(wakeup, run, message))

    def _hinted_claim(self, wakeup: Wakeup, task: Task | None) -> HintedClaim | None:
        """The one-write claim a wakeup's hint allows, if it names ``task``, registered
        here."""
        hint = wakeup.hint
        if hint is None or task is None or self.tasks.limited(task, wakeup.queue):
            return None  # a claim that takes slots reads the run first
        if task.pin_version and hint.attempt > 0:
            return None  # so does one that must see the version the run started under
        return HintedClaim(
            environment=wakeup.environment,
            run_id=wakeup.run_id,
            queue=wakeup.queue,
            hint=hint,
            owner=self.worker_id,
            token=new_lease_token(),
            now=self.clock.now(),
            duration=self.config.lease_duration,
            timeout=task.timeout,
            app_version=self.app_version,
        )

    def _skip(self, wakeup: Wakeup, reason: SkipReason, run: Run | None = None) -> Disposition:
        self.observer.skipped(reason.value)
        return log_skip(wakeup.run_id, reason, self.worker_id, run)

    def _read(self, wakeup: Wakeup, run: Run, message: ReceivedWakeup) -> Handling:
        """Decide on the stored ``run`` (read, or returned by a refused hinted claim)."""
        task = self.tasks.get(run.task)
        if task is None:
            return (yield from self._unknown_task(wakeup, run, message.receive_count))
        if task.pin_version and pinned_elsewhere(run, self.app_version, self.clock.now()):
            return (yield from leave_to_version(run, self))
        if run.rate_start is not None or run.debounce_key is not None:
            yield from pause_until_due(run, self)
        return (yield from self._claim(wakeup, run, task, message))

    def _claim(self, wakeup: Wakeup, run: Run, task: Task, message: ReceivedWakeup) -> Handling:
        """Claim ``run`` (with its slots; a moment before its rate limits' reserved start)
        and run its attempt (at that start)."""
        slots = self.tasks.slots_for(run)
        rates = self.tasks.rates_for(run)
        for _ in range(MAX_RESERVES):
            asked_at = now = self.clock.now()
            start_us = (yield from reserved_start(run, task, self)) if rates else None
            if start_us is not None:
                if sleeps_first(run, start_us, self):
                    return (yield from sleep_until_start(run, start_us, message, self))
                now = self.clock.now()
            decision = decide_claim(
                run,
                task,
                self.worker_id,
                now=now if start_us is None else from_epoch_us(start_us),  # it starts then
                config=self.config,
                slots=slots,
                app_version=self.app_version,
            )
            if isinstance(decision, Skip):
                return (yield from self._unclaimed(wakeup, decision.reason, run, message))
            if start_us is None:
                return (yield from self._write_claim(wakeup, decision, task, None, message))
            if past_grace(rates, start_us, to_epoch_us(now)):
                self.claim_lead.took(now - asked_at)
                continue  # its reservation took too long: reserve again, further ahead
            reserved = (start_us, asked_at)
            return (yield from self._write_claim(wakeup, decision, task, reserved, message))
        log.warning(
            "run %s: its claims kept coming later than its reserved starts; its wakeup is "
            "left for redelivery",
            run.id,
            extra={"run_id": run.id, "task": run.task, "worker_id": self.worker_id},
        )
        return Disposition.DEFERRED

    def _write_claim(
        self,
        wakeup: Wakeup,
        decision: Transition,
        task: Task,
        reserved: tuple[int, datetime] | None,
        message: ReceivedWakeup,
    ) -> Handling:
        """Write the claim ``decision`` and run its attempt, entering the handler at the
        run's start under its rate limits, if ``reserved`` (the start, and when its first
        reservation was asked)."""
        run = decision.before
        try:
            claimed: Run = yield Write(decision)
        except ConflictError as lost:
            return (yield from self._claim_lost(wakeup, run, lost.current, message))
        except NoFreeSlot as full:
            slot = next(s for s in decision.after.slots if s.scope == full.scope)
            return (yield from wait_for_free_slot(run, slot, full.holders, self))
        if reserved is not None:
            start_us, asked_at = reserved
            given_back = yield from enter_at_start(claimed, task, start_us, asked_at, message, self)
            if given_back is not None:
                return given_back
        return (yield from self._claimed(claimed, task, wakeup, message.message_id))

    def _claim_lost(
        self, wakeup: Wakeup, run: Run, current: Run | None, message: ReceivedWakeup
    ) -> Handling:
        """The claim decided on ``run`` was refused: another worker claimed it, or a
        trigger collapsed into the debounced run since (decided again on it as it is)."""
        if current is not None and collapsed_since(run, current):
            return (yield from self._read(wakeup, current, message))
        return self._skip(wakeup, SkipReason.CLAIM_LOST, run)

    def _unclaimed(
        self, wakeup: Wakeup, reason: SkipReason, run: Run, message: ReceivedWakeup
    ) -> Handling:
        """The run cannot be claimed: the wakeup is skipped, unless the run is debounced
        and its due time moved on since the wakeup was sent, or it is due in a moment (the
        clock that sent its wakeup runs ahead of this worker's): the worker keeps the
        message until then, since no other wakeup is coming."""
        if reason is SkipReason.NOT_DUE and run.debounce_key is not None:
            return (yield from wait_for_quiet(run, message, self))
        if reason is SkipReason.NOT_DUE and due_in_a_moment(run, self.clock.now()):
            assert run.due_at is not None
            if (yield Hold(message, run.due_at)):
                return Disposition.HELD
        return self._skip(wakeup, reason, run)

    def _claimed(
        self, claimed: Run, task: Task, wakeup: Wakeup, message_id: str | None
    ) -> Handling:
        """Run the attempt of a claimed run, or give it back unrun if the claim came back
        late or the caller's time to start attempts is over (a Lambda invocation's
        safety margin)."""
        now = self.clock.now()
        late = claimed_too_late(claimed, now, self.config.lease_duration)
        if late or not self.may_start():
            return (
                yield from withdraw(claimed, Withdrawal.LATE if late else Withdrawal.DEADLINE, self)
            )
        yield from self.attempt(task, claimed, now, wakeup, message_id)
        return Disposition.EXECUTED

    def _unknown_task(self, wakeup: Wakeup, run: Run, receives: int) -> Handling:
        """Leave the wakeup for a worker that registers the task; park the run once
        ``park_after_receives`` receives found none (docs/operations.md, "Parked runs")."""
        decision = park_unknown_task(
            run,
            now=self.clock.now(),
            worker=self.worker_id,
            receives=receives,
            park_after=self.config.park_after_receives,
        )
        if decision is None:
            return log_unknown_task(run, self.worker_id, self.tasks.names())
        if isinstance(decision, Skip):
            return self._skip(wakeup, decision.reason, run)
        try:
            parked: Run = yield Write(decision)
        except ConflictError:
            return self._skip(wakeup, SkipReason.CLAIM_LOST, run)
        return log_parked(parked, self.worker_id, self.tasks.names())

    def attempt(
        self,
        task: Task,
        run: Run,
        started: datetime,
        wakeup: Wakeup | None = None,
        message_id: str | None = None,
    ) -> PathPart:
        """One attempt of a claimed run, starting at ``started``, and its recorded outcome,
        in the attempt's span; returns the stored run (``None`` when the lease was lost
        and nothing was recorded)."""
        span = self.observer.attempt(run, message_id, wakeup.trace if wakeup else None)
        requested_at = wakeup.requested_at if wakeup else None
        try:
            stored = yield from self._attempt(task, run, span, started, requested_at)
            ended = stored.updated_at if stored is not None else self.clock.now()
            self.observer.attempt_ended(run, stored, (ended - started).total_seconds(), span)
        finally:  # also when the driver abandons the attempt
            span.end()
        return stored

    def _attempt(
        self,
        task: Task,
        run: Run,
        span: Span,
        started: datetime,
        requested_at: datetime | None,
    ) -> PathPart:
        token = machine.lease_token(run)
        ctx: TaskContext = yield Begin(run, token)
        if not self.may_start():  # the deadline passed while it began: cancel at once
            ctx.cancellation.set()
        if span.trace_id is not None:
            ctx.trace(span.trace_id)
        self.observer.attempt_started(run, started, requested_at)
        ctx.log.info("attempt %d started", run.attempt)
        decide: Decide
        try:
            result = yield CallHandler(task, ctx, run.payload, span)
        except GeneratorExit:  # the driver abandoned the attempt: record nothing
            raise
        except BaseException as exc:  # waits, and SystemExit/KeyboardInterrupt from a handler
            decide = decide_raised(self.config, task, exc, token)
        else:
            decide = decide_returned(result, token)
        tracked: tuple[Run, bool, AttemptReport | None] | None = yield End(run.id, token)
        latest, lost, final = tracked if tracked else (run, False, None)
        if lost:
            ctx.log.warning(
                "attempt %d finished after its lease was lost; outcome discarded", run.attempt
            )
            return None
        if final is not None:  # the attempt's last report rides on its outcome's write
            decide = reporting(decide, final)
        stored = yield from self._write_outcome(latest, token, decide, ctx)
        if stored is not None:
            yield from self._follow_up(stored, ctx)
            if latest.slots and stored.lease is None:
                yield from wake_waiters(latest, ctx)
        return stored

    def _write_outcome(self, run: Run, token: str, decide: Decide, ctx: TaskContext) -> PathPart:
        current = run
        for _ in range(machine.MAX_REDECISIONS):
            try:
                transition = decide(current, self.clock.now())
            except LeaseLost:
                break
            try:
                stored: Run = yield Write(transition)
            except ConflictError as conflict:
                if not still_leased(conflict.current, token):
                    break
                assert conflict.current is not None
                current = conflict.current
            except StorageUnavailable:
                raise
            except StorageError as exc:
                return (yield from self._outcome_refused(current, token, exc, ctx))
            else:
                return stored
        ctx.log.warning("the lease was lost before the outcome was written; outcome discarded")
        return None

    def _outcome_refused(
        self, run: Run, token: str, exc: StorageError, ctx: TaskContext
    ) -> PathPart:
        ctx.log.error("storage refused the outcome: %s; failing the run", exc)
        refused = refused_outcome(run, token, exc, self.clock.now())
        try:
            stored: Run = yield Write(refused)
        except (ConflictError, StorageError) as again:
            ctx.log.error("could not record the failure either: %s", again)
            return None
        return stored

    def _follow_up(
        self, run: Run, ctx: TaskContext
    ) -> Generator[DriverCall | EngineCall, Any, None]:
        """Log the outcome, publish the next wakeup, free keys and resume waiters.

        The outcome is recorded by now, so a follow-up that fails is logged and left to
        maintenance (which publishes due runs and polls waits); the message still counts
        as executed."""
        log_outcome(run, ctx)
        call = follow_up_call(run, self.clock)
        if call is None:
            return
        try:
            yield call
        except RunlaneError as exc:
            ctx.log.warning(
                "%s after attempt %d failed: %s; maintenance will repair it",
                type(call).__name__.lower(),
                run.attempt,
                exc,
            )


def reporting(decide: Decide, final: AttemptReport) -> Decide:
    """``decide``, its transition carrying the attempt's last report."""
    return lambda run, now: with_report(decide(run, now), final)


DUE_SOON = timedelta(seconds=2)
"""How early by a worker's clock a run's wakeup may come and still be kept until the run
is due: the clocks of the process that published it and of the worker differ a little
(without it, the run would wait for maintenance's republish, minutes later)."""


def due_in_a_moment(run: Run, now: datetime) -> bool:
    """Whether a run found not due is due within :data:`DUE_SOON` (its wakeup came that
    much early by this worker's clock)."""
    return run.due_at is not None and run.due_at - now <= DUE_SOON


def follow_up_call(run: Run, clock: Clock) -> DriverCall | EngineCall | None:
    """What an attempt's recorded outcome calls for next, if anything: the finished run's
    bookkeeping, the next wakeup (``clock`` says how soon), or a recheck of the wait it
    released to."""
    next_step = follow_up(run)
    if next_step is FollowUp.FINISHED:
        return Finish(run)
    if next_step is FollowUp.PUBLISH:
        assert run.due_at is not None
        return Publish(run, run.due_at - clock.now())
    if next_step is FollowUp.RECHECK:
        return Recheck(run)
    return None


FOREIGN_WARNINGS_MAX = 100
"""Queue and environment pairs a worker warns about; wakeups naming more (forged ones,
say) are only logged at INFO."""


class ForeignEnvironments:
    """The other environments whose wakeups a worker has warned about, by queue: one
    warning per queue and environment, not one per wakeup. Safe to share between the
    threads of a worker and the invocations of a Lambda function."""

    def __init__(self) -> None:
        self._warned: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def first(self, queue: str, environment: str) -> bool:
        """Whether this is the first wakeup of ``environment`` seen on ``queue``."""
        with self._lock:
            if (queue, environment) in self._warned or len(self._warned) >= FOREIGN_WARNINGS_MAX:
                return False
            self._warned.add((queue, environment))
            return True


def log_foreign(
    wakeup: Wakeup, sqs_queue: str, environment: str, worker_id: str, *, first: bool
) -> Disposition:
    """A wakeup of another environment: returned to its queue, never deleted. The first
    one of each environment on each queue is a warning: the queue is shared."""
    extra = {
        "run_id": wakeup.run_id,
        "reason": SkipReason.FOREIGN_ENVIRONMENT.value,
        "worker_id": worker_id,
        "wakeup_environment": wakeup.environment,
    }
    if first:
        log.warning(
            "queue %s receives wakeups of environment %r; this worker's environment is %r: "
            "they are left on the queue for that environment's workers. Give each "
            "environment its own queues (the default, runlane-{environment}-{queue}, when "
            "no queue_prefix is set): on a shared queue every receive by a worker of another "
            "environment counts toward the dead-letter queue's maxReceiveCount",
            sqs_queue,
            wakeup.environment,
            environment,
            extra=extra,
        )
    log.info(
        "returning wakeup for run %s of environment %r to queue %s",
        wakeup.run_id,
        wakeup.environment,
        sqs_queue,
        extra=extra,
    )
    return Disposition.RETURNED


def log_unknown_task(run: Run, worker_id: str, registered: list[str]) -> Disposition:
    log.warning(
        "run %s names task %r, which this worker does not register (it registers %s); "
        "leaving the wakeup for a worker that does",
        run.id,
        run.task,
        ", ".join(registered) or "no task",
        extra={"run_id": run.id, "task": run.task, "worker_id": worker_id},
    )
    return Disposition.DEFERRED


def log_parked(run: Run, worker_id: str, registered: list[str]) -> Disposition:
    log.error(
        "parked run %s: no worker that received its wakeup registers task %r (this one "
        "registers %s); a worker that registers it unparks it when it starts, or run "
        "'runlane-sqs runs unpark %s'",
        run.id,
        run.task,
        ", ".join(registered) or "no task",
        run.id,
        extra={"run_id": run.id, "task": run.task, "worker_id": worker_id},
    )
    return Disposition.SKIPPED


def log_outcome(run: Run, ctx: TaskContext) -> None:
    """The attempt's outcome on the ``runlane_sqs.task`` logger: a failure at ERROR when the
    run failed and at WARNING when a retry follows, with the recorded (redacted)
    traceback in the record's ``traceback`` field."""
    failure = run.failure
    failed = {"traceback": failure.traceback} if failure and failure.traceback else {}
    reason = shortened(failure.message) if failure else ""
    if run.status is RunStatus.SUCCEEDED:
        ctx.log.info("attempt %d succeeded", run.attempt)
    elif run.status is RunStatus.FAILED:
        ctx.log.error("attempt %d failed; run failed: %s", run.attempt, reason, extra=failed)
    elif run.status is RunStatus.RETRYING:
        due = run.due_at.isoformat() if run.due_at else "now"
        ctx.log.warning(
            "attempt %d failed; retry due at %s: %s", run.attempt, due, reason, extra=failed
        )
    elif run.status is RunStatus.RELEASED and run.waiting is not None:
        ctx.log.info("attempt %d released; waiting for %s", run.attempt, run.waiting.kind.value)
    elif run.status is RunStatus.PARKED:
        ctx.log.error(
            "attempt %d stopped: the handler no longer matches the run's history (parked "
            "%s); deploy code that matches, then 'runlane-sqs runs unpark %s', or rerun it",
            run.attempt,
            run.parked_reason,
            run.id,
        )


# The path's decisions ---------------------------------------------------------------

Decide = Callable[[Run, datetime], Transition]
"""Decides an attempt's outcome transition from the latest stored run and the time."""


class FollowUp(StrEnum):
    """What the path does after recording an outcome."""

    FINISHED = "finished"
    """Terminal, with keys to free, waiters to resume, a turn to hand on or a group to
    move on (:func:`finishing_needs_storage`)."""
    PUBLISH = "publish"
    """Due again within SQS's delay limit: publish its next wakeup."""
    RECHECK = "recheck"
    """Released to wait: check once whether its target was decided meanwhile."""
    NONE = "none"
    """Maintenance publishes it when due."""


def follow_up(run: Run) -> FollowUp:
    """What ``run``'s recorded outcome calls for next."""
    if run.is_terminal:
        return FollowUp.FINISHED if finishing_needs_storage(run) else FollowUp.NONE
    if run.status.is_runnable and run.due_at is not None and run.wake_at is not None:
        return FollowUp.PUBLISH
    if run.status is RunStatus.RELEASED and run.waiting is not None:
        return FollowUp.RECHECK
    return FollowUp.NONE


def decide_claim(
    run: Run,
    task: Task,
    worker_id: str,
    *,
    now: datetime,
    config: RunlaneConfig,
    slots: tuple[Slot, ...] = (),
    app_version: str | None = None,
) -> Transition | Skip:
    """Claim the lease of a run a wakeup named (and ``slots``, its concurrency limits'),
    or say why not."""
    return machine.claim_lease(
        run,
        now=now,
        owner=worker_id,
        token=new_lease_token(),
        duration=config.lease_duration,
        timeout=task.timeout,
        slots=slots,
        app_version=app_version,
    )


def failure_from(exc: BaseException, *, retryable: bool, redact: Redact | None = None) -> Failure:
    """The failure stored for ``exc``: its message and traceback through ``redact``."""
    text = "".join(traceback.format_exception(exc))
    return Failure(
        type=qualified_name(exc),
        message=apply_redaction(redact, str(exc))[:1000],
        traceback=apply_redaction(redact, text)[-MAX_TRACEBACK_CHARS:],
        retryable=retryable,
    )


def decide_returned(result: JSON, token: str) -> Decide:
    """The handler returned: success, with ``result`` as the driver kept it (checked, and
    sealed if large: a result that is not storable JSON was raised as a failure)."""
    return lambda run, now: machine.record_success(run, token=token, result=result, now=now)


def decide_raised(config: RunlaneConfig, task: Task, exc: BaseException, token: str) -> Decide:
    """The handler raised: a wait (release), code that no longer matches the run's history
    (the run is parked), or a failure the retry policy decides on. Under a cancel request
    each of them cancels the run instead."""
    diverged = _diverged_in(exc)
    if diverged is not None:
        details = diverged.details()
        return lambda run, now: parking.park_diverged(run, token=token, now=now, details=details)
    if isinstance(exc, PayloadMismatch):
        found = exc.details()
        return lambda run, now: parking.park_mismatched(run, token=token, now=now, details=found)
    wait = exc.wait if isinstance(exc, WaitRequested) else _wait_in(exc)
    if wait is not None:
        return _decide_release(config, wait, token)
    retryable = task.retry.is_retryable(exc) and not isinstance(
        exc, StepError | InvalidPayloadError | GroupFailed | ValueUnreadable | CodecError
    )  # an InvalidResult too: the same code returns the same value again
    failure = failure_from(exc, retryable=retryable, redact=config.redact)

    def decide(run: Run, now: datetime) -> Transition:
        decision = task.retry.decide(run.failures + 1, now, retryable=retryable, exc=exc)
        return machine.record_failure(
            run,
            token=token,
            failure=failure,
            decision=decision,
            now=now,
            republish=config.republish,
        )

    return decide


def _decide_release(config: RunlaneConfig, wait: Wait, token: str) -> Decide:
    return lambda run, now: waits.release(
        run, token=token, wait=wait, now=now, republish=config.republish
    )


def refused_outcome(run: Run, token: str, exc: Exception, now: datetime) -> Transition:
    """Storage refused an outcome (an item that would outgrow 400 KB): fail the run with a
    small failure instead."""
    failure = Failure(type=qualified_name(exc), message=str(exc)[:500], retryable=False)
    return machine.record_failure(
        run, token=token, failure=failure, decision=RetryDecision(retry_at=None), now=now
    )


def still_leased(current: Run | None, token: str) -> bool:
    """After a conflict: whether the attempt still holds the lease (decide again) or not."""
    return current is not None and current.lease is not None and current.lease.token == token


def _diverged_in(exc: BaseException) -> HistoryDiverged | None:
    """The divergence ``exc`` is, or holds (raised in an ``asyncio.TaskGroup``)."""
    if isinstance(exc, HistoryDiverged):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        found = exc.subgroup(HistoryDiverged)
        while isinstance(found, BaseExceptionGroup):
            found = found.exceptions[0]  # type: ignore[assignment]
        return found
    return None


def _wait_in(exc: BaseException) -> Wait | None:
    """A wait raised inside an exception group (``asyncio.TaskGroup``) is still a wait."""
    if isinstance(exc, BaseExceptionGroup):
        waits_only = exc.subgroup(WaitRequested)
        if waits_only is not None and exc.split(WaitRequested)[1] is None:
            first = waits_only.exceptions[0]
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            return first.wait if isinstance(first, WaitRequested) else None
    return None
