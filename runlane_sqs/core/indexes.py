"""Where and when a run is listed on the table's indexes: the agenda, the status index,
and how their entries spread over partitions.

**The agenda.** Every unfinished run is on the agenda index under one kind, ``run``, at
the time maintenance must look at it next (:func:`agenda_entry`):

- a runnable run at the time a wakeup should be (re)published;
- a leased run at the earlier of its lease expiry and its deadline.

A run may be listed earlier than that (:attr:`~runlane_sqs.core.model.Run.review_at`):
a run whose wakeup was just published is listed at its due time plus the lease
duration, where the claim finds it and leaves it, so the claim does not move the run's
entry. Maintenance looks at the run then, and moves the entry to the time above when it
has nothing to do (docs/design/storage.md, "Indexes"). How often maintenance republishes
the wakeup of a due run is the :class:`RepublishPolicy`.

Terminal runs (and runs waiting without a due time) are not on the agenda, so it only
ever holds work that maintenance may have to act on.

**The status index** lists terminal and parked runs by their status and every other
run as ``active`` (:func:`status_group`).

**Partitions.** DynamoDB serves each partition of a table or index at up to about 1,000
write units per second. Every run of one environment would otherwise share one partition
of each index key; with ``SHARDS`` partitions per key, 10,000 runs per second stay well
under that limit (docs/performance.md, "Capacity model").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import NamedTuple

from runlane_sqs.core.limits import MAX_DELAY_SECONDS
from runlane_sqs.core.model import LEASED_STATUSES, Run, RunStatus

SHARDS = 32
"""Partitions per environment of the index keys every run writes twice (the agenda's
``run`` kind and the status index's ``active`` group: an entry made, then removed). A
count only ever grows: an entry is found in shard ``hash % count`` and readers scan
every shard below the count."""
FINISHED_SHARDS = 16
"""Partitions of each terminal status on the status index (one entry per run, once)."""
FEW_SHARDS = 4
"""Partitions of the keys few items write: tokens, schedules and slot records on the
agenda, parked runs on the status index."""
_COUNTS = {
    "succeeded": FINISHED_SHARDS,
    "failed": FINISHED_SHARDS,
    "cancelled": FINISHED_SHARDS,
    "token": FEW_SHARDS,
    "parked": FEW_SHARDS,
    "schedule": FEW_SHARDS,
    "slot": FEW_SHARDS,
    "group": FEW_SHARDS,
    "object": FEW_SHARDS,
    "rate": FEW_SHARDS,
}

ACTIVE = "active"
"""The status-index group of every unfinished run that is not parked."""


def shard_count(kind: str) -> int:
    """Partitions of an agenda kind or a status group, per environment."""
    return _COUNTS.get(kind, SHARDS)


def shard_of(item_id: str, kind: str) -> int:
    """Run and token ids are random hex, so their first digits spread the shards."""
    return int(item_id[:4], 16) % shard_count(kind)


def status_group(status: RunStatus) -> str:
    """Where a run of ``status`` is listed on the status index.

    Terminal and parked runs are listed by their status; every other unfinished run is
    listed as ``active``, so a claim, a retry or a release keeps the run's entry where
    it is (no index write) and only finishing (or parking) moves it."""
    if status.is_terminal or status is RunStatus.PARKED:
        return status.value
    return ACTIVE


def status_groups(statuses: Iterable[RunStatus]) -> list[str]:
    """The groups that hold runs of ``statuses``, each once, in the order first met."""
    return list(dict.fromkeys(status_group(status) for status in statuses))


class AgendaKind(StrEnum):
    """The partitions of the agenda index."""

    RUN = "run"
    """Unfinished runs: runnable ones by when a wakeup should be published (or, for runs
    waiting on a token or a run, when to check that target again), leased ones by when
    the lease or the attempt deadline expires (or earlier, see :func:`listed_at`)."""
    TOKEN = "token"
    """Tokens: pending ones by their timeout, decided ones while waiters remain."""
    SCHEDULE = "schedule"
    """Active schedules by their next occurrence."""
    SLOT = "slot"
    """Concurrency limits' slot records with holders or waiters, by when maintenance
    checks their holders and wakes waiters that free slots can take."""
    GROUP = "group"
    """Groups that have not joined, by when maintenance next checks them (starts a child
    an interrupted finisher did not, joins a group an interrupted finisher completed)."""
    OBJECT = "object"
    """Object records of the payload bucket that lost a holder or were pinned, by when
    maintenance may delete the object if no record references it
    (:class:`~runlane_sqs.core.values.ObjectRecord`)."""
    RATE = "rate"
    """Rate limits' records, listed by their first reservation at :data:`NEVER` (no scan
    lists them): read when a deploy raises or removes a limit
    (:mod:`runlane_sqs.core.rate_deploys`)."""


SCANNED_KINDS = tuple(kind for kind in AgendaKind if kind is not AgendaKind.RATE)
"""The kinds a maintenance pass scans for due work."""
NEVER_MS = 253_402_300_799_000
"""The last millisecond of the year 9999: the agenda time of an entry no scan lists."""


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


def listed_at(run: Run) -> datetime | None:
    """When the run is listed on the agenda: its :func:`agenda_entry` time, or its
    earlier ``review_at``. ``None``: not listed."""
    entry = agenda_entry(run)
    return _earlier_review(run, entry[1]) if entry is not None else None


def _earlier_review(run: Run, at: datetime) -> datetime:
    return run.review_at if run.review_at is not None and run.review_at < at else at


AGENDA_SHARDS = SHARDS
"""Agenda index partitions per environment for runs, so no single partition takes every
write (tokens have ``FEW_SHARDS``)."""


def agenda_pk(environment: str, kind: str, item_id: str) -> str:
    """Run and token ids are random hex, so their first digits spread the shards."""
    return f"{environment}#{kind}#{shard_of(item_id, kind)}"


def named_agenda_pk(environment: str, kind: AgendaKind, name: str) -> str:
    """Schedule ids and slot scopes are names, not random hex: their digest spreads the
    shards."""
    digest = hashlib.blake2b(name.encode(), digest_size=4).hexdigest()
    return agenda_pk(environment, kind.value, digest)


def schedule_agenda_pk(environment: str, schedule_id: str) -> str:
    return named_agenda_pk(environment, AgendaKind.SCHEDULE, schedule_id)


def slot_agenda_pk(environment: str, scope: str) -> str:
    return named_agenda_pk(environment, AgendaKind.SLOT, scope)


def agenda_partitions(environment: str, kind: str) -> list[str]:
    """Every agenda partition of one environment and kind (what maintenance scans)."""
    return [f"{environment}#{kind}#{shard}" for shard in range(shard_count(kind))]


def status_pk(environment: str, status: RunStatus, run_id: str) -> str:
    """The status-index partition of one run: its status group and its shard."""
    group = status_group(status)
    return f"{environment}#{group}#{shard_of(run_id, group)}"


def status_partitions(environment: str, statuses: Iterable[RunStatus]) -> list[str]:
    """Every status-index partition that may hold runs of ``statuses``."""
    return [
        f"{environment}#{group}#{shard}"
        for group in status_groups(statuses)
        for shard in range(shard_count(group))
    ]


class RunListing(NamedTuple):
    """Where a run is listed on the table's indexes, and when: what every write of the
    run sets, so the indexes always agree with the state it writes."""

    status_pk: str
    """Its status-index partition (:func:`status_pk`)."""
    agenda_pk: str | None
    """Its agenda partition; ``None``: not on the agenda."""
    agenda_at: datetime | None
    """When it is listed on the agenda (:func:`listed_at`)."""


def run_listing(run: Run) -> RunListing:
    entry = agenda_entry(run)
    if entry is None:
        return RunListing(status_pk(run.environment, run.status, run.id), None, None)
    kind, at = entry
    return RunListing(
        status_pk(run.environment, run.status, run.id),
        agenda_pk(run.environment, kind, run.id),
        _earlier_review(run, at),
    )
