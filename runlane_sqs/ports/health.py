"""The health store port: what the console and ``app.health`` read of an environment at
a bounded cost, and the last maintenance pass's report.

Adapter: :mod:`runlane_sqs.adapters.dynamodb.health` (DynamoDB, or the in-memory
DynamoDB of :mod:`runlane_sqs.testing`). Each run store hands out its health store as
``store.health``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from runlane_sqs.core.health import Count, GroupTally


@dataclass(frozen=True, slots=True)
class PassRecord:
    """A maintenance pass's report as stored: the latest one that finished."""

    pass_id: str
    finished_at: datetime
    counts: dict[str, int]
    """What it did to runs, by action (:func:`~runlane_sqs.engine.reports.pass_counts`)."""
    report: dict[str, Any]
    """:meth:`~runlane_sqs.engine.reports.PassReport.to_json`."""


class HealthStore(Protocol):
    """Bounded reads of an environment's indexes, and the last pass's report."""

    def tally(
        self, groups: Sequence[tuple[str, datetime | None]], per_partition: int
    ) -> list[GroupTally]:
        """For each ``(group, since)``: the creation times of the group's newest runs
        created at or after ``since`` (``None``: of any age), at most ``per_partition``
        from each of its status-index partitions (one query each, sent at once)."""
        ...

    def overdue(self, until: datetime, per_partition: int) -> Count:
        """Unfinished runs the agenda lists at or before ``until`` (due a wakeup, past
        their lease or deadline: what maintenance acts on next), at most
        ``per_partition`` counted in each run partition of the agenda."""
        ...

    def save_pass(self, record: PassRecord) -> None:
        """Keep ``record`` unless a pass that finished later is kept already."""
        ...

    def last_pass(self) -> PassRecord | None: ...
