"""The run state machine: what a transition is, and the run's own lifecycle.

A decision is a :class:`Transition` (the run before, the run after, the events to
append and the lease token the write is fenced on) or a :class:`Skip` that says why
nothing happens, always decided from (run, input, now) with no I/O and no clock read.
This module decides the lifecycle's transitions: creating a run, claiming and
renewing its lease, an attempt's success or failure, linking, cancelling. Each
capability's transitions are decided in the core module of its concept (recovery,
waits, slots, ordering, rates, rate_deploys, parking), and every one of them is built
with :func:`transition`. Adapters turn a transition into one conditional write.

**Claims with one write.** A worker that receives a wakeup with a
:class:`~runlane_sqs.core.wakeup.ClaimHint` writes the claim at once
(:class:`HintedClaim`): the write holds only if the stored run is still at the hinted
sequence, attempt and task, runnable, due, and waiting for nothing but a time (and,
when the hint says the run is listed early enough, still listed then: the claim leaves
its agenda entry where it is, see :meth:`HintedClaim.keeps_listing`). Those are exactly
the runs a read would have let the worker claim without more than a ``started`` event,
so the write is the claim :func:`claim_lease` decides on the stored run. A refused
write returns the stored run, and the worker decides on it as if it had read it
(docs/design/storage.md, "Claims").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from runlane_sqs.core.clock import truncate_ms
from runlane_sqs.core.errors import IllegalTransition, LeaseLost
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.limits import MAX_DELAY_SECONDS
from runlane_sqs.core.model import (
    JSON,
    LEASED_STATUSES,
    EventType,
    Failure,
    Lease,
    LinkKind,
    Run,
    RunEvent,
    RunStatus,
    ScheduleOrigin,
    Slot,
    WaitKind,
)
from runlane_sqs.core.retry import RetryDecision
from runlane_sqs.core.wakeup import ClaimHint

WAIT_TIMED_OUT_RESULT: dict[str, JSON] = {"status": "timed_out"}
"""The result a wait records when its timeout passes first."""


MAX_REDECISIONS = 5
"""Times a write that lost its condition is decided again on the stored run."""


class SkipReason(StrEnum):
    """Why a wakeup led to no execution. A skipped wakeup is acknowledged, except one of
    another environment, which is returned to its queue for that environment's workers
    (and one whose task this worker does not register, left until the run is parked)."""

    MALFORMED = "malformed"
    """The message is not a wakeup this version understands."""
    FOREIGN_ENVIRONMENT = "foreign_environment"
    """The wakeup names another environment (returned to the queue, not deleted)."""
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
    UNKNOWN_TASK = "unknown_task"
    """This process does not register the run's task, so it cannot apply its policy."""
    WAITING_FOR_SLOT = "waiting_for_slot"
    """The run waits for a concurrency slot; the write that frees one wakes it."""
    PINNED_ELSEWHERE = "pinned_elsewhere"
    """The run's task is pinned and the run started under another app version: its
    wakeup is sent again for a worker of that version."""


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
    guard: tuple[str, ...] = ()
    """Further state attributes (by storage name) that must still hold ``before``'s value:
    for writes that append no event and so do not advance ``seq``."""
    recovery: bool = False
    """Maintenance's write fenced on the token of an attempt it found expired or timed
    out: two passes can make the very same write, so a refused resend of it is never
    taken for this writer's own (``adapters/dynamodb/replays.py``), unlike a write fenced
    on the writer's own lease."""
    rewrites: tuple[str, ...] = ()
    """State attributes (by storage name) written even when ``before`` holds the same
    value: an attempt's last report riding on its outcome, whose stored value the
    writer may not have seen (:mod:`runlane_sqs.core.progress`)."""

    @property
    def run_id(self) -> str:
        return self.after.id


def transition(
    before: Run,
    now: datetime,
    specs: list[tuple[EventType, dict[str, JSON]]],
    fence: str | None,
    **changes: object,
) -> Transition:
    """The transition from ``before`` that appends one event per spec at ``now``, fenced
    on ``fence`` and applying ``changes`` to the run."""
    attempt = changes.get("attempt", before.attempt)
    assert isinstance(attempt, int)
    events = tuple(
        RunEvent(seq=before.seq + i, type=kind, at=now, attempt=attempt, data=data)
        for i, (kind, data) in enumerate(specs, start=1)
    )
    changes.setdefault("review_at", None)  # every state change ends an early look
    changes.setdefault("line_at", None)  # and the wait for a wakeup in line
    if changes.get("lease", before.lease) is None:
        changes["slots"] = ()  # slots are held by an attempt (core/slots.py)
    written: dict[str, Any] = {
        "seq": before.seq + len(events),
        "updated_at": now,
        "created": False,
        **changes,
    }
    after = replace(before, **written)
    return Transition(before=before, after=after, events=events, fence=fence)


