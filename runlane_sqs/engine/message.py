"""One wakeup in, at most one attempt out: the per-message path, written once.

A wakeup with a hint is claimed at once (one conditional write on the hint; when the
hint no longer holds, the refusal returns the run and the claim is decided on it); a
wakeup without one re-reads the run first. Then: run the handler -> record the outcome
under the lease token -> follow up (next wakeup, finished-run bookkeeping). A wakeup of
another environment is returned to its queue for that environment's workers; anything
else that is not a runnable, due run is acknowledged and ignored.

The path sends no request itself. :meth:`MessagePath.handle` is a generator that yields
the requests it needs (the request classes below) and is sent each one's result, or
thrown its error. A driver performs them with its own I/O: :func:`drive` with
:class:`runlane_sqs.runtime.executor.Executor` for the sync worker and the Lambda
consumer, :func:`runlane_sqs.runtime.aio.executor.drive_async` for the async worker.
Tests step the generator by hand to put a race at an exact point
(tests/engine/test_message_path.py; docs/design/architecture.md shows how). What the
path decides is in :mod:`runlane_sqs.engine.decisions` (pure); what it logs is here.

Timeline of a plain run (what the driver is asked for)::

    ClaimHinted -> Begin -> CallHandler -> End -> Write(outcome) [-> follow-up]

and of a wakeup without a hint, or whose hint no longer holds::

    ReadRun | ClaimHinted (refused) -> Write(claim) -> Begin -> ...
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from runlane_sqs.core import machine
from runlane_sqs.core.claims import HintedClaim, withdraw_claim
from runlane_sqs.core.clock import Clock
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.debounce import collapsed_since
from runlane_sqs.core.errors import (
    ConflictError,
    LeaseLost,
    NoFreeSlot,
    RunlaneError,
    StorageError,
    StorageUnavailable,
)
from runlane_sqs.core.limits import MAX_DELAY_SECONDS
from runlane_sqs.core.machine import Skip, SkipReason, Transition
from runlane_sqs.core.model import JSON, Run, RunStatus, Slot, new_lease_token
from runlane_sqs.core.parking import park_unknown_task
from runlane_sqs.core.rates import (
    Reserve,
    ReserveAt,
    on_time,
    reserve_starts,
    to_epoch_us,
    wait_for_rate,
)
from runlane_sqs.core.redaction import shortened
from runlane_sqs.core.slots import wait_for_slot
from runlane_sqs.core.versions import pinned_elsewhere, pinned_retry_delay
from runlane_sqs.core.wakeup import MalformedWakeup, Wakeup, parse_wakeup
from runlane_sqs.engine import decisions
from runlane_sqs.engine.context import TaskContext
from runlane_sqs.engine.decisions import Decide, FollowUp
from runlane_sqs.engine.engine import Engine
from runlane_sqs.engine.finishing import finishing_needs_storage
from runlane_sqs.engine.observing import NO_SPAN, Observer
from runlane_sqs.engine.tasks import Task, TaskRegistry
from runlane_sqs.ports.telemetry import Span
from runlane_sqs.ports.transport import ReceivedWakeup

log = logging.getLogger("runlane_sqs.worker")
EARLY_WAKEUP = timedelta(seconds=1)
"""How much earlier than its reserved start the wakeup of a run sleeping for its rate
limits is published for: SQS's delays are whole seconds, and a queue may show a delayed
message a moment late. The worker that receives it holds it until that start."""
MAX_EARLY = 2 * EARLY_WAKEUP
"""The most a wakeup can come before its run's reserved start, rounding down included."""
MAX_HOLD = timedelta(seconds=20)
"""The longest a worker keeps the message of a run sleeping for its reserved start rather
than publish a wakeup (which would come after every message queued before it): well
inside the queue's visibility timeout (60 s by default; docs/rate-limits.md)."""
SHORT_WAIT = timedelta(milliseconds=200)
"""A reserved start at most this far ahead is waited for on the attempt's thread: the
run is claimed then, without a write to sleep and a wakeup."""
RESERVE_LEAD = timedelta(milliseconds=100)
"""How far ahead a claim reserves after its first reservation came too late to use."""
MAX_PAUSES = 3
"""Pauses before a run's reserved start: a sleep may end a moment early by the wall clock."""
MAX_RESERVES = 5
"""Claims of a run that reserved its start again because the reservations' writes took
longer than the grace; then its wakeup is left for redelivery (the run stays due)."""


