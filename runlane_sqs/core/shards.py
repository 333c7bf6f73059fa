"""How index entries are spread over partitions, so no index partition limits throughput.

DynamoDB serves each partition of a table or index at up to about 1,000 write units
per second. Every run of one environment would otherwise share one partition of each
index key; with ``SHARDS`` partitions per key, 10,000 runs per second stay well under
that limit (docs/performance.md, "Capacity model").
"""

from __future__ import annotations

from collections.abc import Iterable

from runlane_sqs.core.model import RunStatus

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
