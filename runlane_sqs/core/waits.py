"""Waits without failing: release, resume and durable steps, decided without I/O.

A release ends the attempt with no failure and no retry cost; the run is ``released``
and waits for a time, a signal, a token or another run. A resume writes the wait's
result into the run (``wait_results``) and makes it runnable; the next attempt starts
the handler from the beginning and finds the result at the same wait.
"""

from __future__ import annotations

from datetime import datetime

from runlane_sqs.core.clock import truncate_ms
from runlane_sqs.core.errors import IllegalTransition
from runlane_sqs.core.machine import (
    RepublishPolicy,
    Skip,
    SkipReason,
    Transition,
    cancelled_after_attempt,
    eager_review_at,
    eager_wake_at,
    require_lease,
    transition,
)
from runlane_sqs.core.model import (
    JSON,
    LEASED_STATUSES,
    EventType,
    Run,
    RunStatus,
    Wait,
    WaitKind,
)


def wait_name(kind: WaitKind, target: str | None, occurrence: int) -> str:
    """The name of the ``occurrence``-th wait of this kind and target in an attempt."""
    return f"{kind.value}:{target or ''}#{occurrence}"


def release(
    run: Run, *, token: str, wait: Wait, now: datetime, republish: RepublishPolicy
) -> Transition:
    """End the attempt without failure; the run waits for ``wait``.

    Time waits (and signal waits with a timeout) are due at ``wait.until``; token and run
    waits have no due time and are polled by maintenance from ``republish.after`` on, in
    case the resume that should wake them was missed.
    """
    require_lease(run, token)
    now = truncate_ms(now)
    if run.status is RunStatus.CANCEL_REQUESTED:
        return cancelled_after_attempt(run, now, token, "released")
    until = truncate_ms(wait.until) if wait.until is not None else None
    review_at = None
    if wait.kind is WaitKind.TIME:
        assert until is not None
        wake_at = eager_wake_at(until, now, republish)
        review_at = eager_review_at(until, now, republish)
    elif wait.kind in (WaitKind.TOKEN, WaitKind.RUN):
        wake_at = republish.next_wake(now, 0)
    elif until is not None:  # a signal wait with a timeout: wake up at the timeout
        wake_at = eager_wake_at(until, now, republish)
    else:
        wake_at = None
    return transition(
        run,
        now,
        [(EventType.RELEASED, {"wait": wait.to_json()})],
        token,
        status=RunStatus.RELEASED,
        waiting=Wait(wait.kind, wait.name, wait.target, until),
        due_at=until,
        wake_at=truncate_ms(wake_at) if wake_at else None,
        review_at=truncate_ms(review_at) if review_at else None,
        publishes=0,
        lease=None,
        deadline_at=None,
        lease_losses=0,
    )


def resume(
    run: Run,
    *,
    wait: Wait,
    result: dict[str, JSON],
    event: EventType,
    data: dict[str, JSON],
    now: datetime,
    republish: RepublishPolicy,
) -> Transition | Skip:
    """The awaited thing happened: record ``result`` at the wait and make the run runnable.

    Skipped unless the run is still released at that very wait (a resume that lost the
    race to another resume, a timeout or a cancellation changes nothing).
    """
    if run.status.is_terminal:
        return Skip(SkipReason.TERMINAL)
    if run.status is not RunStatus.RELEASED or run.waiting is None or run.waiting.name != wait.name:
        return Skip(SkipReason.NOT_DUE)
    now = truncate_ms(now)
    return transition(
        run,
        now,
        [(event, data)],
        None,
        status=RunStatus.QUEUED,
        waiting=None,
        wait_results={**run.wait_results, wait.name: result},
        due_at=now,
        wake_at=truncate_ms(republish.next_wake(now, 0)),
        publishes=0,
    )


def poll_later(run: Run, *, now: datetime, policy: RepublishPolicy) -> Transition | Skip:
    """A run waiting on a token or a run whose target has not decided yet: look again
    later (a write with no event, backing off like republishing)."""
    if run.status is not RunStatus.RELEASED or run.waiting is None:
        return Skip(SkipReason.NOT_DUE)
    now = truncate_ms(now)
    return Transition(
        before=run,
        after=run.with_changes(
            wake_at=truncate_ms(policy.next_wake(now, run.publishes + 1)),
            publishes=run.publishes + 1,
            created=False,
        ),
        events=(),
        guard=("publishes",),
    )


def step_recorded_under(run: Run, *, token: str, name: str) -> bool:
    """Whether ``run`` holds step ``name`` while the lease ``token`` is still its own: that
    attempt's write of the step landed (an attempt records a name once), though its answer
    may have been lost and the run moved on since (a lease renewed, a cancel requested)."""
    return (
        name in run.steps
        and run.status in LEASED_STATUSES
        and run.lease is not None
        and run.lease.token == token
    )


def record_step(run: Run, *, token: str, name: str, value: JSON, now: datetime) -> Transition:
    """Record a durable step under the attempt's lease: ``value`` is its result and call
    site (``{"value": ..., "site": ...}``) as kept (:mod:`runlane_sqs.core.values`)."""
    require_lease(run, token)
    if name in run.steps:
        raise IllegalTransition(f"step {name!r} of run {run.id} is already recorded")
    now = truncate_ms(now)
    return transition(
        run,
        now,
        [(EventType.STEP_RECORDED, {"step": name})],
        token,
        steps={**run.steps, name: value},
    )
