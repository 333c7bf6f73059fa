"""The table's two indexes as the rest of the product sees them: the agenda's kinds and
the status index's groups, and how many partitions each spreads over.

**The agenda.** Every unfinished run is on the agenda index under one kind, ``run``, at
the time maintenance must look at it next (:func:`~runlane_sqs.core.machine.agenda_entry`,
decided with every transition):

- a runnable run at the time a wakeup should be (re)published;
- a leased run at the earlier of its lease expiry and its deadline.

A run may be listed earlier than that (:attr:`~runlane_sqs.core.model.Run.review_at`):
a run whose wakeup was just published is listed at its due time plus the lease
duration, where the claim finds it and leaves it, so the claim does not move the run's
entry. Maintenance looks at the run then, and moves the entry to the time above when it
has nothing to do (docs/design/storage.md, "Indexes"). How often maintenance republishes
the wakeup of a due run is the :class:`~runlane_sqs.core.machine.RepublishPolicy`.

Terminal runs (and runs waiting without a due time) are not on the agenda, so it only
ever holds work that maintenance may have to act on. Tokens, schedules, slot records,
groups, object records, running bulk operations and rate records have agenda kinds of
their own.

**The status index** lists terminal and parked runs by their status and every other
run as :data:`ACTIVE`.

**Partitions.** DynamoDB serves each partition of a table or index at up to about 1,000
write units per second. Every run of one environment would otherwise share one partition
of each index key; with ``SHARDS`` partitions per key, 10,000 runs per second stay well
under that limit (docs/performance.md, "Capacity model"). How the partition keys are
written is the DynamoDB adapter's (:mod:`runlane_sqs.adapters.dynamodb.keys`); the
engine asks the store for a kind's partitions (``agenda_partitions``).
"""

from __future__ import annotations

from enum import StrEnum

SHARDS = 32
"""Partitions per environment of the index keys every run writes twice (the agenda's
``run`` kind and the status index's ``active`` group: an entry made, then removed). A
count only ever grows: an entry is found in shard ``hash % count`` and readers scan
every shard below the count."""
FINISHED_SHARDS = 16
"""Partitions of each terminal status on the status index (one entry per run, once)."""
TAG_SHARDS = 16
"""Partitions of each tag value on the tag indexes (one entry per run and tag, once):
a value every run carries spreads as a terminal status does (docs/tags.md)."""
FEW_SHARDS = 4
"""Partitions of the keys few items write: tokens, schedules and slot records on the
agenda, parked runs on the status index."""

ACTIVE = "active"
"""The status-index group of every unfinished run that is not parked."""


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
    BULK = "bulk"
    """Running bulk operations, by the end of their lease: maintenance carries on one
    whose process died (:mod:`runlane_sqs.core.bulk`)."""
    RATE = "rate"
    """Rate limits' records, listed by their first reservation at :data:`NEVER` (no scan
    lists them): read when a deploy raises or removes a limit
    (:mod:`runlane_sqs.core.rate_deploys`)."""


SCANNED_KINDS = tuple(kind for kind in AgendaKind if kind is not AgendaKind.RATE)
"""The kinds a maintenance pass scans for due work."""
NEVER_MS = 253_402_300_799_000
"""The last millisecond of the year 9999: the agenda time of an entry no scan lists."""


AGENDA_SHARDS = SHARDS
"""Agenda index partitions per environment for runs, so no single partition takes every
write (tokens have ``FEW_SHARDS``)."""
