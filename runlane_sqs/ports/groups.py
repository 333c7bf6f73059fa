"""The group store port: group records, their items, and their place on the agenda.

A child is counted by :meth:`GroupStore.count` after the run store's write that made it
terminal: one conditional write that empties the child's lane (so it lands once) and
may start the next position in it (:mod:`runlane_sqs.core.groups`).

Adapter: :mod:`runlane_sqs.adapters.dynamodb.groups` (DynamoDB, or the in-memory
DynamoDB of :mod:`runlane_sqs.testing`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from runlane_sqs.core.groups import Group, Item
from runlane_sqs.core.model import Run, RunStatus


@dataclass(frozen=True, slots=True)
class Counted:
    """What :meth:`GroupStore.count` did."""

    landed: bool
    """False: the write was refused (see ``group``, as stored)."""
    group: Group | None
    """The group after the write, or as stored when it was refused (``None``: gone)."""


class GroupStore(Protocol):
    """The groups of one environment."""

    def open_group(
        self, group: Group, chunks: Sequence[Sequence[Item]], fence: tuple[str, str] | None
    ) -> tuple[Group, bool]:
        """Store a new group with its items (the record last: a group is stored once its
        record is); returns the group as stored and whether this call wrote it (False:
        an earlier attempt opened it).
        ``fence`` is the parent's run id and lease token: the write lands only while the
        parent's attempt holds its lease, else :class:`~runlane_sqs.core.errors.LeaseLost`."""
        ...

    def get_group(self, group_id: str) -> Group | None: ...

    def get_items(self, group: Group, chunk: int) -> list[Item]:
        """The items of one chunk of a group, in index order."""
        ...

    def mark_started(
        self, group_id: str, seen: int, lanes: Mapping[int, int]
    ) -> tuple[bool, Group | None]:
        """Start the positions ``lanes`` gives each free lane (``Group.room``) if
        ``seen`` positions were started so far and the group still runs; returns whether
        it did and the group as stored after the write (or as refused)."""
        ...

    def count(
        self, group_id: str, lane: int, position: int, status: RunStatus, *, start: bool
    ) -> Counted:
        """Count the terminal child at ``position`` once: lands only while ``lane`` holds
        that position. With ``start``, the same write gives the lane the next position if
        there is one and the group still runs (refused otherwise: send it again without).
        Counting lands also after the join (the counts stay true)."""
        ...

    def mark_joined(self, group_id: str, at: datetime) -> bool:
        """Record the join and take the group off the agenda; False if it was recorded
        already."""
        ...

    def mark_stopped(self, group_id: str, at: datetime, seen_generation: int) -> Group | None:
        """Stop a group that has not joined (its parent was cancelled) and return it as
        stored; ``None`` if it had joined, does not exist, or is no longer at
        ``seen_generation`` (``runs retry-failed`` reopened it since it was read)."""
        ...

    def reopen(self, reopened: Group, seen_generation: int, failed: int, cancelled: int) -> bool:
        """Write a redrive (:func:`~runlane_sqs.core.groups.redrive`): the new generation
        and the reruns' positions, ``failed`` and ``cancelled`` taken back from the counts
        (subtracted, so counts that moved meanwhile are kept), the join undone and the
        group listed at ``reopened.review_at``; only if the group is still joined at
        ``seen_generation`` (False if refused)."""
        ...

    def relist(self, group_id: str, at: datetime) -> None:
        """List an unjoined group on the agenda at ``at`` (maintenance looks again then)."""
        ...

    def delete_group(self, group_id: str) -> None:
        """Delete a group's record and every item chunk stored beside it (nothing if
        there is none). ``runs prune`` calls it once it deleted the group's parent."""
        ...

    def group_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[Group], str | None]:
        """Unjoined groups listed in an agenda ``partition`` at or before ``until``."""
        ...

    def children(self, group: Group, start: int, limit: int) -> list[Run | None]:
        """The current child runs of items ``start .. start + limit - 1`` (``None``: not
        started), at most 100."""
        ...

    def children_at(self, group: Group, positions: Sequence[int]) -> list[Run | None]:
        """The child runs of ``positions`` (``None``: not created), at most 100."""
        ...
