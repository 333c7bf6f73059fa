"""When maintenance should next look at a run, and how often it republishes wakeups.

Every non-terminal run is on the agenda index under one of two kinds:

- ``due``: a runnable run, listed at the time a wakeup should be (re)published;
- ``lease``: a leased run, listed at the earlier of its lease expiry and its deadline.

Terminal runs (and runs waiting without a due time) are not listed, so the index only
ever holds work that maintenance may have to act on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from runlane_sqs.core.limits import MAX_DELAY_SECONDS
from runlane_sqs.core.model import LEASED_STATUSES, Run


class AgendaKind(StrEnum):
    """The partitions of the agenda index."""

    DUE = "due"
    """Runnable runs, by when a wakeup should be published (or, for runs waiting on a
    token or a run, when to check that target again)."""
    LEASE = "lease"
    """Leased runs, by when the lease or the attempt deadline expires."""
    TOKEN = "token"
    """Tokens: pending ones by their timeout, decided ones while waiters remain."""


@dataclass(frozen=True, slots=True)
class RepublishPolicy:
    """How long a published wakeup is trusted before maintenance publishes another.

    After maintenance's n-th publish for the same due run (counting from 0), the next
    one waits ``after * 2**n``, at most ``max_after``: 5, 10, 20, ... minutes by default,
    so a backlog that is merely slow is not flooded with duplicates.
    """

    after: timedelta = timedelta(minutes=5)
    max_after: timedelta = timedelta(hours=1)

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


def agenda_entry(run: Run) -> tuple[AgendaKind, datetime] | None:
    """Where the run is listed on the agenda index, if anywhere."""
    if run.status.is_terminal:
        return None
    if run.status in LEASED_STATUSES and run.lease is not None:
        at = run.lease.expires_at
        if run.deadline_at is not None:
            at = min(at, run.deadline_at)
        return AgendaKind.LEASE, at
    if run.status.is_runnable:
        wake = run.wake_at or run.due_at
        return (AgendaKind.DUE, wake) if wake is not None else None
    return None


AGENDA_SHARDS = 4
"""Agenda index partitions per environment and kind, so no single partition takes every
write."""


def agenda_pk(environment: str, kind: str, item_id: str) -> str:
    """Run and token ids are random hex, so their first digits spread the shards."""
    return f"{environment}#{kind}#{int(item_id[:4], 16) % AGENDA_SHARDS}"


def agenda_partitions(environment: str, kind: str) -> list[str]:
    """Every agenda partition of one environment and kind (what maintenance scans)."""
    return [f"{environment}#{kind}#{shard}" for shard in range(AGENDA_SHARDS)]
