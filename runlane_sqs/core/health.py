"""What an operator sees of an environment at a glance, at a cost that does not grow
with the table: runs counted by status group and outcomes per minute, from a bounded
read of the status index (docs/console.md, "What the pages cost").

The status index lists runs by status *group* (``active`` for every unfinished run
that is not parked, then ``parked`` and each terminal status), newest first, so one
bounded query per partition reads the newest runs of a group. A partition with more
runs than the bound is read only down to some creation time; the counts and the chart
then cover only what every partition was read to, and say so (:attr:`Activity.
covered_from`), rather than show a partial figure as a whole one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from runlane_sqs.core.indexes import ACTIVE
from runlane_sqs.core.model import RunStatus

GROUPS = (ACTIVE, RunStatus.PARKED.value, *(s.value for s in RunStatus if s.is_terminal))
"""Every status group, unfinished first."""
OUTCOMES = tuple(s.value for s in RunStatus if s.is_terminal)
"""The groups a run ends in, charted per minute."""
MINUTE = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class GroupTally:
    """The creation times of a status group's runs, as far as a bounded read got."""

    group: str
    created: tuple[datetime, ...]
    """Creation times of the runs read (any order)."""
    complete_from: datetime | None
    """Every run of the group created at or after this time was read (``None``: every
    run of the group created since the time asked for was read)."""


@dataclass(frozen=True, slots=True)
class Count:
    """A bounded count: ``value``, or more than it when ``more``."""

    value: int
    more: bool = False

    def __str__(self) -> str:
        return f"{self.value:,}+" if self.more else f"{self.value:,}"

    def to_json(self) -> dict[str, object]:
        return {"value": self.value, "more": self.more}


@dataclass(frozen=True, slots=True)
class MinuteOutcomes:
    """How many runs created in one minute have ended, by outcome."""

    start: datetime
    counts: dict[str, int]
    """By terminal status (each of :data:`OUTCOMES`)."""

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True, slots=True)
class Activity:
    """Runs created in a window, by status group, and the outcomes per minute."""

    since: datetime
    """The start of the window asked for."""
    until: datetime
    covered_from: datetime
    """The counts and minutes cover runs created from here (``since`` unless a
    partition held more runs than a bounded read takes)."""
    counts: dict[str, int]
    """Runs created since ``covered_from``, by group (each of :data:`GROUPS`)."""
    minutes: tuple[MinuteOutcomes, ...]
    """One entry per minute from ``since`` to ``until``, oldest first; minutes before
    ``covered_from`` hold zeros (see :meth:`covered`)."""
    unfinished: Count
    """Unfinished runs (``active``) of any age."""
    parked: Count
    """Parked runs of any age."""

    @property
    def complete(self) -> bool:
        return self.covered_from <= self.since

    def to_json(self) -> dict[str, object]:
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "covered_from": self.covered_from.isoformat(),
            "complete": self.complete,
            "counts": dict(self.counts),
            "unfinished": self.unfinished.to_json(),
            "parked": self.parked.to_json(),
            "minutes": [
                {"start": minute.start.isoformat(), **minute.counts}
                for minute in self.minutes
                if minute.total
            ],
        }

    def covered(self, minute: MinuteOutcomes) -> bool:
        """Whether every run of the window created in ``minute`` was read."""
        return self.complete or minute.start >= self.covered_from


def minute_floor(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def _count(tally: GroupTally) -> Count:
    return Count(len(tally.created), more=tally.complete_from is not None)


def activity(tallies: Iterable[GroupTally], since: datetime, until: datetime) -> Activity:
    """Counts and outcomes per minute of the runs created from ``since`` to ``until``.

    ``tallies`` holds one :class:`GroupTally` per group of :data:`GROUPS`; unfinished
    and parked runs may have been read without a lower bound (their totals of any age),
    the terminal groups from ``since``."""
    by_group = {tally.group: tally for tally in tallies}
    missing = set(GROUPS) - by_group.keys()
    if missing:
        raise ValueError(f"no tally for the groups {sorted(missing)}")
    covered_from = max(
        [since, *(t.complete_from for t in by_group.values() if t.complete_from is not None)]
    )
    counts = {
        group: sum(1 for at in by_group[group].created if covered_from <= at <= until)
        for group in GROUPS
    }
    first = minute_floor(since)
    slots = int((until - first) / MINUTE) + 1
    per_minute = [{outcome: 0 for outcome in OUTCOMES} for _ in range(slots)]
    for outcome in OUTCOMES:
        for at in by_group[outcome].created:
            if covered_from <= at <= until:
                per_minute[int((at - first) / MINUTE)][outcome] += 1
    return Activity(
        since=since,
        until=until,
        covered_from=covered_from,
        counts=counts,
        minutes=tuple(
            MinuteOutcomes(first + index * MINUTE, outcomes)
            for index, outcomes in enumerate(per_minute)
        ),
        unfinished=_count(by_group[ACTIVE]),
        parked=_count(by_group[RunStatus.PARKED.value]),
    )