def followed_by(first: Transition, then: Transition) -> Transition:
    """``first`` and then ``then`` (decided on ``first.after``) as one write, fenced as
    ``first`` is."""
    assert then.before == first.after and then.fence is None, "not a transition that follows"
    return replace(first, after=then.after, events=first.events + then.events)


@dataclass(frozen=True, slots=True)
class RepublishPolicy:
    """How long a published wakeup is trusted before maintenance publishes another.

    After maintenance's n-th publish for the same due run (counting from 0), the next
    one waits ``after * 2**n``, at most ``max_after``: 5, 10, 20, ... minutes by default,
    so a backlog that is merely slow is not flooded with duplicates.
    """

    after: timedelta = timedelta(minutes=5)
    max_after: timedelta = timedelta(hours=1)
    review_after: timedelta | None = None
    """With a wakeup published at once, when maintenance first looks at the run, past
    its due time: the lease duration, so the claim finds the run listed no later than
    its lease expires and leaves its agenda entry alone (``None``: at ``wake_at``)."""

    def next_wake(self, now: datetime, publishes: int) -> datetime:
        factor = 1 << min(publishes, 20)
        return now + min(self.after * factor, self.max_after)


def eager_wake_at(due_at: datetime, now: datetime, policy: RepublishPolicy) -> datetime | None:
    """``wake_at`` for a run whose wakeup is published right away (with an SQS delay).

    Wakeups due within ``MAX_DELAY_SECONDS`` are published at once with ``DelaySeconds``;
    maintenance looks again only if the run is still runnable ``policy.after`` past its
    due time. Later due times return ``None``: maintenance publishes them when due.
    """
    if due_at - now > timedelta(seconds=MAX_DELAY_SECONDS):
        return None
    return max(due_at, now) + policy.after


def eager_review_at(due_at: datetime, now: datetime, policy: RepublishPolicy) -> datetime | None:
    """``review_at`` for a run whose wakeup is published right away: its due time plus
    ``policy.review_after``, when that is earlier than its ``wake_at`` (else ``None``)."""
    wake = eager_wake_at(due_at, now, policy)
    if wake is None or policy.review_after is None:
        return None
    review = max(due_at, now) + policy.review_after
    return review if review < wake else None


def agenda_entry(run: Run) -> tuple[AgendaKind, datetime] | None:
    """Where the run must be listed on the agenda index at the latest, if anywhere."""
    if run.status.is_terminal:
        return None
    if run.status in LEASED_STATUSES and run.lease is not None:
        at = run.lease.expires_at
        if run.deadline_at is not None:
            at = min(at, run.deadline_at)
        return AgendaKind.RUN, at
    if run.status.is_runnable:
        wake = run.wake_at or run.due_at
        return (AgendaKind.RUN, wake) if wake is not None else None
    return None


def agenda_listing(run: Run) -> tuple[AgendaKind, datetime] | None:
    """Where and when the run is listed on the agenda: its :func:`agenda_entry`, at the
    entry's time or at the run's earlier ``review_at``. ``None``: not listed."""
    entry = agenda_entry(run)
    if entry is None:
        return None
    kind, at = entry
    review_at = run.review_at
    return (kind, review_at) if review_at is not None and review_at < at else entry


def listed_at(run: Run) -> datetime | None:
    """When the run is listed on the agenda (:func:`agenda_listing`)."""
    listing = agenda_listing(run)
    return listing[1] if listing is not None else None


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
    republish: RepublishPolicy | None = None,
    source: tuple[str, LinkKind, str, str] | None = None,
    schedule: ScheduleOrigin | None = None,
    retention: timedelta | None = None,
) -> tuple[Run, RunEvent]:
    """A freshly triggered run and its first event (kept for ``retention`` once finished).

    With ``republish`` the caller publishes the wakeup at once; maintenance looks again
    only if the run is still runnable ``republish.after`` past its due time.
    """
    now = truncate_ms(now)
    due = truncate_ms(due_at) if due_at is not None else now
    wake_at = eager_wake_at(due, now, republish) if republish else None
    review_at = eager_review_at(due, now, republish) if republish else None
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
        due_at=due,
        wake_at=truncate_ms(wake_at) if wake_at else None,
        review_at=truncate_ms(review_at) if review_at else None,
        idempotency_key=idempotency_key,
        singleton_key=singleton_key,
        source_run_id=source[0] if source else None,
        source_kind=source[1].value if source else None,
        schedule_id=schedule.schedule_id if schedule else None,
        scheduled_for=schedule.occurrence if schedule else None,
        retention=retention,
        created=True,
    )
    data: dict[str, JSON] = {}
    if source is not None:
        source_id, kind, actor, reason = source
        data.update({"source": source_id, "kind": kind.value, "actor": actor, "reason": reason})
    if schedule is not None:
        data.update(schedule.event_data())
    if due_at is not None and due_at > now:
        data["due_at"] = truncate_ms(due_at).isoformat()
    return run, RunEvent(seq=1, type=EventType.TRIGGERED, at=now, attempt=0, data=data)