class Disposition(StrEnum):
    """What became of one message."""

    EXECUTED = "executed"
    """An attempt ran; delete the message."""
    SKIPPED = "skipped"
    """A stale, unknown or malformed hint; delete the message."""
    DEFERRED = "deferred"
    """Could not be handled now (unknown task, storage down); leave it for redelivery."""
    RETURNED = "returned"
    """A wakeup of another environment on a queue they share: never deleted, made
    visible again for that environment's workers."""
    HELD = "held"
    """The run sleeps until its reserved start under its rate limits, a moment ahead: the
    worker keeps the message and handles it again then (:class:`Hold`)."""


# The requests the path yields ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadRun:
    """Read the run a wakeup names. Result: the run, or ``None`` if it is unknown."""

    run_id: str


@dataclass(frozen=True, slots=True)
class Write:
    """Apply a conditional transition. Result: the stored run; raises
    :class:`~runlane_sqs.errors.ConflictError` (with the stored run) if it changed."""

    transition: Transition


@dataclass(frozen=True, slots=True)
class ClaimHinted:
    """Claim the run with one write conditioned on the wakeup's hint. Result: the
    claimed run; raises :class:`~runlane_sqs.errors.ConflictError` carrying the stored
    run (``None`` if there is none) when the hint no longer holds."""

    claim: HintedClaim


@dataclass(frozen=True, slots=True)
class Begin:
    """Start an attempt of a claimed run: build its context and keep its lease alive.
    Result: the :class:`~runlane_sqs.engine.context.TaskContext`."""

    run: Run
    token: str


@dataclass(frozen=True, slots=True)
class CallHandler:
    """Call the task's handler with the payload opened. Result: what it returned, sealed
    (:meth:`runlane_sqs.engine.values.Values.seal`); raises what it raised, or why the
    payload could not be opened or the result kept."""

    task: Task
    ctx: TaskContext
    payload: JSON
    """The payload as stored (a large one still sealed)."""
    span: Span = NO_SPAN
    """The attempt's span: the driver makes it current around the call."""


@dataclass(frozen=True, slots=True)
class End:
    """Stop renewing the attempt's lease. Result: ``(latest run, lease lost)``, or
    ``None`` if the attempt was not tracked."""

    run_id: str


@dataclass(frozen=True, slots=True)
class Publish:
    """Publish the run's next wakeup after ``delay`` (repairing a refused send). Result:
    ``None``."""

    run: Run
    delay: timedelta


@dataclass(frozen=True, slots=True)
class Finish:
    """Free a finished run's keys and resume its first waiters. Result: ``None``."""

    run: Run


@dataclass(frozen=True, slots=True)
class Recheck:
    """Resume a run released to wait if its target decided meanwhile. Result: ``None``."""

    run: Run


@dataclass(frozen=True, slots=True)
class WakeWaiters:
    """Slots of these scopes were just freed: wake the oldest run waiting for each.
    Result: ``None``."""

    scopes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RecheckSlot:
    """``run`` just began waiting for ``slot``: wake it if a slot is free by now.
    Result: ``None``."""

    run: Run
    slot: Slot


