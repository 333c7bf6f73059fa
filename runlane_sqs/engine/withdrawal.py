"""Withdrawal on the per-message path: a claimed run given back unrun.

A claim that came back with less than half its lease left (this process was paused, or
the write was retried through an outage) could overlap the attempt of a worker that
maintenance gives the run to; a claim made after the caller's time to start attempts is
over (a Lambda invocation past its safety margin) would run into the invocation's
timeout. Either way the run is runnable again at once, its wakeup published, and the
slots the claim took are freed (docs/concepts.md, "Attempts and leases"). The
transition is :func:`runlane_sqs.core.machine.withdraw_claim`.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime, timedelta
from enum import StrEnum

from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.machine import lease_token, withdraw_claim
from runlane_sqs.core.model import Run
from runlane_sqs.engine.driver import Disposition, Handling, Publish, WorkerIdentity, Write
from runlane_sqs.engine.slots import WakeWaiters

log = logging.getLogger("runlane_sqs.worker")


class Withdrawal(StrEnum):
    """Why a claimed run is given back unrun."""

    LATE = "late"
    """The claim came back with less than half its lease left."""
    DEADLINE = "deadline"
    """The caller may not start attempts any more (a Lambda invocation's safety margin)."""


def withdraw(claimed: Run, reason: Withdrawal, path: WorkerIdentity) -> Handling:
    """Give ``claimed`` back unrun: the withdrawal's write, its wakeup, and the waiters
    of the slots it frees. The message is acknowledged (a fresh wakeup replaces it)."""
    token = lease_token(claimed)
    now = path.clock.now()
    log_withdrawal(claimed, reason, now, path.config.lease_duration, path.worker_id)
    decision = withdraw_claim(
        claimed, token=token, now=now, republish=path.config.republish, reason=reason.value
    )
    try:
        stored: Run = yield Write(decision)
    except RunlaneError:  # maintenance recovered it first, or storage failed
        return Disposition.SKIPPED
    with contextlib.suppress(RunlaneError):  # maintenance publishes it (wake_at is set)
        yield Publish(stored, timedelta(0))
    if claimed.slots:
        with contextlib.suppress(RunlaneError):  # maintenance checks the slot records
            yield WakeWaiters(tuple(s.scope for s in claimed.slots))
    return Disposition.SKIPPED


def log_withdrawal(
    claimed: Run, reason: Withdrawal, now: datetime, lease_duration: timedelta, worker_id: str
) -> None:
    assert claimed.lease is not None
    extra = {"run_id": claimed.id, "worker_id": worker_id}
    if reason is Withdrawal.LATE:
        took = now - (claimed.lease.expires_at - lease_duration)
        log.warning(
            "the claim of run %s came back %.1f s after it was decided, with less than half "
            "its lease left; giving the run back without starting attempt %d",
            claimed.id,
            took.total_seconds(),
            claimed.attempt,
            extra=extra,
        )
    else:
        log.warning(
            "run %s was claimed after the time to start attempts ran out (the invocation's "
            "safety margin); giving it back without starting attempt %d",
            claimed.id,
            claimed.attempt,
            extra=extra,
        )
