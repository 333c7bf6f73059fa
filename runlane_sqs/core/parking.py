"""Parking: what happens to a run whose task the receiving worker does not register.

A wakeup for such a run is first left for redelivery, so that another worker on the
queue (one that registers the task, during a rolling deploy) can take it. Once the
message has been received ``park_after_receives`` times, the run is *parked*: its
status becomes ``parked``, it leaves the agenda (maintenance stops republishing it) and
the wakeup is deleted. Nothing else about the run changes, so unparking returns it to
the runnable status it had, with its wait, due time and results intact.

A parked run is unparked by a worker that registers its task and consumes its queue
(when it starts), by a maintenance pass whose app registers the task (at most once per
``republish_after``), or by an operator (``runs unpark``); or it is cancelled.

A run is also parked, ``history_diverged``, when an attempt meets code that no longer
matches its history (:func:`park_diverged`), and ``payload_mismatch`` when its stored
payload no longer validates against its task's payload type (:func:`park_mismatched`);
only an operator unparks those (:data:`OPERATOR_UNPARKS`). An attempt that meets either
under a cancel request cancels the run instead.
Nothing in this module performs I/O or reads a clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from runlane_sqs.core.clock import truncate_ms
from runlane_sqs.core.errors import IllegalTransition
from runlane_sqs.core.machine import (
    RepublishPolicy,
    Skip,
    SkipReason,
    Transition,
    cancelled_after_attempt,
    require_lease,
    transition,
)
from runlane_sqs.core.model import JSON, LEASED_STATUSES, EventType, Run, RunStatus
from runlane_sqs.core.replay import DIVERGED

PAYLOAD_MISMATCH = "payload_mismatch"
"""Why a run whose stored payload no longer validates is parked."""
OPERATOR_UNPARKS = frozenset({DIVERGED, PAYLOAD_MISMATCH})
"""Parked for these, a run waits for an operator: the code every worker and maintenance
pass runs is the code that stopped it."""
DEFAULT_PARK_AFTER_RECEIVES = 3
"""Receives of one wakeup by workers that do not register the task before the run is
parked (below the dead-letter queue's ``maxReceiveCount`` of 5)."""


def park_unknown_task(
    run: Run, *, now: datetime, worker: str, receives: int, park_after: int
) -> Transition | Skip | None:
    """A worker that does not register ``run.task`` received its wakeup.

    Returns the parking transition; a :class:`Skip` when a worker that knows the task
    would not run it either (finished, leased, not yet due, already parked); or ``None``
    to leave the wakeup for redelivery (fewer than ``park_after`` receives so far).
    """
    if run.status.is_terminal:
        return Skip(SkipReason.TERMINAL)
    if run.status in LEASED_STATUSES:
        return Skip(SkipReason.LEASED)
    if run.status is RunStatus.PARKED or not run.is_due(now):
        return Skip(SkipReason.NOT_DUE)
    if receives < park_after:
        return None
    data: dict[str, JSON] = {
        "reason": SkipReason.UNKNOWN_TASK.value,
        "worker": worker,
        "receives": receives,
    }
    return transition(
        run,
        truncate_ms(now),
        [(EventType.PARKED, data)],
        None,
        status=RunStatus.PARKED,
        parked_from=run.status,
        parked_reason=SkipReason.UNKNOWN_TASK.value,
        wake_at=None,
        publishes=0,
    )


def park_diverged(run: Run, *, token: str, now: datetime, details: dict[str, JSON]) -> Transition:
    """The attempt holding ``token`` met code that no longer matches the run's history
    (:mod:`runlane_sqs.core.replay`): it ends, without a failure and before the call the
    history did not allow did anything, and the run is parked until an operator unparks it
    (once code that matches is deployed) or reruns it. No worker or maintenance pass
    unparks it by itself: the code they run is the code that diverged.

    A pending cancel request turns it into cancelled, as any other outcome of the
    attempt: the operator asked the run to stop, so it is not kept for an unpark; the
    ``cancelled`` event holds the divergence (``after: history_diverged``)."""
    return _park_attempt(run, token, now, DIVERGED, details)


def park_mismatched(run: Run, *, token: str, now: datetime, details: dict[str, JSON]) -> Transition:
    """The attempt holding ``token`` found the run's stored payload no longer valid for its
    task's payload type (the type changed while the run waited): it ends before the
    handler is called, without a failure, and the run is parked until an operator
    unparks it (once code that reads the payload is deployed) or cancels it; under a
    cancel request it is cancelled. ``details`` name each field that no longer
    validates."""
    return _park_attempt(run, token, now, PAYLOAD_MISMATCH, details)


def _park_attempt(
    run: Run, token: str, now: datetime, reason: str, details: dict[str, JSON]
) -> Transition:
    require_lease(run, token)
    assert run.lease is not None
    now = truncate_ms(now)
    if run.status is RunStatus.CANCEL_REQUESTED:
        return cancelled_after_attempt(run, now, token, reason, details)
    data: dict[str, JSON] = {"reason": reason, "worker": run.lease.owner, **details}
    return transition(
        run,
        now,
        [(EventType.PARKED, data)],
        token,
        status=RunStatus.PARKED,
        parked_from=RunStatus.RELEASED,
        parked_reason=reason,
        lease=None,
        deadline_at=None,
        due_at=now,
        wake_at=None,
        publishes=0,
        waiting=None,
    )


def unpark(
    run: Run, *, now: datetime, republish: RepublishPolicy, data: dict[str, JSON]
) -> Transition:
    """Make a parked run runnable again, as it was before it was parked; the caller
    publishes its wakeup (the agenda entry covers a publish that is lost).

    Raises :class:`IllegalTransition` if the run is not parked."""
    if run.status is not RunStatus.PARKED:
        raise IllegalTransition(f"run {run.id} is {run.status.value}, not parked")
    now = truncate_ms(now)
    return transition(
        run,
        now,
        [(EventType.UNPARKED, data)],
        None,
        status=run.parked_from or RunStatus.QUEUED,
        parked_from=None,
        parked_reason=None,
        due_at=run.due_at if run.due_at is not None and run.due_at <= now else now,
        wake_at=truncate_ms(republish.next_wake(now, 0)),
        publishes=0,
    )


def parked_long_enough(run: Run, *, now: datetime, interval: timedelta) -> bool:
    """Maintenance unparks a run at most once per ``interval``: a run that workers
    without its task park again is not churned on every pass."""
    return run.status is RunStatus.PARKED and run.updated_at + interval <= now
