"""Giving a claimed run back without running it (the per-message path,
:mod:`runlane_sqs.engine.message`).

A claim that came back with less than half its lease left (this process was paused, or
the write was retried through an outage) could overlap the attempt of a worker that
maintenance gives the run to; a claim made after the caller's time to start attempts is
over (a Lambda invocation past its safety margin) would run into the invocation's
timeout. Either way the run is runnable again at once, its wakeup published, and the
slots the claim took are freed (docs/concepts.md, "Attempts and leases").
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime, timedelta
from enum import StrEnum

from runlane_sqs.core.claims import withdraw_claim
from runlane_sqs.core.clock import Clock
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.model import Run
from runlane_sqs.engine import outcomes
from runlane_sqs.engine.outcomes import Disposition
from runlane_sqs.engine.steps import Publish, Steps, WakeWaiters, Write

log = logging.getLogger("runlane_sqs.worker")


class Withdrawal(StrEnum):
    """Why a claimed run is given back unrun."""

    LATE = "late"
    """The claim came back with less than half its lease left."""
    DEADLINE = "deadline"
    """The caller may not start attempts any more (a Lambda invocation's safety margin)."""


def claimed_too_late(claimed: Run, now: datetime, lease_duration: timedelta) -> bool:
    """Whether the claim came back with less than half its lease left: the heartbeat
    (every third of the lease) might then not renew it in time."""
    lease = claimed.lease
    return lease is not None and now >= lease.expires_at - lease_duration / 2


def withdraw_steps(
    claimed: Run, reason: Withdrawal, clock: Clock, config: RunlaneConfig, worker_id: str
) -> Steps:
    """Give ``claimed`` back unrun: the withdrawal's write, its wakeup, and the waiters of
    the slots it frees. The message is acknowledged (a fresh wakeup replaces it)."""
    token = outcomes.lease_token(claimed)
    now = clock.now()
    assert claimed.lease is not None
    extra = {"run_id": claimed.id, "worker_id": worker_id}
    if reason is Withdrawal.LATE:
        took = now - (claimed.lease.expires_at - config.lease_duration)
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
    decision = withdraw_claim(
        claimed, token=token, now=now, republish=config.republish, reason=reason.value
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
