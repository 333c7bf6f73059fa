"""Claiming a run with one write, conditioned on its wakeup's hint instead of a read.

A worker that receives a wakeup with a :class:`~runlane_sqs.core.wakeup.ClaimHint`
writes the claim at once: the write holds only if the stored run is still at the hinted
sequence, attempt and task, runnable, due, and waiting for nothing but a time (and, when
the hint says the run is listed early enough, still listed then: the claim leaves its
agenda entry where it is, see :meth:`HintedClaim.keeps_listing`). Those
are exactly the runs a read would have let the worker claim without more than a
``started`` event, so the write is the claim :func:`~runlane_sqs.core.machine.claim_lease`
decides on the stored run. A refused write returns the stored run, and the worker
decides on it as if it had read it (docs/design/storage.md, "Claims").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from runlane_sqs.core import machine
from runlane_sqs.core.clock import truncate_ms
from runlane_sqs.core.indexes import RepublishPolicy, eager_review_at, eager_wake_at
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import JSON, EventType, Run, RunStatus, WaitKind
from runlane_sqs.core.wakeup import ClaimHint


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
        decision = machine.claim_lease(
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
    machine.require_lease(run, token)
    assert run.lease is not None
    now = truncate_ms(now)
    wake_at = eager_wake_at(now, now, republish) if republish else None
    review_at = eager_review_at(now, now, republish) if republish else None
    data: dict[str, JSON] = {"worker": run.lease.owner, "before_start": True}
    if reason is not None:
        data["reason"] = reason
    return machine.transition(
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
