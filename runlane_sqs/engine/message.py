"""One wakeup in, at most one attempt out: the per-message path, written once.

parse -> claim the lease (a conditional write on the wakeup's hint; when the hint no
longer holds, the refusal returns the run and the claim is decided on it) -> run the
handler -> record the outcome under the lease token -> follow up (next wakeup,
finished-run bookkeeping). A wakeup without a hint re-reads the run first. A wakeup
of another environment is returned to its queue for that environment's workers;
anything else that is not a runnable, due run is acknowledged and ignored.

The path sends no request itself. :meth:`MessagePath.handle` is a generator that yields
the requests it needs (the classes of :mod:`runlane_sqs.engine.steps`) and is sent each
one's result, or thrown its error. A driver performs them with its own I/O:
:func:`~runlane_sqs.engine.steps.drive` for the sync worker and the Lambda consumer,
:func:`runlane_sqs.runtime.aio.executor.drive_async` for the async worker. Tests step
the generator by hand to put a race at an exact point (tests/engine/test_message_path.py;
docs/design/architecture.md shows how).

Timeline of a plain run (what the driver is asked for)::

    ClaimHinted -> Begin -> CallHandler -> End -> Write(outcome) [-> follow-up]

and of a wakeup without a hint, or whose hint no longer holds::

    ReadRun | ClaimHinted (refused) -> Write(claim) -> Begin -> ...
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from datetime import datetime
from typing import Any

from runlane_sqs.core import machine
from runlane_sqs.core.claims import HintedClaim
from runlane_sqs.core.clock import Clock
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import (
    ConflictError,
    LeaseLost,
    NoFreeSlot,
    RunlaneError,
    StorageError,
    StorageUnavailable,
)
from runlane_sqs.core.machine import Skip, SkipReason
from runlane_sqs.core.model import Run
from runlane_sqs.core.names import new_lease_token
from runlane_sqs.core.parking import park_unknown_task
from runlane_sqs.core.wakeup import MalformedWakeup, Wakeup, parse_wakeup
from runlane_sqs.engine import outcomes
from runlane_sqs.engine.context import TaskContext
from runlane_sqs.engine.engine import Engine
from runlane_sqs.engine.observing import Observer
from runlane_sqs.engine.outcomes import Decide, Disposition
from runlane_sqs.engine.slot_steps import slot_wait_steps
from runlane_sqs.engine.steps import (
    Begin,
    CallHandler,
    ClaimHinted,
    End,
    Finish,
    Perform,
    Performer,
    Publish,
    ReadRun,
    Recheck,
    RecheckSlot,
    Request,
    Steps,
    WakeWaiters,
    Write,
    advance,
    drive,
    follow_up_request,
    performer_table,
)
from runlane_sqs.engine.tasks import Task, TaskRegistry
from runlane_sqs.engine.withdrawal import Withdrawal, claimed_too_late, withdraw_steps
from runlane_sqs.ports.telemetry import Span
from runlane_sqs.ports.transport import ReceivedWakeup

__all__ = [
    "Begin",
    "CallHandler",
    "ClaimHinted",
    "End",
    "Finish",
    "MessagePath",
    "Perform",
    "Performer",
    "Publish",
    "ReadRun",
    "Recheck",
    "RecheckSlot",
    "Request",
    "Steps",
    "WakeWaiters",
    "Write",
    "advance",
    "drive",
    "performer_table",
]
log = logging.getLogger("runlane_sqs.worker")


class MessagePath:
    """The per-message path of one worker identity (sync, async or a Lambda invocation)."""

    def __init__(
        self,
        *,
        tasks: TaskRegistry,
        clock: Clock,
        config: RunlaneConfig,
        worker_id: str,
        observer: Observer | None = None,
    ) -> None:
        self.tasks = tasks
        self.clock = clock
        self.config = config
        self.worker_id = worker_id
        self.observer = observer or Observer()
        self.foreign = outcomes.ForeignEnvironments()
        """The other environments this path has warned about (a Lambda function shares
        one between its invocations)."""
        self.may_start: Callable[[], bool] = lambda: True
        """Whether an attempt may still start (a Lambda invocation says no once its safety
        margin is reached): a claim made after that is given back unrun, and an attempt
        begun as the margin passed has its cancellation set at once."""

    @classmethod
    def of(cls, engine: Engine, worker_id: str) -> MessagePath:
        """The path of ``worker_id`` over ``engine``'s tasks, clock and configuration."""
        return cls(
            tasks=engine.tasks,
            clock=engine.clock,
            config=engine.config,
            worker_id=worker_id,
            observer=engine.observer,
        )

    def handle(self, message: ReceivedWakeup) -> Steps:
        """The steps for one received message."""
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
        return outcomes.log_foreign(
            wakeup,
            self.config.sqs_queue_name(queue),
            self.config.environment,
            self.worker_id,
            first=self.foreign.first(queue, wakeup.environment),
        )

    def _wakeup(self, wakeup: Wakeup, message: ReceivedWakeup) -> Steps:
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
        )

    def _skip(self, wakeup: Wakeup, reason: SkipReason, run: Run | None = None) -> Disposition:
        self.observer.skipped(reason.value)
        return outcomes.log_skip(wakeup, reason, self.worker_id, run)

    def _read(self, wakeup: Wakeup, run: Run, message: ReceivedWakeup) -> Steps:
        """Decide on the stored ``run`` (read, or returned by a refused hinted claim)."""
        task = self.tasks.get(run.task)
        if task is None:
            return (yield from self._unknown_task(wakeup, run, message.receive_count))
        slots = self.tasks.slots_for(run)
        decision = outcomes.claim(
            run, task, self.worker_id, now=self.clock.now(), config=self.config, slots=slots
        )
        if isinstance(decision, Skip):
            return self._skip(wakeup, decision.reason, run)
        try:
            claimed: Run = yield Write(decision)
        except ConflictError:
            return self._skip(wakeup, SkipReason.CLAIM_LOST, run)
        except NoFreeSlot as full:
            slot = next(s for s in slots if s.scope == full.scope)
            now = self.clock.now()
            return (
                yield from slot_wait_steps(wakeup, run, slot, full.holders, now, self.worker_id)
            )
        return (yield from self._claimed(claimed, wakeup, message.message_id))

    def _claimed(self, claimed: Run, wakeup: Wakeup, message_id: str | None) -> Steps:
        """Run the attempt of a claimed run, or give it back unrun if the claim came back
        late or the caller's time to start attempts is over (a Lambda invocation's
        safety margin)."""
        late = claimed_too_late(claimed, self.clock.now(), self.config.lease_duration)
        if late or not self.may_start():
            reason = Withdrawal.LATE if late else Withdrawal.DEADLINE
            return (
                yield from withdraw_steps(claimed, reason, self.clock, self.config, self.worker_id)
            )
        task = self.tasks.get(claimed.task)
        assert task is not None  # claims are only made for registered tasks
        yield from self.attempt(task, claimed, wakeup, message_id)
        return Disposition.EXECUTED

    def _unknown_task(self, wakeup: Wakeup, run: Run, receives: int) -> Steps:
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
            return outcomes.log_unknown_task(run, self.worker_id, self.tasks.names())
        if isinstance(decision, Skip):
            return self._skip(wakeup, decision.reason, run)
        try:
            parked: Run = yield Write(decision)
        except ConflictError:
            return self._skip(wakeup, SkipReason.CLAIM_LOST, run)
        return outcomes.log_parked(parked, self.worker_id, self.tasks.names())

    def attempt(
        self,
        task: Task,
        run: Run,
        wakeup: Wakeup | None = None,
        message_id: str | None = None,
    ) -> Generator[Request, Any, Run | None]:
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
    ) -> Generator[Request, Any, Run | None]:
        token = outcomes.lease_token(run)
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
            decide = outcomes.decide_raised(self.config, task, exc, token)
        else:
            decide = outcomes.decide_returned(self.config, result, token)
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

    def _wake_waiters(self, run: Run, ctx: TaskContext) -> Generator[Request, Any, None]:
        """The attempt's end freed its slots: wake the oldest waiter of each scope (what
        this misses, maintenance wakes)."""
        try:
            yield WakeWaiters(tuple(s.scope for s in run.slots))
        except RunlaneError as exc:
            ctx.log.warning("waking runs waiting for a slot failed: %s", exc)

    def _record(
        self, run: Run, decide: Decide, ctx: TaskContext
    ) -> Generator[Request, Any, Run | None]:
        token = outcomes.lease_token(run)
        current = run
        for _ in range(machine.MAX_REDECISIONS):
            try:
                transition = decide(current, self.clock.now())
            except LeaseLost:
                break
            try:
                stored: Run = yield Write(transition)
            except ConflictError as conflict:
                if not outcomes.still_leased(conflict.current, token):
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
    ) -> Generator[Request, Any, Run | None]:
        ctx.log.error("storage refused the outcome: %s; failing the run", exc)
        try:
            stored: Run = yield Write(outcomes.refused_outcome(run, token, exc, self.clock.now()))
        except (ConflictError, StorageError) as again:
            ctx.log.error("could not record the failure either: %s", again)
            return None
        return stored

    def _follow_up(self, run: Run, ctx: TaskContext) -> Generator[Request, Any, None]:
        """Log the outcome, publish the next wakeup, free keys and resume waiters.

        The outcome is recorded by now, so a follow-up that fails is logged and left to
        maintenance (which publishes due runs and polls waits); the message still counts
        as executed."""
        outcomes.log_outcome(run, ctx)
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
