"""The decisions of the per-message path (:mod:`runlane_sqs.engine.message`).

Nothing here sends a request, reads a clock or logs: these functions turn what happened
(a claimed run, a handler's result or exception) and the time given to them into the
transitions and follow-ups the path then asks its driver to write.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum

from runlane_sqs.core import machine, parking, waits
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import (
    CodecError,
    InvalidPayloadError,
    LeaseLost,
    StepError,
    ValueUnreadable,
)
from runlane_sqs.core.groups import GroupFailed
from runlane_sqs.core.limits import MAX_TRACEBACK_CHARS
from runlane_sqs.core.machine import Skip, Transition
from runlane_sqs.core.model import JSON, Failure, Run, RunStatus, Slot, Wait, new_lease_token
from runlane_sqs.core.redaction import Redact, apply_redaction
from runlane_sqs.core.replay import HistoryDiverged
from runlane_sqs.core.retry import RetryDecision, qualified_name
from runlane_sqs.engine.context import WaitRequested
from runlane_sqs.engine.tasks import Task
from runlane_sqs.ports.keys import KeyKind

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


def keys_to_release(run: Run) -> list[tuple[KeyKind, str]]:
    """The keys a finished run no longer holds (its idempotency key only on failure)."""
    keys: list[tuple[KeyKind, str]] = []
    if run.idempotency_key is not None and run.status is RunStatus.FAILED:
        keys.append((KeyKind.IDEMPOTENCY, run.idempotency_key))
    if run.singleton_key is not None and run.status.is_terminal:
        keys.append((KeyKind.SINGLETON, run.singleton_key))
    return keys


def finishing_needs_storage(run: Run) -> bool:
    """Whether a finished run has keys to free, waiters to resume, a turn to hand on or
    a group to move on."""
    return (
        run.watched
        or bool(keys_to_release(run))
        or run.ordering_key is not None
        or run.group_id is not None
    )


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
    (the run is parked), or a failure the retry policy decides on."""
    diverged = _diverged_in(exc)
    if diverged is not None:
        details = diverged.details()
        return lambda run, now: parking.park_diverged(run, token=token, now=now, details=details)
    wait = exc.wait if isinstance(exc, WaitRequested) else _wait_in(exc)
    if wait is not None:
        return _decide_release(config, wait, token)
    retryable = task.retry.is_retryable(exc) and not isinstance(
        exc, StepError | InvalidPayloadError | GroupFailed | ValueUnreadable | CodecError
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