def claim_lease(
    run: Run,
    *,
    now: datetime,
    owner: str,
    token: str,
    duration: timedelta,
    timeout: timedelta | None = None,
    slots: tuple[Slot, ...] = (),
    app_version: str | None = None,
) -> Transition | Skip:
    """Start the next attempt if the run is runnable and due, taking ``slots`` (its
    concurrency limits) in the same write. ``timeout`` (the task's fixed attempt timeout)
    sets the attempt's deadline; ``app_version`` (the claiming worker's) is recorded on
    the attempt, and on the run by its first attempt.
    """
    if run.status.is_terminal:
        return Skip(SkipReason.TERMINAL)
    if run.status in LEASED_STATUSES:
        return Skip(SkipReason.LEASED)
    if run.slot_wait is not None:
        return Skip(SkipReason.WAITING_FOR_SLOT)
    if not run.is_due(now):
        return Skip(SkipReason.NOT_DUE)
    now = truncate_ms(now)
    attempt = run.attempt + 1
    lease = Lease(owner=owner, token=token, expires_at=truncate_ms(now + duration))
    events: list[tuple[EventType, dict[str, JSON]]] = []
    results = run.wait_results
    waiting = run.waiting
    if waiting is not None and waiting.kind is not WaitKind.TIME:
        # a signal wait reached its timeout: the wait's result says so
        results = {**results, waiting.name: dict(WAIT_TIMED_OUT_RESULT)}
        events.append((EventType.WAIT_TIMED_OUT, {"wait": waiting.to_json()}))
    started: dict[str, JSON] = {"worker": owner}
    if app_version is not None:
        started["app_version"] = app_version
    events.append((EventType.STARTED, started))
    claim = transition(
        run,
        now,
        events,
        fence=None,
        status=RunStatus.RUNNING,
        attempt=attempt,
        lease=lease,
        slots=slots,
        due_at=None,
        wake_at=None,
        publishes=0,
        waiting=None,
        wait_results=results,
        deadline_at=truncate_ms(now + timeout) if timeout is not None else None,
        rate_start=None,
        app_version=app_version if attempt == 1 else run.app_version,
    )
    if run.debounce_key is not None or run.batch_key is not None:
        # a trigger that went to the run since the read changed its payload: decide again
        return replace(claim, guard=("collapsed",))
    return claim


def require_lease(run: Run, token: str) -> None:
    if run.status not in LEASED_STATUSES or run.lease is None or run.lease.token != token:
        raise LeaseLost(run.id)


def lease_token(run: Run) -> str:
    """The token of the lease ``run`` holds (:class:`LeaseLost` when it holds none)."""
    if run.lease is None:
        raise LeaseLost(run.id)
    return run.lease.token


def renew_lease(run: Run, *, token: str, now: datetime, duration: timedelta) -> Lease:
    """The extended lease a heartbeat writes (heartbeats append no event)."""
    require_lease(run, token)
    assert run.lease is not None
    return Lease(owner=run.lease.owner, token=token, expires_at=truncate_ms(now + duration))


_ENDED_ATTEMPT: dict[str, object] = {"lease": None, "deadline_at": None, "lease_losses": 0}


