"""The decisions of the per-message path (:mod:`runlane_sqs.engine.message`).

Nothing here sends a request or reads a clock: these functions turn what happened (a
claimed run, a handler's result or exception) and the time given to them into the
transitions and follow-ups the path then asks its driver to write.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from runlane_sqs.core import machine, waits
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import InvalidPayloadError, LeaseLost, StepError
from runlane_sqs.core.limits import MAX_TRACEBACK_CHARS
from runlane_sqs.core.machine import Skip, SkipReason, Transition
from runlane_sqs.core.model import Failure, Run, RunStatus, Slot, Wait
from runlane_sqs.core.names import new_lease_token
from runlane_sqs.core.payload import encode_json
from runlane_sqs.core.redaction import Redact, apply_redaction, shortened
from runlane_sqs.core.retry import RetryDecision, qualified_name
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.engine.context import TaskContext, WaitRequested, run_logger
from runlane_sqs.engine.tasks import Task

if TYPE_CHECKING:
    from runlane_sqs.engine.context import AttemptServices

log = logging.getLogger("runlane_sqs.worker")

Decide = Callable[[Run, datetime], Transition]
"""Decides an attempt's outcome transition from the latest stored run and the time."""


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


class FollowUp(StrEnum):
    """What an executor does after recording an outcome."""

    FINISHED = "finished"
    """Terminal: free keys, resume runs waiting for this one."""
    PUBLISH = "publish"
    """Due again within SQS's delay limit: publish its next wakeup."""
    RECHECK = "recheck"
    """Released to wait: check once whether its target was decided meanwhile."""
    NONE = "none"
    """Maintenance publishes it when due."""


def follow_up(run: Run) -> FollowUp:
    if run.is_terminal:
        return FollowUp.FINISHED
    if run.status.is_runnable and run.due_at is not None and run.wake_at is not None:
        return FollowUp.PUBLISH
    if run.status is RunStatus.RELEASED and run.waiting is not None:
        return FollowUp.RECHECK
    return FollowUp.NONE


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


def claim(
    run: Run,
    task: Task,
    worker_id: str,
    *,
    now: datetime,
    config: RunlaneConfig,
    slots: tuple[Slot, ...] = (),
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
    )


def new_context(run: Run, worker_id: str, services: AttemptServices) -> TaskContext:
    return TaskContext(
        run_id=run.id,
        task=run.task,
        attempt=run.attempt,
        environment=run.environment,
        worker_id=worker_id,
        log=run_logger("runlane_sqs.task", run, worker_id),
        schedule_id=run.schedule_id,
        scheduled_for=run.scheduled_for,
        services=services,
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


def decide_returned(config: RunlaneConfig, result: object, token: str) -> Decide:
    """The handler returned ``result``: success, or a failure if it is not storable JSON."""
    try:
        encode_json(result, what="handler result", limit_bytes=config.payload_limit)
    except InvalidPayloadError as exc:
        failure = failure_from(exc, retryable=False, redact=config.redact)
        return lambda run, now: machine.record_failure(
            run, token=token, failure=failure, decision=RetryDecision(retry_at=None), now=now
        )
    return lambda run, now: machine.record_success(run, token=token, result=result, now=now)


def decide_raised(config: RunlaneConfig, task: Task, exc: BaseException, token: str) -> Decide:
    """The handler raised: a wait (release), or a failure the retry policy decides on."""
    wait = exc.wait if isinstance(exc, WaitRequested) else _wait_in(exc)
    if wait is not None:
        return _decide_release(config, wait, token)
    retryable = task.retry.is_retryable(exc) and not isinstance(
        exc, StepError | InvalidPayloadError
    )
    failure = failure_from(exc, retryable=retryable, redact=config.redact)

    def decide(run: Run, now: datetime) -> Transition:
        decision = task.retry.decide(run.failures + 1, now, retryable=retryable)
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


def lease_token(run: Run) -> str:
    if run.lease is None:
        raise LeaseLost(run.id)
    return run.lease.token


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
