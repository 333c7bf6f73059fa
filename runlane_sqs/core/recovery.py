"""Maintenance's decisions: repairs of the *same* run when delivery or ownership stopped.

Pure functions of (run, now, settings). A lifecycle change that won the race first is
never overwritten: every transition here is written conditioned on the sequence it was
decided on, and terminal runs are always skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from runlane_sqs.core import machine
from runlane_sqs.core.clock import truncate_ms
from runlane_sqs.core.machine import RepublishPolicy, Skip, SkipReason, Transition, fail_attempt
from runlane_sqs.core.model import EventType, Failure, Run, RunStatus
from runlane_sqs.core.retry import RetryPolicy

LEASE_LOST = "runlane.lease_lost"
"""Failure type of a run whose leases expired too many times in a row."""
ATTEMPT_TIMEOUT = "runlane.attempt_timeout"
"""Failure type of an attempt that passed its fixed deadline."""


@dataclass(frozen=True, slots=True)
class RecoverySettings:
    max_lease_losses: int = 3
    """Consecutive lease expiries after which the run fails with ``lease_lost``."""
    republish: RepublishPolicy = field(default_factory=RepublishPolicy)


@dataclass(frozen=True, slots=True)
class QueueLine:
    """How far a queue's consumers are known to have come: ``drained_at``, the latest
    time by which every wakeup visible in it had been received at least once (the queue
    was seen with no visible or delayed message, allowing for SQS's counts to settle;
    ``None``: not since maintenance began looking)."""

    drained_at: datetime | None = None

    def reached(self, line_at: datetime) -> bool:
        """Whether a wakeup that became visible at ``line_at`` has been received."""
        return self.drained_at is not None and self.drained_at >= line_at


def line_position(run: Run, policy: RepublishPolicy) -> datetime | None:
    """When the wakeup a runnable run waits on became visible in its queue: kept in
    ``line_at`` once a republish was held back, else ``wake_at`` less the time that
    wakeup is trusted (:meth:`RepublishPolicy.next_wake` from the publish that set it:
    ``after`` for a wakeup published with the run's change, doubling per republish).
    ``None``: no wakeup was published (``wake_at`` unset)."""
    if run.line_at is not None:
        return run.line_at
    if run.wake_at is None:
        return None
    trusted = policy.next_wake(run.wake_at, max(run.publishes - 1, 0)) - run.wake_at
    return run.wake_at - trusted


def held_in_line(
    line: QueueLine | None, line_at: datetime, now: datetime, policy: RepublishPolicy
) -> bool:
    """Whether a wakeup visible since ``line_at`` may still be waiting in line: its
    queue's ``line`` is known and has not reached it, and ``policy.max_after`` has not
    passed since (then it is republished anyway)."""
    return line is not None and not line.reached(line_at) and now - line_at < policy.max_after


def is_held(transition: Transition) -> bool:
    """Whether :func:`plan_publish` held the republish back (no wakeup to send)."""
    return transition.after.line_at is not None


def plan_publish(
    run: Run, *, now: datetime, policy: RepublishPolicy, line: QueueLine | None = None
) -> Transition | Skip:
    """A due runnable run gets a fresh wakeup; the write (no event) moves ``wake_at``
    forward so the next pass does not publish it again while this one is in flight.

    With its queue's ``line`` known, a run whose wakeup is only waiting in line (the
    queue has not been drained since it became visible) is not republished: the write
    moves ``wake_at`` on as a republish would and keeps the wakeup's place in
    ``line_at``, until the line reaches it or ``policy.max_after`` has passed since
    (docs/concepts.md, "Lost wakeups")."""
    if run.status.is_terminal:
        return Skip(SkipReason.TERMINAL)
    if not run.status.is_runnable:
        return Skip(SkipReason.LEASED)
    if run.due_at is None or (run.wake_at or run.due_at) > now:
        return Skip(SkipReason.NOT_DUE)
    now = truncate_ms(now)
    wake_at = policy.next_wake(now, run.publishes)
    line_at = line_position(run, policy) if line is not None else None
    if line_at is not None and held_in_line(line, line_at, now, policy):
        return Transition(
            before=run,
            after=run.with_changes(
                wake_at=truncate_ms(min(wake_at, line_at + policy.max_after)),
                line_at=line_at,
                publishes=run.publishes + 1,
                review_at=None,
                created=False,
            ),
            events=(),
            guard=("publishes",),
        )
    return Transition(
        before=run,
        after=run.with_changes(
            wake_at=truncate_ms(wake_at),
            line_at=None,
            publishes=run.publishes + 1,
            review_at=None,
            created=False,
        ),
        events=(),
        guard=("publishes",),
    )


def publish_failed(run: Run) -> Transition | Skip:
    """An eager publish failed: list the run as due now, so the next pass publishes it
    instead of waiting out the republish delay (a write with no event)."""
    if not run.status.is_runnable or run.wake_at is None:
        return Skip(SkipReason.NOT_DUE)
    return Transition(
        before=run,
        after=run.with_changes(wake_at=None, review_at=None, created=False),
        events=(),
        guard=("wake_at",),
    )


def relist(run: Run) -> Transition | None:
    """A run maintenance looked at early (at its ``review_at``) and found nothing to do
    for: list it at its agenda time instead (a write with no event, on the same
    sequence; docs/design/storage.md, "Indexes"). ``None`` when it is listed there
    already."""
    if run.review_at is None or run.is_terminal:
        return None
    return Transition(before=run, after=run.with_changes(review_at=None, created=False), events=())


def recover_lease(
    run: Run, *, now: datetime, retry: RetryPolicy | None, settings: RecoverySettings
) -> Transition | Skip:
    """What maintenance does with a leased run whose lease or deadline has passed.

    Order matters: a passed deadline is finalized as a timeout even when the lease has
    also expired (reacquiring first would lose the durable timeout); a pending cancel
    request is finalized once the lease is gone; otherwise an expired lease makes the
    same run runnable again, or fails it after too many losses in a row.
    ``retry`` is the task's policy (``None`` when this process does not know the task:
    the deadline then waits for a process that does).
    """
    lease = run.lease
    if run.status.is_terminal or lease is None:
        return Skip(SkipReason.TERMINAL if run.status.is_terminal else SkipReason.NOT_DUE)
    now = truncate_ms(now)
    if run.status is RunStatus.RUNNING and run.deadline_at is not None and run.deadline_at <= now:
        if retry is None:
            return Skip(SkipReason.UNKNOWN_TASK)
        return time_out_attempt(run, now=now, retry=retry, settings=settings)
    if lease.is_live(now):
        return Skip(SkipReason.LEASED)
    if run.status is RunStatus.CANCEL_REQUESTED:
        return _recovery(
            machine.transition(
                run,
                now,
                [(EventType.CANCELLED, {"after": "lease_expired", "worker": lease.owner})],
                lease.token,
                status=RunStatus.CANCELLED,
                lease=None,
                deadline_at=None,
            ),
            lease_expired=True,
        )
    return expire_lease(run, now=now, settings=settings)


def _recovery(transition: Transition, *, lease_expired: bool = False) -> Transition:
    """Mark ``transition`` as maintenance's. One decided because the lease expired is
    also guarded on the expiry it saw: a heartbeat that renewed the lease after this
    pass read it (from the index, a moment old) makes the write fail, so a live lease is
    never taken from a running attempt."""
    guard = ("lease_expires_at",) if lease_expired else ()
    return replace(transition, recovery=True, guard=transition.guard + guard)


def expire_lease(
    run: Run, *, now: datetime, settings: RecoverySettings | None = None
) -> Transition | Skip:
    """The lease expired: the same run becomes runnable (``lease_expired``), or fails
    with ``lease_lost`` when that has happened ``max_lease_losses`` times in a row."""
    lease = run.lease
    if run.status is not RunStatus.RUNNING or lease is None:
        return Skip(SkipReason.TERMINAL if run.is_terminal else SkipReason.NOT_DUE)
    if lease.is_live(now):
        return Skip(SkipReason.LEASED)
    settings = settings or RecoverySettings()
    now = truncate_ms(now)
    losses = run.lease_losses + 1
    expired = (EventType.LEASE_EXPIRED, {"worker": lease.owner, "losses": losses})
    ended = {"lease": None, "deadline_at": None, "lease_losses": losses}
    if losses >= settings.max_lease_losses:
        failure = Failure(
            type=LEASE_LOST,
            message=f"the lease expired {losses} times in a row; the worker probably died "
            "running this run (out of memory, killed)",
            retryable=False,
        )
        return _recovery(
            machine.transition(
                run,
                now,
                [expired, (EventType.FAILED, {"attempts": run.attempt})],
                lease.token,
                status=RunStatus.FAILED,
                failure=failure,
                due_at=None,
                **ended,
            ),
            lease_expired=True,
        )
    return _recovery(
        machine.transition(
            run,
            now,
            [expired],
            lease.token,
            status=RunStatus.QUEUED,
            due_at=now,
            wake_at=truncate_ms(settings.republish.next_wake(now, 0)),
            publishes=0,
            **ended,
        ),
        lease_expired=True,
    )


def time_out_attempt(
    run: Run, *, now: datetime, retry: RetryPolicy, settings: RecoverySettings
) -> Transition:
    """Record the attempt as timed out (fenced on its lease); the retry policy decides."""
    assert run.lease is not None and run.deadline_at is not None
    failure = Failure(
        type=ATTEMPT_TIMEOUT,
        message=f"attempt {run.attempt} passed its deadline {run.deadline_at.isoformat()}",
        retryable=True,
    )
    first = (EventType.ATTEMPT_TIMED_OUT, {"failure": failure.to_json()})
    decision = retry.decide(run.failures + 1, now)
    return _recovery(
        fail_attempt(run, now, first, failure, decision, run.lease.token, settings.republish)
    )
