"""Groups: runs started together whose terminal outcomes are counted once (the join).

A group is a map over items (``ctx.map``, whose parent run waits for it) or a set of
runs with a callback (``app.group(..., then=...)``). Its record keeps the counts; the
children are ordinary runs that name their group and their item's index. Items are kept
in chunks beside the group record, never in the parent run.

Children start as a sliding window of ``window`` lanes: each lane holds the position of
the one child running in it (positions ``0 .. total - 1`` are the items; each rerun of
``runs retry-failed`` appends one more, :attr:`Group.redriven`). A child is counted by
one conditional write to the group record that empties its lane, so it lands once
however often it is sent; the same write gives the lane the next position to start when
there is one (the window slides, and finishers never race for an item). Whoever makes
the count complete joins the group: resumes the parent or triggers the callback, both
writes that land once. Nothing here does I/O.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from runlane_sqs.core.errors import (
    ConfigurationError,
    IllegalTransition,
    PayloadTooLarge,
    RunlaneError,
)
from runlane_sqs.core.model import (
    JSON,
    Failure,
    LinkKind,
    Run,
    RunStatus,
)

# R is the result type of a group's children: a map's task's, Any for other groups.
if TYPE_CHECKING:  # a bare ``GroupResults`` is ``GroupResults[Any]`` (Python 3.11)
    import typing_extensions

    R = typing_extensions.TypeVar("R", default=Any)
else:  # the default matters to type checkers only
    R = TypeVar("R")

CHUNK_BYTES = 300 * 1024
"""Most item bytes one chunk record holds (DynamoDB's item limit is 400 KB)."""
GROUP_BYTES = 64 * 1024 * 1024
"""Most item bytes of one group (the parent's process holds them while it opens it)."""


def _digest(*parts: str) -> str:
    return hashlib.sha256(":".join(parts).encode()).hexdigest()[:32]


def group_id_for(parent_run_id: str, wait_name: str) -> str:
    """The id of the group a parent opens at a wait: the same in every attempt, so a
    retried ``ctx.map`` finds the group its earlier attempt opened."""
    return _digest(parent_run_id, wait_name)


def child_run_id(group_id: str, index: int) -> str:
    """The run id of a group's ``index``-th child: whoever starts it writes the same run,
    so a child is created once however many finishers start it."""
    return _digest(group_id, str(index))


def next_group_id(group_id: str) -> str:
    """The id of the group a chain's group opens for the chain's next task."""
    return _digest(group_id, "next")


def callback_run_id(group_id: str, generation: int = 0) -> str:
    """The run id of a group's callback: triggered once per join (a group joins again
    after each ``runs retry-failed``, its ``generation``), by whichever join lands first."""
    if generation == 0:
        return _digest(group_id, "then")
    return _digest(group_id, "then", str(generation))


def redrive_run_id(group_id: str, index: int, generation: int) -> str:
    """The run id of the child that reruns item ``index`` in a group's ``generation``-th
    redrive (``runs retry-failed``)."""
    return _digest(group_id, str(index), "redrive", str(generation))


def redriven_parent_id(group_id: str, generation: int) -> str:
    """The run id of the parent that a group's ``generation``-th join runs again, once."""
    return _digest(group_id, "parent", str(generation))


def redriven_parent_ids(group: Group) -> list[str]:
    """The run ids of the parents each of a group's redrives runs again (one per
    generation; a redrive whose join still failed runs none)."""
    return [redriven_parent_id(group.id, n) for n in range(1, group.generation + 1)]


def group_root(run: Run) -> str:
    """The run whose id names a run's groups: itself, or for a redriven parent the run it
    redrives (so its ``ctx.map`` calls find that run's groups)."""
    if run.source_kind == LinkKind.REDRIVE.value and run.source_run_id is not None:
        return run.source_run_id
    return run.id


class GroupStatus(StrEnum):
    """Where a group stands."""

    RUNNING = "running"
    """Children are running or not started yet."""
    SUCCEEDED = "succeeded"
    """Every child finished, and no more failed (or were cancelled) than tolerated."""
    FAILED = "failed"
    """More children failed or were cancelled than tolerated; the rest are not started
    and the running ones are asked to cancel."""
    STOPPED = "stopped"
    """Its parent was cancelled: the rest are not started and the running ones are asked
    to cancel."""


@dataclass(frozen=True, slots=True)
class Item:
    """One item of a group: the task a child runs and its payload as stored: compact
    JSON, or with the app's codecs their envelope (:mod:`runlane_sqs.core.values`)."""

    task: str
    payload_text: str
    """As an :class:`Item`'s."""


@dataclass(frozen=True, slots=True)
class Then:
    """A group's callback: triggered once when the group joins, whether it succeeded or
    failed (its context says which)."""

    task: str
    payload_text: str


@dataclass(frozen=True, slots=True)
class Group:
    """The record of one group: its size, its window, its counts."""

    id: str
    environment: str
    total: int
    window: int
    """Children running at once, at most (``max_in_flight``)."""
    tolerate: int
    """Children that may fail (or be cancelled) before the group fails."""
    created_at: datetime
    bounds: tuple[int, ...] = (0,)
    """The index of each chunk's first item."""
    items_key: str = ""
    """Which opening's chunks hold the items: each attempt that opens the group writes
    its chunks under a key of its own before the record, and the record that lands names
    its opening's (an attempt that lost names none)."""
    parent_run_id: str | None = None
    """The run waiting for the group (``ctx.map``)."""
    then: Then | None = None
    next_tasks: tuple[str, ...] = ()
    """A chain's tasks after this group's one child: when it succeeds, the next task
    starts as a group of its own with the child's result as its payload."""
    started: int = 0
    """Positions started so far: ``0 .. started - 1``."""
    lanes: Mapping[int, int] = field(default_factory=dict)
    """Lane -> the position of the child running in it (started, not counted yet): at
    most ``window`` lanes, numbered ``0 .. window - 1``."""
    generation: int = 0
    """How many times ``runs retry-failed`` reran the group's failed children."""
    redriven: tuple[tuple[int, int], ...] = ()
    """``(index, generation)`` of each rerun, in the order they were asked for: the
    ``k``-th is position ``total + k``, and an item's current child is the
    :func:`redrive_run_id` of its latest rerun."""
    redrive_by: tuple[str, str] | None = None
    """Who asked for the latest redrive and why: each rerun's link says so."""
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    joined_at: datetime | None = None
    """When the join was done (the parent resumed or the callback triggered)."""
    stopped_at: datetime | None = None
    """When the group was stopped because its parent was cancelled: no child starts
    after, the running ones are asked to cancel."""
    review_at: datetime | None = None
    """When maintenance next looks at the group (``None`` once it has joined)."""

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.cancelled

    @property
    def status(self) -> GroupStatus:
        if self.stopped_at is not None:
            return GroupStatus.STOPPED
        if self.failed + self.cancelled > self.tolerate:
            return GroupStatus.FAILED
        if self.finished >= self.total:
            return GroupStatus.SUCCEEDED
        return GroupStatus.RUNNING

    @property
    def running(self) -> int:
        """Children started that have not been counted."""
        return len(self.lanes)

    @property
    def positions(self) -> int:
        """Positions to start in all: the items, then each rerun."""
        return self.total + len(self.redriven)

    @property
    def allowance(self) -> int:
        """Failed (or cancelled) children the group still tolerates; below 0 it failed."""
        return self.tolerate - self.failed - self.cancelled

    @property
    def complete(self) -> bool:
        """Decided: every child finished, or too many failed, or the parent was
        cancelled. No child starts after."""
        return self.status is not GroupStatus.RUNNING

    @property
    def closed(self) -> bool:
        """Ready to join: complete, and no child left in its lanes. A group that failed
        (or was stopped) asks the children still running to cancel and closes once they
        are counted, so its join, its parent and its callback see every child's final
        status, and ``runs retry-failed`` finds none still running."""
        return self.complete and not self.lanes

    def room(self) -> dict[int, int]:
        """The free lanes to fill now, each with the position it starts (none once the
        group is complete or every position has started)."""
        if self.complete:
            return {}
        free = (lane for lane in range(self.window) if lane not in self.lanes)
        return dict(zip(free, range(self.started, self.positions), strict=False))

    def at(self, position: int) -> tuple[int, str]:
        """The item index and the child run id of a position."""
        if position < self.total:
            return position, child_run_id(self.id, position)
        index, generation = self.redriven[position - self.total]
        return index, redrive_run_id(self.id, index, generation)

    def position_of(self, run_id: str, index: int) -> int | None:
        """The position whose child is ``run_id`` (item ``index``'s first child or one of
        its reruns); ``None`` if the run is not one of this group's children."""
        if run_id == child_run_id(self.id, index):
            return index
        for k, (rerun, generation) in enumerate(self.redriven):
            if rerun == index and redrive_run_id(self.id, index, generation) == run_id:
                return self.total + k
        return None

    def replaced(self, position: int) -> str:
        """The run id of the child a rerun's position replaces: its item's child before
        that rerun."""
        index, _ = self.at(position)
        earlier = [
            redrive_run_id(self.id, index, generation)
            for rerun, generation in self.redriven[: position - self.total]
            if rerun == index
        ]
        return earlier[-1] if earlier else child_run_id(self.id, index)

    def lane_of(self, position: int) -> int | None:
        """The lane a position runs in; ``None`` once it is counted (or not started)."""
        for lane, held in self.lanes.items():
            if held == position:
                return lane
        return None

    def child_id(self, index: int) -> str:
        """The run id of item ``index``'s current child (its latest rerun, if any)."""
        for redriven, generation in reversed(self.redriven):
            if redriven == index:
                return redrive_run_id(self.id, index, generation)
        return child_run_id(self.id, index)

    def chunk_of(self, index: int) -> int:
        """The chunk that holds item ``index``."""
        return bisect.bisect_right(self.bounds, index) - 1

    def summary(self) -> dict[str, JSON]:
        """What the parent's wait records and the callback's context reads: the group's
        counts (results stay with the children)."""
        return {
            "group": self.id,
            "status": self.status.value,
            "total": self.total,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "cancelled": self.cancelled,
        }

    def with_changes(self, **changes: Any) -> Group:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class ChildOutcome(Generic[R]):
    """How one child of a group finished (or that it has not)."""

    index: int
    run_id: str
    status: RunStatus | None
    """``None``: the child was never started (its group failed first)."""
    result: R | None = None
    """What a child that succeeded returned: as its task's result type for a map over a
    task that declares one, else the stored JSON."""
    failure: Failure | None = None


ReadChildren = Callable[[int, int], "list[Run | None]"]
"""Reads the child runs of items ``start .. start + limit - 1`` from storage."""


@dataclass(frozen=True)
class GroupResults(Generic[R]):
    """What ``ctx.map`` returns and a group's callback reads (``ctx.joined_group()``):
    the group's counts; its children's results and failures are read from storage in
    pages, by item index, when iterated (never copied into the parent). Generic in the
    children's result type: a map's task's (each stored result converted to it when
    read, as ``task.result_of`` does), ``Any`` (the stored JSON) for other groups."""

    group_id: str
    status: GroupStatus
    total: int
    succeeded: int
    failed: int
    cancelled: int
    read: ReadChildren = field(repr=False, compare=False)
    page_size: int = 100
    convert: Callable[[JSON], R] | None = field(default=None, repr=False, compare=False)
    """Gives a stored result as the children's result type (``None``: kept as JSON)."""

    @classmethod
    def of(
        cls,
        summary: dict[str, JSON],
        read: ReadChildren,
        convert: Callable[[JSON], Any] | None = None,
    ) -> GroupResults[Any]:
        return cls(
            group_id=str(summary["group"]),
            status=GroupStatus(summary["status"]),
            total=int(summary["total"]),
            succeeded=int(summary["succeeded"]),
            failed=int(summary["failed"]),
            cancelled=int(summary["cancelled"]),
            read=read,
            convert=convert,
        )

    @property
    def ok(self) -> bool:
        return self.status is GroupStatus.SUCCEEDED

    def outcomes(self, start: int = 0) -> Iterator[ChildOutcome[R]]:
        """Every child's outcome from item ``start`` on, in index order."""
        for index, run in self._children(start):
            yield self._outcome(index, run)

    def _children(self, start: int) -> Iterator[tuple[int, Run | None]]:
        for first in range(start, self.total, self.page_size):
            for offset, run in enumerate(self.read(first, self.page_size)):
                yield first + offset, run

    def _outcome(self, index: int, run: Run | None) -> ChildOutcome[R]:
        if run is None:
            return ChildOutcome(index, child_run_id(self.group_id, index), None)
        result = run.result
        if self.convert is not None and run.status is RunStatus.SUCCEEDED:
            result = self.convert(result)
        return ChildOutcome(index, run.id, run.status, result, run.failure)

    def results(self) -> Iterator[R | None]:
        """Each child's result in index order (``None`` for a child that did not
        succeed): as the children's result type, for a map over a task that declares one
        (a stored result that no longer validates raises
        :class:`~runlane_sqs.core.errors.InvalidPayloadError`)."""
        for outcome in self.outcomes():
            yield outcome.result if outcome.status is RunStatus.SUCCEEDED else None

    def failures(self) -> Iterator[ChildOutcome[R]]:
        """The children that failed, were cancelled or never started."""
        for index, run in self._children(0):
            if run is None or run.status is not RunStatus.SUCCEEDED:
                yield self._outcome(index, run)


class GroupFailed(RunlaneError):
    """``ctx.map`` (or ``ctx.join``) found its group failed: more children failed or were
    cancelled than it tolerates. Not retried (the group's outcome is recorded); catch it
    to go on with the children that succeeded, whose results ``results`` pages."""

    def __init__(self, results: GroupResults) -> None:
        super().__init__(
            f"group {results.group_id} failed: {results.failed} failed and "
            f"{results.cancelled} cancelled of {results.total} children"
        )
        self.results = results


COUNTED = {
    RunStatus.SUCCEEDED: "succeeded",
    RunStatus.FAILED: "failed",
    RunStatus.CANCELLED: "cancelled",
}
"""The group count each terminal status of a child adds to."""


def tolerance(tolerate: int | float, total: int) -> int:
    """Failed children a group tolerates: a count, or a fraction of ``total`` (below 1)."""
    if isinstance(tolerate, bool) or not isinstance(tolerate, int | float):
        raise ConfigurationError(f"tolerate must be a count or a fraction; got {tolerate!r}")
    if isinstance(tolerate, float):
        if not 0 <= tolerate < 1:
            raise ConfigurationError(
                f"tolerate as a fraction must be at least 0 and below 1; got {tolerate}"
            )
        return int(tolerate * total)
    if tolerate < 0:
        raise ConfigurationError(f"tolerate must not be negative; got {tolerate}")
    return tolerate


def check_window(max_in_flight: int) -> int:
    if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
        raise ConfigurationError(
            f"max_in_flight must be a whole number of at least 1; got {max_in_flight!r}"
        )
    return max_in_flight


def chunk(items: Sequence[Item]) -> tuple[tuple[int, ...], list[list[Item]]]:
    """Items in chunks of at most :data:`CHUNK_BYTES`; returns each chunk's first index
    and the chunks. Raises :class:`PayloadTooLarge` for a group past :data:`GROUP_BYTES`."""
    bounds: list[int] = [0]
    chunks: list[list[Item]] = [[]]
    size = total = 0
    for index, item in enumerate(items):
        weight = len(item.task) + len(item.payload_text.encode()) + 8
        total += weight
        if chunks[-1] and size + weight > CHUNK_BYTES:
            bounds.append(index)
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += weight
        if total > GROUP_BYTES:
            raise PayloadTooLarge("the items of one group", total, GROUP_BYTES)
    return tuple(bounds), chunks


def redrive(group: Group, unsuccessful: Sequence[tuple[int, RunStatus]]) -> Group:
    """The group reopened to rerun its ``unsuccessful`` children (each an index and its
    child's status, failed or cancelled): their counts are taken back, each rerun is a
    new position after the others (so the reruns start through the window, as the items
    never started do), and the join is done again. Raises
    :class:`~runlane_sqs.core.errors.IllegalTransition` for a group that has not joined,
    was stopped with its parent, has children still running, or has nothing to rerun."""
    if group.joined_at is None:
        raise IllegalTransition(f"group {group.id} has not joined yet; nothing to rerun")
    if group.stopped_at is not None:
        raise IllegalTransition(f"group {group.id} was stopped with its parent; nothing to rerun")
    if group.lanes:
        raise IllegalTransition(
            f"{len(group.lanes)} child(ren) of group {group.id} are still running (asked to "
            "cancel); retry once they have ended"
        )
    if not unsuccessful and group.started >= group.total:
        raise IllegalTransition(f"every child of group {group.id} succeeded; nothing to rerun")
    generation = group.generation + 1
    rerun = sorted({index for index, _ in unsuccessful})
    return replace(
        group,
        generation=generation,
        redriven=group.redriven + tuple((index, generation) for index in rerun),
        failed=group.failed - sum(1 for _, s in unsuccessful if s is RunStatus.FAILED),
        cancelled=group.cancelled - sum(1 for _, s in unsuccessful if s is RunStatus.CANCELLED),
        joined_at=None,
    )
