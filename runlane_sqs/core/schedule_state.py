"""A schedule's durable state and the decisions maintenance and operators make on it.

The state lives in DynamoDB beside the definition it was computed from, so schedules
survive deploys and operators can read them without the app's code. Every change is a
conditional write on ``version``. Pure functions here decide; the engine writes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from itertools import islice

from runlane_sqs.core.schedules import CatchUp, Schedule

CATCH_UP_PER_PASS = 50
"""Most missed occurrences of one schedule a pass creates with catch-up ``all``."""
LATE_OCCURRENCES = 3
"""How many maintenance periods late an occurrence may be found and still count as on
time for catch-up ``skip`` (EventBridge may deliver a minute's invocation late)."""


class ScheduleStatus(StrEnum):
    """Whether a stored schedule still creates runs."""

    ACTIVE = "active"
    """Listed on the agenda at its next occurrence."""
    PAUSED = "paused"
    """Paused by an operator; creates nothing until resumed."""
    FINISHED = "finished"
    """No occurrence is left (a ``once`` that fired, or past ``end_at``)."""
    REMOVED = "removed"
    """The app that registers its task no longer defines it (kept for the record)."""


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """A schedule as stored: its definition and where it stands."""

    schedule: Schedule
    status: ScheduleStatus
    next_at: datetime | None
    """The first occurrence not materialized yet (``None``: none left)."""
    last_at: datetime | None
    """The last occurrence materialized (or skipped by the catch-up policy)."""
    updated_at: datetime
    version: int = 0
    """Advanced by every write; writes are conditioned on the version they read."""
    runs: int = 0
    """Runs its occurrences created so far."""

    @property
    def id(self) -> str:
        return self.schedule.id

    @property
    def due_at(self) -> datetime | None:
        """When maintenance must look at it (``None``: it is off the agenda)."""
        return self.next_at if self.status is ScheduleStatus.ACTIVE else None

    def upcoming(self, count: int = 3) -> list[datetime]:
        """The next ``count`` occurrences it would create (none when it is not active)."""
        found: list[datetime] = []
        at = self.next_at if self.status is ScheduleStatus.ACTIVE else None
        while at is not None and len(found) < count:
            found.append(at)
            at = self.schedule.next_after(at)
        return found


def on_time_since(now: datetime, period: timedelta) -> datetime:
    """The oldest an occurrence found at ``now`` may be and still count as on time."""
    return now - period * LATE_OCCURRENCES


def new_state(schedule: Schedule, now: datetime, period: timedelta) -> ScheduleState:
    """A schedule seen for the first time: its first occurrence that is still on time
    (a deploy just before an occurrence must not miss it; older ones were not missed,
    the schedule did not exist)."""
    next_at = schedule.next_after(on_time_since(now, period) - timedelta(milliseconds=1))
    return ScheduleState(
        schedule=schedule,
        status=ScheduleStatus.ACTIVE if next_at else ScheduleStatus.FINISHED,
        next_at=next_at,
        last_at=None,
        updated_at=now,
    )


def redefined(
    state: ScheduleState, schedule: Schedule, now: datetime, period: timedelta
) -> ScheduleState:
    """A stored schedule whose definition changed in code: the new one takes effect from
    its next occurrence that is on time and after the last one created. A paused
    schedule stays paused; a removed one comes back."""
    after = on_time_since(now, period) - timedelta(milliseconds=1)
    if state.last_at is not None:
        after = max(after, state.last_at)
    next_at = schedule.next_after(after)
    status = state.status
    if status is not ScheduleStatus.PAUSED:
        status = ScheduleStatus.ACTIVE if next_at else ScheduleStatus.FINISHED
    return _next_version(state, schedule=schedule, status=status, next_at=next_at, now=now)


def removed(state: ScheduleState, now: datetime) -> ScheduleState:
    """Code no longer defines it: off the agenda, kept readable."""
    return _next_version(state, status=ScheduleStatus.REMOVED, now=now)


def paused(state: ScheduleState, now: datetime) -> ScheduleState:
    return _next_version(state, status=ScheduleStatus.PAUSED, now=now)


def resumed(state: ScheduleState, now: datetime) -> ScheduleState:
    """Back on the agenda at the first occurrence it has not created: what was missed
    while paused follows the catch-up policy at the next pass."""
    next_at = state.next_at
    status = ScheduleStatus.ACTIVE if next_at else ScheduleStatus.FINISHED
    return _next_version(state, status=status, now=now)


@dataclass(frozen=True, slots=True)
class DuePlan:
    """What one pass does with one due schedule."""

    occurrences: list[datetime]
    """Occurrences to create runs for, oldest first."""
    skipped: int
    """Missed occurrences the catch-up policy leaves out (at least this many)."""
    after: ScheduleState
    """The state to write once the runs exist."""


def plan_due(state: ScheduleState, now: datetime, period: timedelta) -> DuePlan:
    """The occurrences of an active schedule that are due at ``now``, by its catch-up
    policy; ``period`` is how often maintenance runs (what counts as on time)."""
    schedule = state.schedule
    first = state.next_at
    if state.status is not ScheduleStatus.ACTIVE or first is None or first > now:
        return DuePlan([], 0, state)
    if schedule.catch_up is CatchUp.ALL:
        due = [first, *islice(schedule.occurrences(first, now), CATCH_UP_PER_PASS - 1)]
        return _plan(state, due, 0, schedule.next_after(due[-1]), now)
    latest = schedule.latest_until(now)
    if latest is None or latest < first:  # ``first`` is one: only if storage was edited
        latest = first
    skipped = 0 if latest == first else 1 + _count(schedule, first, latest)
    if schedule.catch_up is CatchUp.SKIP and latest < on_time_since(now, period):
        return _plan(state, [], skipped + 1, schedule.next_after(now), now, last=latest)
    return _plan(state, [latest], skipped, schedule.next_after(now), now)


def _count(schedule: Schedule, first: datetime, latest: datetime, cap: int = 1000) -> int:
    """Occurrences strictly between two occurrences (counted up to ``cap``)."""
    count = 0
    for _ in schedule.occurrences(first, latest - timedelta(milliseconds=1)):
        count += 1
        if count >= cap:
            break
    return count


def _plan(
    state: ScheduleState,
    due: list[datetime],
    skipped: int,
    next_at: datetime | None,
    now: datetime,
    *,
    last: datetime | None = None,
) -> DuePlan:
    status = ScheduleStatus.ACTIVE if next_at else ScheduleStatus.FINISHED
    after = _next_version(
        state,
        status=status,
        next_at=next_at,
        last_at=due[-1] if due else (last or state.last_at),
        runs=state.runs + len(due),
        now=now,
    )
    return DuePlan(due, skipped, after)


def _next_version(state: ScheduleState, *, now: datetime, **changes: object) -> ScheduleState:
    return replace(state, updated_at=now, version=state.version + 1, **changes)  # type: ignore[arg-type]