@dataclass(frozen=True, slots=True)
class HintedClaim:
    """One worker's claim of the run ``run_id`` names, conditioned on ``hint``."""

    environment: str
    run_id: str
    queue: str
    hint: ClaimHint
    owner: str
    token: str
    now: datetime
    duration: timedelta
    timeout: timedelta | None = None
    app_version: str | None = None

    def keeps_listing(self) -> bool:
        """Whether the claim leaves the run's agenda entry alone: the hint says the run is
        listed (early) no later than this attempt's lease or deadline expires, so
        maintenance looks at it in time. The write is then also conditioned on that
        listing (a run maintenance listed later since is refused and decided as read)."""
        review_at = self.hint.review_at
        if review_at is None:
            return False
        limit = self.now + self.duration
        if self.timeout is not None:
            limit = min(limit, self.now + self.timeout)
        return review_at <= truncate_ms(limit)

    def holds(self, run: Run) -> bool:
        """Whether the write's condition holds on the stored ``run``."""
        hint = self.hint
        return (
            run.seq == hint.seq
            and run.attempt == hint.attempt
            and run.task == hint.task
            and run.status.is_runnable
            and run.is_due(truncate_ms(self.now))
            and (run.waiting is None or run.waiting.kind is WaitKind.TIME)
            and run.slot_wait is None
            and (not self.keeps_listing() or run.review_at == hint.review_at)
        )

    def transition(self, run: Run) -> Transition:
        """The claim on a stored ``run`` it :meth:`holds` for (what a read would decide)."""
        decision = claim_lease(
            run,
            now=self.now,
            owner=self.owner,
            token=self.token,
            duration=self.duration,
            timeout=self.timeout,
            app_version=self.app_version,
        )
        assert isinstance(decision, Transition), decision
        return decision

    def blind(self) -> Transition:
        """The claim decided on the run as the hint describes it, for a store that writes
        it without reading: its ``after`` holds every attribute the claim sets and its
        events are the ones it appends. Attributes a claim leaves alone (payload, keys,
        results) are placeholders: never write or return them."""
        now = truncate_ms(self.now)
        described = Run(
            id=self.run_id,
            environment=self.environment,
            task=self.hint.task,
            queue=self.queue,
            status=RunStatus.QUEUED,
            payload=None,
            created_at=now,
            updated_at=now,
            seq=self.hint.seq,
            attempt=self.hint.attempt,
            due_at=now,
        )
        return self.transition(described)


def withdraw_claim(
    run: Run,
    *,
    token: str,
    now: datetime,
    republish: RepublishPolicy | None = None,
    reason: str | None = None,
) -> Transition:
    """The claim's write came back too late to start the attempt (the worker was
    paused, or the write was retried through an outage; or, ``reason`` ``deadline``, the
    Lambda invocation reached its safety margin meanwhile), so the handler never ran: the
    same run is runnable at once. The ``lease_expired`` event says the attempt never
    started (and why, with a ``reason``), and no lease loss is counted: no handler ran
    that could have killed its worker. With ``republish`` the caller publishes the wakeup
    itself."""
    require_lease(run, token)
    assert run.lease is not None
    now = truncate_ms(now)
    wake_at = eager_wake_at(now, now, republish) if republish else None
    review_at = eager_review_at(now, now, republish) if republish else None
    data: dict[str, JSON] = {"worker": run.lease.owner, "before_start": True}
    if reason is not None:
        data["reason"] = reason
    return transition(
        run,
        now,
        [(EventType.LEASE_EXPIRED, data)],
        fence=token,
        status=RunStatus.QUEUED,
        due_at=now,
        wake_at=truncate_ms(wake_at) if wake_at else None,
        review_at=truncate_ms(review_at) if review_at else None,
        publishes=0,
        lease=None,
        deadline_at=None,
    )


def claimed_too_late(claimed: Run, now: datetime, lease_duration: timedelta) -> bool:
    """Whether the claim came back with less than half its lease left: the heartbeat
    (every third of the lease) might then not renew it in time."""
    lease = claimed.lease
    return lease is not None and now >= lease.expires_at - lease_duration / 2


def cancelled_after_attempt(
    run: Run, now: datetime, token: str, outcome: str, details: dict[str, JSON] | None = None
) -> Transition:
    """A cancel request was pending when the attempt ended: the run is cancelled. The
    event says how the attempt ended (``after``), with ``details`` of that end."""
    return transition(
        run,
        now,
        [(EventType.CANCELLED, {"after": outcome, **(details or {})})],
        fence=token,
        status=RunStatus.CANCELLED,
        due_at=None,
        **_ENDED_ATTEMPT,
    )


def record_success(run: Run, *, token: str, result: JSON, now: datetime) -> Transition:
    """The attempt returned ``result`` (a pending cancel request turns it into cancelled)."""
    require_lease(run, token)
    now = truncate_ms(now)
    if run.status is RunStatus.CANCEL_REQUESTED:
        return cancelled_after_attempt(run, now, token, "succeeded")
    return transition(
        run,
        now,
        [(EventType.SUCCEEDED, {})],
        fence=token,
        status=RunStatus.SUCCEEDED,
        result=result,
        due_at=None,
        **_ENDED_ATTEMPT,
    )


