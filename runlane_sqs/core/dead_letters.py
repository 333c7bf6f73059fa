"""What a message of a dead-letter queue means, and what redriving it does.

SQS moves a message to its queue's dead-letter queue after ``maxReceiveCount`` receives
that did not delete it (docs/operations.md, "Dead-letter queues"): a wakeup a worker
left for redelivery while storage stayed unavailable, a wakeup of another environment
on a shared queue, or a message that is not a wakeup at all, sent by something else.
A wakeup is only a hint, so the run it names says what to do: the run's record is the
truth, the message is not.

Nothing here performs I/O or reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from runlane_sqs.core.limits import MAX_DELAY_SECONDS
from runlane_sqs.core.model import LEASED_STATUSES, Run, RunStatus
from runlane_sqs.core.wakeup import Wakeup


class Verdict(StrEnum):
    """What redriving a dead letter does."""

    REDRIVE = "redrive"
    """The run is runnable: a fresh wakeup is sent, and the letter deleted."""
    SETTLED = "settled"
    """Storage already knows what becomes of the run (it finished, an attempt holds it,
    it waits for something that resumes it, or maintenance publishes it later): the
    letter is deleted, nothing is sent."""
    FOREIGN = "foreign"
    """A wakeup of another environment: sent back to the queue as it is, for that
    environment's workers, and the letter deleted."""
    UNKNOWN_RUN = "unknown_run"
    """No such run in this environment: left in the dead-letter queue (or deleted when
    unreadable letters are dropped)."""
    MALFORMED = "malformed"
    """Not a wakeup: left in the dead-letter queue (or deleted when unreadable letters
    are dropped)."""


@dataclass(frozen=True, slots=True)
class Judgement:
    """A dead letter's verdict, why, and (a redrive) the delay of its fresh wakeup."""

    verdict: Verdict
    reason: str
    delay: timedelta | None = None


def judge(wakeup: Wakeup | None, run: Run | None, *, environment: str, now: datetime) -> Judgement:
    """The verdict on a dead letter that parsed as ``wakeup`` (``None``: it did not)
    naming ``run`` (``None``: not stored)."""
    if wakeup is None:
        return Judgement(Verdict.MALFORMED, "not a wakeup")
    if wakeup.environment != environment:
        return Judgement(
            Verdict.FOREIGN,
            f"a wakeup of environment {wakeup.environment!r}: back to its queue for it",
        )
    if run is None:
        return Judgement(Verdict.UNKNOWN_RUN, f"no run {wakeup.run_id} in this environment")
    return _judge_run(run, now)


def _judge_run(run: Run, now: datetime) -> Judgement:
    settled = settled_reason(run)
    if settled is not None:
        return Judgement(Verdict.SETTLED, settled)
    assert run.due_at is not None  # a runnable run that waits for nothing has a due time
    status, ahead = run.status.value, run.due_at - now
    if ahead > timedelta(seconds=MAX_DELAY_SECONDS):
        return Judgement(
            Verdict.SETTLED,
            f"the run is due at {run.due_at.isoformat()}: maintenance publishes it then",
        )
    if ahead > timedelta(0):
        return Judgement(
            Verdict.REDRIVE,
            f"the run is {status}, due at {run.due_at.isoformat()}: a wakeup is sent for then",
            ahead,
        )
    return Judgement(Verdict.REDRIVE, f"the run is {status} and due: a fresh wakeup is sent")


def settled_reason(run: Run) -> str | None:
    """Why nothing needs to wake ``run`` (``None``: something must, it is runnable)."""
    waiting = run.waiting
    what = f"{waiting.kind.value} {waiting.target}" if waiting else "what it waits for"
    reasons = (
        (run.status.is_terminal, f"the run {run.status.value}: nothing to redrive"),
        (
            run.status in LEASED_STATUSES,
            "an attempt holds the run's lease: its worker or maintenance goes on",
        ),
        (run.status is RunStatus.PARKED, "the run is parked: 'runs unpark' runs it"),
        (
            run.slot_wait is not None,
            f"the run waits for a slot of {run.slot_wait}, which a freed slot wakes",
        ),
        (run.turn_wait, "the run waits for its ordering key's turn"),
        (run.due_at is None, f"the run waits for {what}, which resumes it"),
    )
    return next((reason for holds, reason in reasons if holds), None)