@dataclass(frozen=True, slots=True)
class PassSlotsOn:
    """``run`` sleeps until its reserved start instead of taking its slots: wake the
    oldest waiter of each of its limits that has a free slot (``run`` may have been woken
    for it). Result: ``None``."""

    run: Run


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait ``delay`` (at most :data:`MAX_EARLY`: a run woken just before its reserved
    start under its rate limits, SQS's delays being whole seconds). Result: ``None``."""

    delay: timedelta


@dataclass(frozen=True, slots=True)
class Hold:
    """Keep ``message`` and handle it again at ``until`` (a run's reserved start under its
    rate limits, at most :data:`MAX_HOLD` ahead), instead of publishing a wakeup that
    would wait in the queue behind every other message. Result: whether the driver can
    (a worker can; the Lambda consumer cannot)."""

    message: ReceivedWakeup
    until: datetime


PathRequest = (
    ReadRun
    | Reserve
    | ReserveAt
    | Pause
    | Hold
    | PassSlotsOn
    | ClaimHinted
    | Write
    | Begin
    | CallHandler
    | End
    | Publish
    | Finish
    | Recheck
    | WakeWaiters
    | RecheckSlot
)
Handling = Generator[PathRequest, Any, Disposition]
"""One message's handling: yields requests, returns what became of the message."""
Perform = Callable[[PathRequest], Any]


class Performer(Protocol):
    """What a driver implements: one method per request (sync or ``async def``)."""

    def read(self, request: ReadRun) -> Any: ...
    def reserve(self, request: Reserve) -> Any: ...
    def reserve_at(self, request: ReserveAt) -> Any: ...
    def pause(self, request: Pause) -> Any: ...
    def hold(self, request: Hold) -> Any: ...
    def pass_slots_on(self, request: PassSlotsOn) -> Any: ...
    def claim_hinted(self, request: ClaimHinted) -> Any: ...
    def write(self, request: Write) -> Any: ...
    def begin(self, request: Begin) -> Any: ...
    def call(self, request: CallHandler) -> Any: ...
    def end(self, request: End) -> Any: ...
    def publish(self, request: Publish) -> Any: ...
    def finish(self, request: Finish) -> Any: ...
    def recheck(self, request: Recheck) -> Any: ...
    def wake_waiters(self, request: WakeWaiters) -> Any: ...
    def recheck_slot(self, request: RecheckSlot) -> Any: ...


def performer_table(driver: Performer) -> dict[type, Callable[[Any], Any]]:
    """The driver's method for each request type."""
    return {
        ReadRun: driver.read,
        Reserve: driver.reserve,
        ReserveAt: driver.reserve_at,
        Pause: driver.pause,
        Hold: driver.hold,
        PassSlotsOn: driver.pass_slots_on,
        ClaimHinted: driver.claim_hinted,
        Write: driver.write,
        Begin: driver.begin,
        CallHandler: driver.call,
        End: driver.end,
        Publish: driver.publish,
        Finish: driver.finish,
        Recheck: driver.recheck,
        WakeWaiters: driver.wake_waiters,
        RecheckSlot: driver.recheck_slot,
    }


def next_request(
    handling: Handling, reply: Any, error: BaseException | None
) -> PathRequest | Disposition:
    """Hand the path the last request's result (or error); returns its next request, or
    what became of the message once the path is done."""
    try:
        return handling.send(reply) if error is None else handling.throw(error)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def drive(handling: Handling, perform: Perform) -> Disposition:
    """Run ``handling`` to the end, performing each request with ``perform`` (sync I/O)."""
    request = next_request(handling, None, None)
    while not isinstance(request, Disposition):
        try:
            reply = perform(request)
        except BaseException as exc:  # the path decides what a failed request means
            request = next_request(handling, None, exc)
        else:
            request = next_request(handling, reply, None)
    return request


# The path -----------------------------------------------------------------------------


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

    @classmethod
    def of(
        cls,
        engine: Engine,
        worker_id: str,
        *,
        may_start: Callable[[], bool] = always,
        foreign: ForeignEnvironments | None = None,
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
        )

    def handle(self, message: ReceivedWakeup) -> Handling:
        """The requests for one received message."""
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
        hinted = self._hinted_claim(wakeup)
        if hinted is None:
            run: Run | None = yield ReadRun(wakeup.run_id)
        else:
            try:
                claimed: Run = yield ClaimHinted(hinted)
            except ConflictError as conflict:  # the run moved on: decide on what it is now
                run = conflict.current
            else:
                return (yield from self._claimed(claimed, wakeup, message.message_id))
        if run is None:
            return self._skip(wakeup, SkipReason.UNKNOWN_RUN)
        return (yield from self._read(wakeup, run, message))

    def _hinted_claim(self, wakeup: Wakeup) -> HintedClaim | None:
        """The one-write claim a wakeup's hint allows, if it names a task registered here."""
        hint = wakeup.hint
        task = self.tasks.get(hint.task) if hint is not None else None
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
        return log_skip(wakeup, reason, self.worker_id, run)

    def _read(self, wakeup: Wakeup, run: Run, message: ReceivedWakeup) -> Handling:
        """Decide on the stored ``run`` (read, or returned by a refused hinted claim)."""
        task = self.tasks.get(run.task)
        if task is None:
            return (yield from self._unknown_task(wakeup, run, message.receive_count))
        if task.pin_version and pinned_elsewhere(run, self.app_version, self.clock.now()):
            return (yield from self._leave_to_version(run))
        slots = self.tasks.slots_for(run)
        for _ in range(MAX_PAUSES):  # woken before its reserved start (SQS: whole seconds)
            ahead = (run.due_at or self.clock.now()) - self.clock.now()
            timed = run.rate_start is not None or run.debounce_key is not None
            if not timed or not timedelta(0) < ahead <= MAX_EARLY:
                break
            yield Pause(ahead)
        return (yield from self._claim(wakeup, run, task, slots, message))

    def _leave_to_version(self, run: Run) -> Handling:
        """A run of a pinned task that started under another app version: its wakeup is
        sent again for a worker of that version (later each time) and this one deleted
        (docs/versions.md, "Pinning")."""
        delay = pinned_retry_delay(run, self.clock.now())
        yield Publish(run, delay)
        log.info(
            "leaving run %s of task %s to a worker of app version %s (this one runs %s); "
            "its wakeup comes back in %s",
            run.id,
            run.task,
            run.app_version,
            self.app_version,
            delay,
            extra={"run_id": run.id, "task": run.task, "worker_id": self.worker_id},
        )
        self.observer.skipped(SkipReason.PINNED_ELSEWHERE.value)
        return Disposition.SKIPPED

    def _claim(
        self,
        wakeup: Wakeup,
        run: Run,
        task: Task,
        slots: tuple[Slot, ...],
        message: ReceivedWakeup,
    ) -> Handling:
        """Claim ``run`` on time for its rate limits (reserving its start first: a run early
        for it sleeps) with its slots, and run its attempt."""
        lead = timedelta(0)
        for _ in range(MAX_RESERVES):
            start_us = yield from self._rate_start(run, task, lead)
            while start_us is not None:
                ahead = timedelta(microseconds=start_us - to_epoch_us(self.clock.now()))
                if ahead <= timedelta(0):
                    break
                if ahead > SHORT_WAIT:
                    return (yield from self._wait_for_rate(wakeup, run, start_us, message))
                yield Pause(ahead)  # a moment: not worth a write and a wakeup
            now = self.clock.now()
            decision = decisions.decide_claim(
                run,
                task,
                self.worker_id,
                now=now,
                config=self.config,
                slots=slots,
                app_version=self.app_version,
            )
            if isinstance(decision, Skip):
                return (yield from self._unclaimed(wakeup, decision.reason, run, message))
            if start_us is not None and not on_time(
                self.tasks.rates_for(run), start_us, to_epoch_us(now)
            ):
                # its reservation and its read took longer than the grace: reserve a start
                # a moment ahead, so the claim follows a wait on this thread, not requests
                lead = RESERVE_LEAD
                continue
            try:
                claimed: Run = yield Write(decision)
            except ConflictError as lost:
                return (yield from self._claim_lost(wakeup, run, lost.current, message))
            except NoFreeSlot as full:
                slot = next(s for s in slots if s.scope == full.scope)
                return (yield from self._wait_for_slot(wakeup, run, slot, full.holders))
            return (yield from self._claimed(claimed, wakeup, message.message_id))
        log.warning(
            "run %s: its claims kept coming later than its reserved starts; its wakeup is "
            "left for redelivery",
            run.id,
            extra={"run_id": run.id, "task": run.task, "worker_id": self.worker_id},
        )
        return Disposition.DEFERRED

    def _rate_start(
        self, run: Run, task: Task, lead: timedelta
    ) -> Generator[PathRequest, Any, int | None]:
        """The start ``run`` reserves under its rate limits (µs since the epoch), ``lead``
        from now at the earliest; ``None`` for a run without limits, not due, or claiming
        on time."""
        rates = self.tasks.rates_for(run)
        now = self.clock.now()
        if not rates or not run.is_due(now):
            return None
        if run.rate_start is not None:
            if on_time(rates, to_epoch_us(run.rate_start), to_epoch_us(now)):
                return None
            log.info(
                "run %s came %d ms after its rate limits' reserved start: it reserves again",
                run.id,
                (now - run.rate_start) // timedelta(milliseconds=1),
                extra={"run_id": run.id, "task": run.task, "worker_id": self.worker_id},
            )
        not_before = to_epoch_us(now + lead)
        return (yield from reserve_starts(rates, cost=task.rate_cost, now_us=not_before))

    def _wait_for_rate(
        self, wakeup: Wakeup, run: Run, start_us: int, message: ReceivedWakeup
    ) -> Handling:
        """The run is early for its reserved start: it sleeps until then, with no attempt
        counted. A start up to :data:`MAX_HOLD` ahead keeps the message in this worker
        until then; a later one has its wakeup published with that delay
        (docs/rate-limits.md)."""
        now = self.clock.now()
        scopes = [r.scope for r in self.tasks.rates_for(run)]
        decision = wait_for_rate(run, start_us, scopes, now=now, republish=self.config.republish)
        try:
            waiting: Run = yield Write(decision)
        except ConflictError:
            return log_skip(wakeup, SkipReason.CLAIM_LOST, self.worker_id, run)
        self.observer.delayed(waiting, "rate")
        if self.tasks.slots_for(run):
            yield PassSlotsOn(waiting)
        assert waiting.due_at is not None
        log.info(
            "run %s waits for its rate limits' reserved start until %s",
            run.id,
            waiting.due_at.isoformat(),
            extra={"run_id": run.id, "task": run.task, "worker_id": self.worker_id},
        )
        if waiting.due_at - now <= MAX_HOLD and (yield Hold(message, waiting.due_at)):
            return Disposition.HELD
        if waiting.wake_at is not None:  # whole seconds, early: see EARLY_WAKEUP
            seconds = max(0, int((waiting.due_at - EARLY_WAKEUP - now).total_seconds()))
            with contextlib.suppress(RunlaneError):  # maintenance publishes it otherwise
                yield Publish(waiting, timedelta(seconds=seconds))
        return Disposition.SKIPPED

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
        and its due time moved on since the wakeup was sent."""
        if reason is SkipReason.NOT_DUE and run.debounce_key is not None:
            return (yield from self._wait_for_quiet(run, message))
        return self._skip(wakeup, reason, run)

    def _wait_for_quiet(self, run: Run, message: ReceivedWakeup) -> Handling:
        """A debounced run whose key was triggered again after this wakeup was sent: its
        due time moved on. Up to :data:`MAX_HOLD` ahead, the worker keeps the message
        until then; a later one has its wakeup published again for then (a moment early,
        in whole seconds, at most SQS's longest delay)."""
        assert run.due_at is not None
        now = self.clock.now()
        log.info(
            "run %s is debounced until %s",
            run.id,
            run.due_at.isoformat(),
            extra={"run_id": run.id, "task": run.task, "worker_id": self.worker_id},
        )
        self.observer.skipped(SkipReason.NOT_DUE.value)
        if run.due_at - now <= MAX_HOLD and (yield Hold(message, run.due_at)):
            return Disposition.HELD
        seconds = int((run.due_at - EARLY_WAKEUP - now).total_seconds())
        with contextlib.suppress(RunlaneError):  # maintenance publishes it otherwise
            yield Publish(run, timedelta(seconds=min(MAX_DELAY_SECONDS, max(0, seconds))))
        return Disposition.SKIPPED

    def _wait_for_slot(self, wakeup: Wakeup, run: Run, slot: Slot, holders: int) -> Handling:
        """Every slot of ``slot``'s scope is held: the run waits, with no attempt counted,
        and its wakeup is acknowledged; the write that frees a slot wakes the oldest
        waiter (docs/concurrency.md). The run is checked once more after its write, in
        case the slot freed in between."""
        now = self.clock.now()
        try:
            waiting: Run = yield Write(wait_for_slot(run, slot, holders=holders, now=now))
        except ConflictError:
            return log_skip(wakeup, SkipReason.CLAIM_LOST, self.worker_id, run)
        self.observer.delayed(waiting, "slot")
        log.info(
            "run %s waits for a slot of %s (%d of %d held)",
            run.id,
            slot.scope,
            holders,
            slot.limit,
            extra={"run_id": run.id, "task": run.task, "worker_id": self.worker_id},
        )
        with contextlib.suppress(RunlaneError):  # maintenance checks the slot record too
            yield RecheckSlot(waiting, slot)
        return Disposition.SKIPPED

    def _claimed(self, claimed: Run, wakeup: Wakeup, message_id: str | None) -> Handling:
        """Run the attempt of a claimed run, or give it back unrun if the claim came back
        late or the caller's time to start attempts is over (a Lambda invocation's
        safety margin)."""
        late = claimed_too_late(claimed, self.clock.now(), self.config.lease_duration)
        if late or not self.may_start():
            return (
                yield from self._withdraw(claimed, Withdrawal.LATE if late else Withdrawal.DEADLINE)
            )
        task = self.tasks.get(claimed.task)
        assert task is not None  # claims are only made for registered tasks
        yield from self.attempt(task, claimed, wakeup, message_id)
        return Disposition.EXECUTED

    def _withdraw(self, claimed: Run, reason: Withdrawal) -> Handling:
        """Give ``claimed`` back unrun: the withdrawal's write, its wakeup, and the
        waiters of the slots it frees. The message is acknowledged (a fresh wakeup
        replaces it)."""
        token = decisions.lease_token(claimed)
        now = self.clock.now()
        log_withdrawal(claimed, reason, now, self.config.lease_duration, self.worker_id)
        decision = withdraw_claim(
            claimed, token=token, now=now, republish=self.config.republish, reason=reason.value
        )
        try:
            stored: Run = yield Write(decision)
        except RunlaneError:  # maintenance recovered it first, or storage failed
            return Disposition.SKIPPED
        with contextlib.suppress(RunlaneError):  # maintenance publishes it (wake_at is set)
            yield Publish(stored, timedelta(0))
        if claimed.slots:
            with contextlib.suppress(RunlaneError):  # maintenance checks the slot records
                yield WakeWaiters(tuple(s.scope for s in claimed.slots))
        return Disposition.SKIPPED

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
        wakeup: Wakeup | None = None,
        message_id: str | None = None,
    ) -> Generator[PathRequest, Any, Run | None]:
        """One attempt of a claimed run and its recorded outcome, in the attempt's span;
        returns the stored run (``None`` when the lease was lost and nothing was
        recorded)."""
        span = self.observer.attempt(run, message_id, wakeup.trace if wakeup else None)
        started = self.clock.now()
        requested_at = wakeup.requested_at if wakeup else None
        try:
            stored = yield from self._attempt(task, run, span, requested_at)
            elapsed = (self.clock.now() - started).total_seconds()
            self.observer.attempt_ended(run, stored, elapsed, span)
        finally:  # also when the driver abandons the attempt
            span.end()
        return stored

    def _attempt(
        self, task: Task, run: Run, span: Span, requested_at: datetime | None
    ) -> Generator[PathRequest, Any, Run | None]:
        token = decisions.lease_token(run)
        ctx: TaskContext = yield Begin(run, token)
        if not self.may_start():  # the deadline passed while it began: cancel at once
            ctx.cancellation.set()
        if span.trace_id is not None:
            ctx.trace(span.trace_id)
        self.observer.attempt_started(run, self.clock.now(), requested_at)
        ctx.log.info("attempt %d started", run.attempt)
        decide: Decide
        try:
            result = yield CallHandler(task, ctx, run.payload, span)
        except GeneratorExit:  # the driver abandoned the attempt: record nothing
            raise
        except BaseException as exc:  # waits, and SystemExit/KeyboardInterrupt from a handler
            decide = decisions.decide_raised(self.config, task, exc, token)
        else:
            decide = decisions.decide_returned(result, token)
        tracked: tuple[Run, bool] | None = yield End(run.id)
        latest, lost = tracked if tracked else (run, False)
        if lost:
            ctx.log.warning(
                "attempt %d finished after its lease was lost; outcome discarded", run.attempt
            )
            return None
        stored = yield from self._record(latest, decide, ctx)
        if stored is not None:
            yield from self._follow_up(stored, ctx)
            if latest.slots and stored.lease is None:
                yield from self._wake_waiters(latest, ctx)
        return stored

    def _wake_waiters(self, run: Run, ctx: TaskContext) -> Generator[PathRequest, Any, None]:
        """The attempt's end freed its slots: wake the oldest waiter of each scope (what
        this misses, maintenance wakes)."""
        try:
            yield WakeWaiters(tuple(s.scope for s in run.slots))
        except RunlaneError as exc:
            ctx.log.warning("waking runs waiting for a slot failed: %s", exc)

    def _record(
        self, run: Run, decide: Decide, ctx: TaskContext
    ) -> Generator[PathRequest, Any, Run | None]:
        token = decisions.lease_token(run)
        current = run
        for _ in range(machine.MAX_REDECISIONS):
            try:
                transition = decide(current, self.clock.now())
            except LeaseLost:
                break
            try:
                stored: Run = yield Write(transition)
            except ConflictError as conflict:
                if not decisions.still_leased(conflict.current, token):
                    break
                assert conflict.current is not None
                current = conflict.current
            except StorageUnavailable:
                raise
            except StorageError as exc:
                return (yield from self._record_refused(current, token, exc, ctx))
            else:
                return stored
        ctx.log.warning("the lease was lost before the outcome was written; outcome discarded")
        return None

    def _record_refused(
        self, run: Run, token: str, exc: StorageError, ctx: TaskContext
    ) -> Generator[PathRequest, Any, Run | None]:
        ctx.log.error("storage refused the outcome: %s; failing the run", exc)
        refused = decisions.refused_outcome(run, token, exc, self.clock.now())
        try:
            stored: Run = yield Write(refused)
        except (ConflictError, StorageError) as again:
            ctx.log.error("could not record the failure either: %s", again)
            return None
        return stored

    def _follow_up(self, run: Run, ctx: TaskContext) -> Generator[PathRequest, Any, None]:
        """Log the outcome, publish the next wakeup, free keys and resume waiters.

        The outcome is recorded by now, so a follow-up that fails is logged and left to
        maintenance (which publishes due runs and polls waits); the message still counts
        as executed."""
        log_outcome(run, ctx)
        request = follow_up_request(run, self.clock.now())
        if request is None:
            return
        try:
            yield request
        except RunlaneError as exc:
            ctx.log.warning(
                "%s after attempt %d failed: %s; maintenance will repair it",
                type(request).__name__.lower(),
                run.attempt,
                exc,
            )


def follow_up_request(run: Run, now: datetime) -> PathRequest | None:
    """What an attempt's recorded outcome calls for next, if anything: the finished run's
    bookkeeping, the next wakeup, or a recheck of the wait it released to."""
    step = decisions.follow_up(run)
    if step is FollowUp.FINISHED and finishing_needs_storage(run):
        return Finish(run)
    if step is FollowUp.PUBLISH:
        assert run.due_at is not None
        return Publish(run, run.due_at - now)
    if step is FollowUp.RECHECK:
        return Recheck(run)
    return None


class Withdrawal(StrEnum):
    """Why a claimed run is given back unrun.

    A claim that came back with less than half its lease left (this process was paused,
    or the write was retried through an outage) could overlap the attempt of a worker
    that maintenance gives the run to; a claim made after the caller's time to start
    attempts is over (a Lambda invocation past its safety margin) would run into the
    invocation's timeout. Either way the run is runnable again at once, its wakeup
    published, and the slots the claim took are freed (docs/concepts.md, "Attempts and
    leases")."""

    LATE = "late"
    """The claim came back with less than half its lease left."""
    DEADLINE = "deadline"
    """The caller may not start attempts any more (a Lambda invocation's safety margin)."""


def claimed_too_late(claimed: Run, now: datetime, lease_duration: timedelta) -> bool:
    """Whether the claim came back with less than half its lease left: the heartbeat
    (every third of the lease) might then not renew it in time."""
    lease = claimed.lease
    return lease is not None and now >= lease.expires_at - lease_duration / 2


# What the path logs -------------------------------------------------------------------


def log_skip(
    wakeup: Wakeup, reason: SkipReason, worker_id: str, run: Run | None = None
) -> Disposition:
    extra: dict[str, object] = {
        "run_id": wakeup.run_id,
        "reason": reason.value,
        "worker_id": worker_id,
    }
    if run is not None:
        extra.update(task=run.task, attempt=run.attempt)
    log.info("ignoring wakeup for run %s: %s", wakeup.run_id, reason.value, extra=extra)
    return Disposition.SKIPPED


def log_withdrawal(
    claimed: Run, reason: Withdrawal, now: datetime, lease_duration: timedelta, worker_id: str
) -> None:
    assert claimed.lease is not None
    extra = {"run_id": claimed.id, "worker_id": worker_id}
    if reason is Withdrawal.LATE:
        took = now - (claimed.lease.expires_at - lease_duration)
        log.warning(
            "the claim of run %s came back %.1f s after it was decided, with less than half "
            "its lease left; giving the run back without starting attempt %d",
            claimed.id,
            took.total_seconds(),
            claimed.attempt,
            extra=extra,
        )
    else:
        log.warning(
            "run %s was claimed after the time to start attempts ran out (the invocation's "
            "safety margin); giving it back without starting attempt %d",
            claimed.id,
            claimed.attempt,
            extra=extra,
        )


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