def fail_attempt(
    run: Run,
    now: datetime,
    first: tuple[EventType, dict[str, JSON]],
    failure: Failure,
    decision: RetryDecision,
    fence: str | None,
    republish: RepublishPolicy | None,
) -> Transition:
    """The attempt ended in failure (raised or timed out): retry or fail the run."""
    if decision.retry_at is not None:
        retry_at = truncate_ms(decision.retry_at)
        first[1]["retry_at"] = retry_at.isoformat()
        wake_at = eager_wake_at(retry_at, now, republish) if republish else None
        review_at = eager_review_at(retry_at, now, republish) if republish else None
        return transition(
            run,
            now,
            [first],
            fence=fence,
            status=RunStatus.RETRYING,
            failure=failure,
            failures=run.failures + 1,
            due_at=retry_at,
            wake_at=truncate_ms(wake_at) if wake_at else None,
            review_at=truncate_ms(review_at) if review_at else None,
            **_ENDED_ATTEMPT,
        )
    return transition(
        run,
        now,
        [first, (EventType.FAILED, {"attempts": run.attempt})],
        fence=fence,
        status=RunStatus.FAILED,
        failure=failure,
        failures=run.failures + 1,
        due_at=None,
        **_ENDED_ATTEMPT,
    )


def record_failure(
    run: Run,
    *,
    token: str,
    failure: Failure,
    decision: RetryDecision,
    now: datetime,
    republish: RepublishPolicy | None = None,
) -> Transition:
    """The attempt raised; ``decision`` (from the retry policy) says what follows.

    With ``republish`` the caller publishes the retry's wakeup itself when it is due
    within SQS's delay limit (see :func:`~runlane_sqs.core.indexes.eager_wake_at`).
    """
    require_lease(run, token)
    now = truncate_ms(now)
    if run.status is RunStatus.CANCEL_REQUESTED:
        return cancelled_after_attempt(run, now, token, "failed")
    first = (EventType.ATTEMPT_FAILED, {"failure": failure.to_json()})
    return fail_attempt(run, now, first, failure, decision, token, republish)


def link_run(
    run: Run,
    *,
    kind: LinkKind,
    new_run_id: str,
    actor: str,
    reason: str,
    now: datetime,
    operation: str | None = None,
) -> Transition:
    """Record on a finished run that a retry or rerun of it was created (history only),
    by ``operation`` when a bulk operation did it (:mod:`runlane_sqs.core.bulk`)."""
    if kind is LinkKind.RETRY and run.status is not RunStatus.FAILED:
        raise IllegalTransition(f"run {run.id} is {run.status.value}; only failed runs are retried")
    if not run.status.is_terminal:
        raise IllegalTransition(f"run {run.id} is {run.status.value}; only finished runs are rerun")
    data: dict[str, JSON] = {"run": new_run_id, "kind": kind.value}
    data.update(_by(actor, reason, operation))
    return transition(run, truncate_ms(now), [(EventType.LINKED_RUN, data)], None)


def _by(actor: str, reason: str, operation: str | None) -> dict[str, JSON]:
    """Who did a control action and why, as its event records it."""
    data: dict[str, JSON] = {"actor": actor, "reason": reason}
    if operation is not None:
        data["operation"] = operation
    return data


def request_cancel(
    run: Run, *, now: datetime, actor: str, reason: str, operation: str | None = None
) -> Transition:
    """Cancel a waiting run at once; ask a running one to stop (its worker learns at
    the next heartbeat). Raises :class:`IllegalTransition` for finished runs."""
    if run.status.is_terminal:
        raise IllegalTransition(f"run {run.id} is already {run.status.value}; nothing to cancel")
    if run.status is RunStatus.CANCEL_REQUESTED:
        raise IllegalTransition(f"run {run.id} already has a cancel request")
    now = truncate_ms(now)
    data = _by(actor, reason, operation)
    if run.status is RunStatus.RUNNING:
        return transition(
            run, now, [(EventType.CANCEL_REQUESTED, data)], None, status=RunStatus.CANCEL_REQUESTED
        )
    return transition(
        run,
        now,
        [(EventType.CANCELLED, data)],
        None,
        status=RunStatus.CANCELLED,
        due_at=None,
        wake_at=None,
        waiting=None,
        parked_from=None,
    )
