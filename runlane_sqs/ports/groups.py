"""The group store port: group records, their items, and their place on the agenda.

A child is counted in its group by the run store's write that makes it terminal
(:meth:`~runlane_sqs.ports.store.RunStore.apply`), in the same atomic write.

Adapters: :mod:`runlane_sqs.adapters.dynamodb.groups` and
:mod:`runlane_sqs.adapters.memory.groups`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from runlane_sqs.core.groups import Group, Item
from runlane_sqs.core.model import Run


class GroupStore(Protocol):
    """The groups of one environment."""

    def open_group(
        self, group: Group, chunks: Sequence[Sequence[Item]], fence: tuple[str, str] | None
    ) -> Group:
        """Store a new group with its items in one atomic write and return it; the group
        already stored under its id if there is one (an earlier attempt opened it).
        ``fence`` is the parent's run id and lease token: the write lands only while the
        parent's attempt holds its lease, else :class:`~runlane_sqs.core.errors.LeaseLost`."""
        ...

    def get_group(self, group_id: str) -> Group | None: ...

    def get_items(self, group_id: str, chunk: int) -> list[Item]:
        """The items of one chunk of a group, in index order."""
        ...

    def mark_started(self, group_id: str, seen: int, count: int = 1) -> tuple[bool, Group | None]:
        """Count ``count`` more children started if ``seen`` children were started so
        far; returns whether it counted and the group as stored after the write (or as
        refused)."""
        ...

    def mark_joined(self, group_id: str, at: datetime) -> bool:
        """Record the join and take the group off the agenda; False if it was recorded
        already."""
        ...

    def mark_stopped(self, group_id: str, at: datetime) -> Group | None:
        """Stop a group that has not joined (its parent was cancelled) and return it as
        stored; ``None`` if it had joined or does not exist."""
        ...

    def reopen(self, reopened: Group, seen_generation: int, failed: int, cancelled: int) -> bool:
        """Write a redrive (:func:`~runlane_sqs.core.groups.redrive`): the new generation
        and the items rerun, ``failed`` and ``cancelled`` taken back from the counts
        (subtracted, so counts that moved meanwhile are kept), the join undone and the
        group listed at ``reopened.review_at``; only if the group is still joined at
        ``seen_generation`` (False if refused)."""
        ...

    def claim_next(self, group_id: str, limit: int) -> int | None:
        """Count one more child started if fewer than ``limit`` are; returns the index of
        the item this call claimed (each caller gets its own), ``None`` if refused."""
        ...

    def relist(self, group_id: str, at: datetime, finished: int) -> None:
        """List an unjoined group on the agenda at ``at`` (maintenance looks again then),
        noting that ``finished`` of its children had finished."""
        ...

    def group_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[Group], str | None]:
        """Unjoined groups listed in an agenda ``partition`` at or before ``until``."""
        ...

    def children(self, group: Group, start: int, limit: int) -> list[Run | None]:
        """The child runs of items ``start .. start + limit - 1`` (``None``: not started)."""
        ...
