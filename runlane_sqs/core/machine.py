"""The run state machine: every transition is decided here from (run, input, now).

Nothing in this module performs I/O or reads a clock. A decision is a
:class:`Transition` (the run before, the run after, the events to append and the
lease token the write is fenced on) or a :class:`Skip` that says why nothing happens.
Adapters turn a transition into one conditional write.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from runlane_sqs.core.durations import truncate_ms
from runlane_sqs.core.model import (
    JSON,
    LEASED_STATUSES,
    EventType,
    Failure,
    Lease,
    Run,
    RunEvent,
    RunStatus,
)
from runlane_sqs.core.retry import RetryDecision
from runlane_sqs.errors import IllegalTransition, LeaseLost


class SkipReason(StrEnum):
    """Why a wakeup led to no execution. Every skipped wakeup is acknowledged."""

    MALFORMED = "malformed"
    """The message is not a wakeup this version understands."""
    FOREIGN_ENVIRONMENT = "foreign_environment"
    """The wakeup names another environment."""
    UNKNOWN_RUN = "unknown_run"
    """No such run is stored."""
    TERMINAL = "terminal"
    """The run already finished."""
    LEASED = "leased"
    """An attempt holds the lease; maintenance handles it if the lease expires."""
    NOT_DUE = "not_due"
    """The run is waiting for a later time; maintenance republishes it when due."""
    CLAIM_LOST = "claim_lost"
    """Another worker claimed the run first."""


@dataclass(frozen=True, slots=True)
class Skip:
    reason: SkipReason


@dataclass(frozen=True, slots=True)
class Transition:
    """One state change: written as a single conditional write.

    The write succeeds only if the stored run still has ``before.seq`` and, when
    ``fence`` is set, still carries that lease token.
    """

    before: Run
    after: Run
    events: tuple[RunEvent, ...]
    fence: str | None = None

    @property
    def run_id(self) -> str:
        return self.after.id


def _events(
    run: Run, now: datetime, *specs: tuple[EventType, dict[str, JSON]]
) -> tuple[RunEvent, ...]:
    return tuple(
        RunEvent(seq=run.seq + i, type=kind, at=now, attempt=run.attempt, data=data)
        for i, (kind, data) in enumerate(specs, start=1)
    )


def _advance(
    before: Run,
    now: datetime,
    specs: list[tuple[EventType, dict[str, JSON]]],
    fence: str | None,
    **changes: object,
) -> Transition:
    events = _events(
        before.with_changes(attempt=changes.get("attempt", before.attempt)), now, *specs
    )
    after = before.with_changes(
        seq=before.seq + len(events), updated_at=now, created=False, **changes
    )
    return Transition(before=before, after=after, events=events, fence=fence)


def new_run(
    *,
    run_id: str,
    environment: str,
    task: str,
    queue: str,
    payload: JSON,
    now: datetime,
    due_at: datetime | None = None,
    idempotency_key: str | None = None,
    singleton_key: str | None = None,
) -> tuple[Run, RunEvent]:
    """A freshly triggered run and its first event."""
    now = truncate_ms(now)
    run = Run(
        id=run_id,
        environment=environment,
        task=task,
        queue=queue,
        status=RunStatus.QUEUED,
        payload=payload,
        created_at=now,
        updated_at=now,
        seq=1,
        due_at=truncate_ms(due_at) if due_at is not None else now,
        idempotency_key=idempotency_key,
        singleton_key=singleton_key,
        created=True,
    )
    data: dict[str, JSON] = {}
    if due_at is not None and due_at > now:
        data["due_at"] = truncate_ms(due_at).isoformat()
    return run, RunEvent(seq=1, type=EventType.TRIGGERED, at=now, attempt=0, data=data)


def claim_lease(
    run: Run, *, now: datetime, owner: str, token: str, duration: timedelta
) -> Transition | Skip:
    """Start the next attempt if the run is runnable and due."""
    if run.status.is_terminal:
        return Skip(SkipReason.TERMINAL)
    if run.status in LEASED_STATUSES:
        return Skip(SkipReason.LEASED)
    if not run.is_due(now):
        return Skip(SkipReason.NOT_DUE)
    now = truncate_ms(now)
    attempt = run.attempt + 1
    lease = Lease(owner=owner, token=token, expires_at=truncate_ms(now + duration))
    return _advance(
        run,
        now,
        [(EventType.STARTED, {"worker": owner})],
        fence=None,
        status=RunStatus.RUNNING,
        attempt=attempt,
        lease=lease,
        due_at=None,
    )


def _require_lease(run: Run, token: str) -> None:
    if run.status not in LEASED_STATUSES or run.lease is None or run.lease.token != token:
        raise LeaseLost(run.id)


def renew_lease(run: Run, *, token: str, now: datetime, duration: timedelta) -> Lease:
    """The extended lease a heartbeat writes (heartbeats append no event)."""
    _require_lease(run, token)
    assert run.lease is not None
    return Lease(owner=run.lease.owner, token=token, expires_at=truncate_ms(now + duration))


def record_success(run: Run, *, token: str, result: JSON, now: datetime) -> Transition:
    """The attempt returned ``result``."""
    _require_lease(run, token)
    if run.status is not RunStatus.RUNNING:
        raise IllegalTransition(f"run {run.id} is {run.status}; success needs running")
    return _advance(
        run,
        truncate_ms(now),
        [(EventType.SUCCEEDED, {})],
        fence=token,
        status=RunStatus.SUCCEEDED,
        result=result,
        lease=None,
        due_at=None,
    )


def record_failure(
    run: Run, *, token: str, failure: Failure, decision: RetryDecision, now: datetime
) -> Transition:
    """The attempt raised; ``decision`` (from the retry policy) says what follows."""
    _require_lease(run, token)
    if run.status is not RunStatus.RUNNING:
        raise IllegalTransition(f"run {run.id} is {run.status}; failure needs running")
    now = truncate_ms(now)
    data: dict[str, JSON] = {"failure": failure.to_json()}
    if decision.retry_at is not None:
        retry_at = truncate_ms(decision.retry_at)
        data["retry_at"] = retry_at.isoformat()
        return _advance(
            run,
            now,
            [(EventType.ATTEMPT_FAILED, data)],
            fence=token,
            status=RunStatus.RETRYING,
            failure=failure,
            lease=None,
            due_at=retry_at,
        )
    return _advance(
        run,
        now,
        [(EventType.ATTEMPT_FAILED, data), (EventType.FAILED, {"attempts": run.attempt})],
        fence=token,
        status=RunStatus.FAILED,
        failure=failure,
        lease=None,
        due_at=None,
    )


def expire_lease(run: Run, *, now: datetime) -> Transition | Skip:
    """Make a run whose lease expired runnable again as the same run."""
    if run.status.is_terminal:
        return Skip(SkipReason.TERMINAL)
    if run.status is not RunStatus.RUNNING or run.lease is None or run.lease.is_live(now):
        return Skip(SkipReason.LEASED if run.lease else SkipReason.NOT_DUE)
    now = truncate_ms(now)
    return _advance(
        run,
        now,
        [(EventType.LEASE_EXPIRED, {"worker": run.lease.owner})],
        fence=run.lease.token,
        status=RunStatus.QUEUED,
        lease=None,
        due_at=now,
    )
