"""One wakeup in, at most one attempt out: the per-message path shared by every worker.

parse -> re-read the run -> claim the lease (conditional write) -> run the handler
-> record the outcome under the lease token. Anything that is not a runnable, due run
of this environment is acknowledged and ignored.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING

from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from runlane_sqs.attempt import AttemptRuntime
from runlane_sqs.context import StepError, TaskContext, WaitRequested, run_logger
from runlane_sqs.core import machine, waits
from runlane_sqs.core.machine import Skip, SkipReason, Transition
from runlane_sqs.core.model import Failure, Run, RunStatus, Wait
from runlane_sqs.core.names import new_lease_token
from runlane_sqs.core.payload import encode_json
from runlane_sqs.core.retry import RetryDecision, qualified_name
from runlane_sqs.core.wakeup import MalformedWakeup, Wakeup, parse_wakeup
from runlane_sqs.errors import (
    ConflictError,
    InvalidPayloadError,
    LeaseLost,
    StorageError,
    StorageUnavailable,
)
from runlane_sqs.leases import LeaseKeeper
from runlane_sqs.limits import MAX_TRACEBACK_CHARS
from runlane_sqs.ports import ReceivedWakeup
from runlane_sqs.resuming import resume_one, target_resumption
from runlane_sqs.tasks import Task

if TYPE_CHECKING:
    from runlane_sqs.app import Runlane

log = logging.getLogger("runlane_sqs.worker")

_storage_retry = retry(
    retry=retry_if_exception_type(StorageUnavailable),
    stop=stop_after_attempt(5),
    wait=wait_exponential(multiplier=0.2, max=5),
    reraise=True,
)


class Disposition(StrEnum):
    """What became of one message."""

    EXECUTED = "executed"
    """An attempt ran; delete the message."""
    SKIPPED = "skipped"
    """A stale, foreign, unknown or malformed hint; delete the message."""
    DEFERRED = "deferred"
    """Could not be handled now (unknown task, storage down); leave it for redelivery."""


def failure_from(exc: BaseException, *, retryable: bool) -> Failure:
    text = "".join(traceback.format_exception(exc))
    return Failure(
        type=qualified_name(exc),
        message=str(exc)[:1000],
        traceback=text[-MAX_TRACEBACK_CHARS:],
        retryable=retryable,
    )


class Executor:
    """Handles wakeups for one worker identity."""

    def __init__(self, app: Runlane, worker_id: str, leases: LeaseKeeper) -> None:
        self.app = app
        self.worker_id = worker_id
        self.leases = leases

    def handle(self, message: ReceivedWakeup) -> Disposition:
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
            return Disposition.SKIPPED
        try:
            return self._handle(wakeup)
        except StorageUnavailable as exc:
            log.warning(
                "storage unavailable, leaving wakeup for redelivery: %s",
                exc,
                extra={"run_id": wakeup.run_id, "worker_id": self.worker_id},
            )
            return Disposition.DEFERRED

    def _skip(self, wakeup: Wakeup, reason: SkipReason, run: Run | None = None) -> Disposition:
        extra: dict[str, object] = {
            "run_id": wakeup.run_id,
            "reason": reason.value,
            "worker_id": self.worker_id,
        }
        if run is not None:
            extra.update(task=run.task, attempt=run.attempt)
        log.info("ignoring wakeup for run %s: %s", wakeup.run_id, reason.value, extra=extra)
        return Disposition.SKIPPED

    def _handle(self, wakeup: Wakeup) -> Disposition:
        app = self.app
        if wakeup.environment != app.config.environment:
            return self._skip(wakeup, SkipReason.FOREIGN_ENVIRONMENT)
        run = _storage_retry(app.store.get_run)(wakeup.run_id)
        if run is None:
            return self._skip(wakeup, SkipReason.UNKNOWN_RUN)
        task = app.tasks.get(run.task)
        if task is None:
            log.error(
                "run %s names task %r, which this worker does not register; leaving the "
                "wakeup for a worker that does (or the dead-letter queue)",
                run.id,
                run.task,
                extra={"run_id": run.id, "task": run.task, "worker_id": self.worker_id},
            )
            return Disposition.DEFERRED
        decision = machine.claim_lease(
            run,
            now=app.clock.now(),
            owner=self.worker_id,
            token=new_lease_token(),
            duration=app.config.lease_duration,
            timeout=task.timeout,
        )
        if isinstance(decision, Skip):
            return self._skip(wakeup, decision.reason, run)
        try:
            claimed = _storage_retry(app.store.apply)(decision)
        except ConflictError:
            return self._skip(wakeup, SkipReason.CLAIM_LOST, run)
        self.execute(task, claimed)
        return Disposition.EXECUTED

    def execute(self, task: Task, run: Run) -> Run | None:
        """Run one attempt of a claimed run and record its outcome. Returns the stored run."""
        token = _token(run)
        ctx = TaskContext(
            run_id=run.id,
            task=run.task,
            attempt=run.attempt,
            environment=run.environment,
            worker_id=self.worker_id,
            log=run_logger("runlane_sqs.task", run, self.worker_id),
            services=AttemptRuntime(self.app, self.leases, run, token),
        )
        ctx.log.info("attempt %d started", run.attempt)
        self.leases.track(run, ctx)
        decide: Callable[[Run], Transition]
        try:
            result = call_handler(task, ctx, run.payload)
            decide = self._success(result, token)
        except WaitRequested as wait:
            decide = self._release(wait.wait, token)
        except BaseException as exc:  # SystemExit/KeyboardInterrupt from a handler too
            wait_request = _wait_in(exc)
            if wait_request is not None:
                decide = self._release(wait_request.wait, token)
            else:
                decide = self._failure(task, exc, token)
        finally:
            tracked = self.leases.untrack(run.id)
        latest, lost = tracked if tracked else (run, False)
        if lost:
            ctx.log.warning(
                "attempt %d finished after its lease was lost; outcome discarded", run.attempt
            )
            return None
        stored = self._record(latest, decide, ctx)
        if stored is not None:
            self._after(stored, task, ctx)
        return stored

    def _success(self, result: object, token: str) -> Callable[[Run], Transition]:
        app = self.app
        try:
            encode_json(result, what="handler result", limit_bytes=app.config.payload_limit)
        except InvalidPayloadError as exc:
            failure = failure_from(exc, retryable=False)
            return lambda run: machine.record_failure(
                run,
                token=token,
                failure=failure,
                decision=RetryDecision(retry_at=None),
                now=app.clock.now(),
            )
        return lambda run: machine.record_success(
            run, token=token, result=result, now=app.clock.now()
        )

    def _release(self, wait: Wait, token: str) -> Callable[[Run], Transition]:
        app = self.app
        return lambda run: waits.release(
            run, token=token, wait=wait, now=app.clock.now(), republish=app.config.republish
        )

    def _failure(self, task: Task, exc: BaseException, token: str) -> Callable[[Run], Transition]:
        app = self.app
        retryable = task.retry.is_retryable(exc) and not isinstance(
            exc, StepError | InvalidPayloadError
        )
        failure = failure_from(exc, retryable=retryable)

        def decide(run: Run) -> Transition:
            now = app.clock.now()
            decision = task.retry.decide(run.failures + 1, now, retryable=retryable)
            return machine.record_failure(
                run,
                token=token,
                failure=failure,
                decision=decision,
                now=now,
                republish=app.config.republish,
            )

        return decide

    def _record(
        self, run: Run, decide: Callable[[Run], Transition], ctx: TaskContext
    ) -> Run | None:
        token = _token(run)
        current: Run | None = run
        for _ in range(machine.MAX_REDECISIONS):
            assert current is not None
            try:
                transition = decide(current)
            except LeaseLost:
                break
            try:
                return _storage_retry(self.app.store.apply)(transition)
            except ConflictError as conflict:
                current = conflict.current
                if current is None or current.lease is None or current.lease.token != token:
                    break
            except StorageError as exc:
                if isinstance(exc, StorageUnavailable):
                    raise
                # e.g. the item would outgrow 400 KB: record a small failure instead
                return self._record_refused_outcome(current, token, exc, ctx)
        ctx.log.warning("the lease was lost before the outcome was written; outcome discarded")
        return None

    def _record_refused_outcome(
        self, run: Run, token: str, exc: StorageError, ctx: TaskContext
    ) -> Run | None:
        ctx.log.error("storage refused the outcome: %s; failing the run", exc)
        failure = Failure(type=qualified_name(exc), message=str(exc)[:500], retryable=False)
        transition = machine.record_failure(
            run,
            token=token,
            failure=failure,
            decision=RetryDecision(retry_at=None),
            now=self.app.clock.now(),
        )
        try:
            return self.app.store.apply(transition)
        except (ConflictError, StorageError) as again:
            ctx.log.error("could not record the failure either: %s", again)
            return None

    def _after(self, run: Run, task: Task, ctx: TaskContext) -> None:
        """Log the outcome, schedule the next wakeup, resume what waits for a finished run."""
        app = self.app
        _log_outcome(run, ctx)
        if run.is_terminal:
            app.after_finished(run)
        elif run.status.is_runnable and run.due_at is not None and run.wake_at is not None:
            app.publish(run, delay=run.due_at - app.clock.now())
        elif run.status is RunStatus.RELEASED and run.waiting is not None:
            recheck_target(app, run)


def _log_outcome(run: Run, ctx: TaskContext) -> None:
    if run.status is RunStatus.SUCCEEDED:
        ctx.log.info("attempt %d succeeded", run.attempt)
    elif run.status is RunStatus.FAILED:
        reason = run.failure.message if run.failure else ""
        ctx.log.warning("attempt %d failed; run failed: %s", run.attempt, reason)
    elif run.status is RunStatus.RETRYING:
        due = run.due_at.isoformat() if run.due_at else "now"
        ctx.log.info("attempt %d failed; retry due at %s", run.attempt, due)
    elif run.status is RunStatus.RELEASED and run.waiting is not None:
        ctx.log.info("attempt %d released; waiting for %s", run.attempt, run.waiting.kind.value)


def recheck_target(app: Runlane, run: Run) -> None:
    """A token decided (or a run finished) just before this run's release was written may
    have resumed waiters without seeing this one: look once more, resume it if so."""
    if run.waiting is None:
        return
    resumption = target_resumption(app, run.waiting)
    if resumption is not None:
        resumed = resume_one(app, run, resumption)
        if resumed is not None:
            app.publish(resumed)


def _wait_in(exc: BaseException) -> WaitRequested | None:
    """A wait raised inside an exception group (``asyncio.TaskGroup``) is still a wait."""
    if isinstance(exc, BaseExceptionGroup):
        waits_only = exc.subgroup(WaitRequested)
        if waits_only is not None and exc.split(WaitRequested)[1] is None:
            first = waits_only.exceptions[0]
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            return first if isinstance(first, WaitRequested) else None
    return None


def call_handler(task: Task, ctx: TaskContext, payload: object) -> object:
    """Call the handler; an ``async def`` handler runs to completion on a fresh event loop."""
    if task.is_async:
        return asyncio.run(task.fn(ctx, payload))
    return task.fn(ctx, payload)


def _token(run: Run) -> str:
    if run.lease is None:
        raise LeaseLost(run.id)
    return run.lease.token
