"""Bulk recovery: retry, cancel or rerun every run a filter selects, as one durable
operation (docs/operations.md, "Bulk recovery").

An operation is a record of its own: what it does (its action and filter, who asked and
why), how fast (runs a second), where it stopped (the listing's cursor) and what it did so
far (runs examined, acted on, skipped and failed). It is written once a page of runs,
with the ids of the page to act on next, so a process that dies mid-way leaves it
resumable from its last checkpoint; the runs of that page are examined again, and those
done already are not done twice:

- a retry or rerun creates its new run under an id made of the operation's and the source
  run's (:func:`new_run_id_for`), so the second creation finds the first, and the link on
  the source names it (:func:`done_before`);
- a cancel records the operation in the run's history, so a run cancelled before the
  crash is known as this operation's.

One process carries an operation out at a time: the one holding its lease (``owner`` and
``lease_until``, renewed as it goes, :func:`due_for_renewal`). Every write of the record
is conditioned on the version the writer read, so once another process took it over (its
lease had expired) or an operator stopped it, the first process's next write is refused
and it stops: its record writes are fenced by the version, and it acts on no run once its
own clock says its lease is over. A running operation is on the agenda at the end of its
lease (:func:`agenda_at`), where maintenance takes it over if nobody renewed it; a pass
that runs out of time hands it back (:func:`handed_back`), listed at once.

Nothing here performs I/O or reads a clock.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import cast

from runlane_sqs.core.errors import ConfigurationError, IllegalTransition, InvalidKeyError
from runlane_sqs.core.model import (
    JSON,
    TERMINAL_STATUSES,
    EventType,
    LinkKind,
    Run,
    RunEvent,
    RunStatus,
)
from runlane_sqs.core.names import check_key, check_queue, check_task_name
from runlane_sqs.core.tags import has_tags, tag_filter

DEFAULT_RATE = 20.0
"""Runs a second an operation acts on unless told otherwise: gentle on the table and on
whatever the retried runs call."""
MAX_BULK_RATE = 1000.0
CHECKPOINT_RUNS = 25
"""An operation's record is written every this many runs (and once a page): the most a
process that dies leaves to be examined again when the operation is resumed."""
LEASE = timedelta(seconds=60)
"""How long a process holds an operation after its last write: another may resume it
only once that passed (its holder died). A new operation is not held, but is listed for
maintenance at its start plus this, so one its starter never carried out is carried out."""
RENEW_AFTER = LEASE / 2
"""A process renews its lease (writes its progress) once this much of it passed, even
mid-page: a live process never comes near the end of its lease."""
PARALLEL_RUNS = 8
"""The most runs of a page one process acts on at once (fewer at low rates,
:func:`parallel_runs`): an action is a few round trips to the store, so one at a time
would set the pace below the rate."""
MAX_BULK_REASON_CHARS = 500
OPERATION_ID_PATTERN = re.compile(r"^[0-9]{8}T[0-9]{6}-[0-9a-f]{8}$")


class BulkAction(StrEnum):
    """What an operation does to each run it selects."""

    RETRY = "retry"
    """A new run of each failed run (``runs.retry``), linked to it. A failed run that
    was retried already is skipped."""
    CANCEL = "cancel"
    """Cancel each unfinished run (``runs.cancel``)."""
    RERUN = "rerun"
    """A new run of each finished run (``runs.rerun``), linked to it."""


ALLOWED_STATUSES: dict[BulkAction, frozenset[RunStatus]] = {
    BulkAction.RETRY: frozenset({RunStatus.FAILED}),
    BulkAction.CANCEL: frozenset(set(RunStatus) - TERMINAL_STATUSES - {RunStatus.CANCEL_REQUESTED}),
    BulkAction.RERUN: TERMINAL_STATUSES,
}
"""The statuses each action can act on; the filter's statuses default to these."""


class OperationStatus(StrEnum):
    RUNNING = "running"
    """Acting, or left by a process that died (resumable once its lease expired)."""
    STOPPED = "stopped"
    """Stopped by an operator: resumable."""
    DONE = "done"
    """Every selected run was examined."""


class Outcome(StrEnum):
    """What became of one run an operation examined."""

    ACTED = "acted"
    SKIPPED = "skipped"
    """Not for this action (it changed since it was listed, or was retried already)."""
    FAILED = "failed"
    """The action raised an error (storage, a value that cannot be read): left as it is."""
    OUTSIDE = "outside"
    """Not selected: listed, but the filter's other conditions leave it out."""


@dataclass(frozen=True, slots=True)
class BulkFilter:
    """Which runs an operation selects: every condition given holds."""

    statuses: tuple[RunStatus, ...] = ()
    """Empty: every status the action can act on."""
    task: str | None = None
    queue: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    schedule: str | None = None
    group: str | None = None
    """A group's id, or a parent run's id (its groups): the children, read by their ids."""
    failure_type: str | None = None
    """The recorded failure's type: its qualified name (``myapp.errors.Timeout``) or the
    last part of it (``Timeout``)."""
    tags: tuple[tuple[str, str], ...] = ()
    """Tags every selected run carries, ``(key, value)``: read from the tag indexes of
    the first (docs/tags.md)."""

    def checked(self, action: BulkAction) -> BulkFilter:
        """The filter with its statuses filled in for ``action``; raises
        :class:`~runlane_sqs.core.errors.ConfigurationError` for a status the action
        cannot act on, a bad name or a created range that ends before it begins."""
        allowed = ALLOWED_STATUSES[action]
        statuses = self.statuses or tuple(s for s in RunStatus if s in allowed)
        refused = [s.value for s in statuses if s not in allowed]
        if refused:
            raise ConfigurationError(
                f"{action.value} acts on runs that are "
                f"{', '.join(sorted(s.value for s in allowed))}, not {', '.join(refused)}"
            )
        if self.task is not None:
            check_task_name(self.task)
        if self.queue is not None:
            check_queue(self.queue)
        if self.failure_type is not None:
            check_key("failure type", self.failure_type, 256)
        if self.group is not None:
            check_key("group", self.group, 256)
        tags = tag_filter(dict(self.tags)) if self.tags else ()
        after, before = self.created_after, self.created_before
        if after is not None and before is not None and after > before:
            raise ConfigurationError(f"created_after ({after}) is later than created_before")
        return replace(self, statuses=tuple(dict.fromkeys(statuses)), tags=tags)

    def selects(self, run: Run) -> bool:
        """Whether ``run`` (as listed) meets every condition."""
        failure = run.failure
        return (
            run.status in self.statuses
            and self.task in (None, run.task)
            and self.queue in (None, run.queue)
            and self.schedule in (None, run.schedule_id)
            and has_tags(run.tags, self.tags)
            and (self.created_after is None or run.created_at >= self.created_after)
            and (self.created_before is None or run.created_at <= self.created_before)
            and (
                self.failure_type is None
                or (
                    failure is not None
                    and self.failure_type in (failure.type, failure.type.rsplit(".", 1)[-1])
                )
            )
        )

    def to_json(self) -> dict[str, JSON]:
        return {
            "statuses": [s.value for s in self.statuses],
            "task": self.task,
            "queue": self.queue,
            "created_after": _time_json(self.created_after),
            "created_before": _time_json(self.created_before),
            "schedule": self.schedule,
            "group": self.group,
            "failure_type": self.failure_type,
            "tags": dict(self.tags),
        }

    @classmethod
    def from_json(cls, data: dict[str, JSON]) -> BulkFilter:
        return cls(
            statuses=tuple(RunStatus(str(s)) for s in cast(list[JSON], data["statuses"])),
            task=_text(data.get("task")),
            queue=_text(data.get("queue")),
            created_after=_time(data.get("created_after")),
            created_before=_time(data.get("created_before")),
            schedule=_text(data.get("schedule")),
            group=_text(data.get("group")),
            failure_type=_text(data.get("failure_type")),
            tags=tuple(cast(dict[str, str], data.get("tags") or {}).items()),
        )


@dataclass(frozen=True, slots=True)
class Tally:
    """Runs examined so far, by outcome."""

    acted: int = 0
    skipped: int = 0
    failed: int = 0
    outside: int = 0

    @property
    def selected(self) -> int:
        return self.acted + self.skipped + self.failed

    def add(self, outcome: Outcome) -> Tally:
        return replace(self, **{outcome.value: getattr(self, outcome.value) + 1})

    def to_json(self) -> dict[str, JSON]:
        return {
            "acted": self.acted,
            "skipped": self.skipped,
            "failed": self.failed,
            "outside": self.outside,
        }

    @classmethod
    def from_json(cls, data: dict[str, JSON]) -> Tally:
        return cls(**{o.value: int(cast(int, data.get(o.value, 0))) for o in Outcome})


@dataclass(frozen=True, slots=True)
class BulkOperation:
    """One bulk operation as stored: its request, where it stopped and what it did."""

    id: str
    action: BulkAction
    filter: BulkFilter
    actor: str
    reason: str
    rate: float
    status: OperationStatus
    created_at: datetime
    updated_at: datetime
    selected_at_start: int | None = None
    """How many runs the filter selected when the operation was started (its dry run)."""
    cursor: str | None = None
    """Where the listing goes on from, after the pending page (``None``: from the start,
    or nothing left when ``listed``)."""
    listed: bool = False
    """Whether the listing reached its end: once the pending runs are examined, done."""
    pending: tuple[str, ...] = ()
    """The ids of the selected runs of the page being acted on: a process that resumes
    the operation examines them again first."""
    tally: Tally = Tally()
    last_error: str | None = None
    """The last error an action raised, with its run's id."""
    owner: str | None = None
    lease_until: datetime | None = None
    finished_at: datetime | None = None
    version: int = 0

    def to_json(self) -> dict[str, JSON]:
        return {
            "id": self.id,
            "action": self.action.value,
            "filter": self.filter.to_json(),
            "actor": self.actor,
            "reason": self.reason,
            "rate": self.rate,
            "status": self.status.value,
            "created_at": _time_json(self.created_at),
            "updated_at": _time_json(self.updated_at),
            "selected_at_start": self.selected_at_start,
            "cursor": self.cursor,
            "listed": self.listed,
            "pending": list(self.pending),
            "tally": self.tally.to_json(),
            "last_error": self.last_error,
            "owner": self.owner,
            "lease_until": _time_json(self.lease_until),
            "finished_at": _time_json(self.finished_at),
            "version": self.version,
        }

    @classmethod
    def from_json(cls, data: dict[str, JSON]) -> BulkOperation:
        created, updated = _time(data["created_at"]), _time(data["updated_at"])
        assert created is not None and updated is not None
        selected = data.get("selected_at_start")
        return cls(
            id=str(data["id"]),
            action=BulkAction(str(data["action"])),
            filter=BulkFilter.from_json(cast(dict[str, JSON], data["filter"])),
            actor=str(data["actor"]),
            reason=str(data["reason"]),
            rate=float(cast(float, data["rate"])),
            status=OperationStatus(str(data["status"])),
            created_at=created,
            updated_at=updated,
            selected_at_start=int(cast(int, selected)) if selected is not None else None,
            cursor=_text(data.get("cursor")),
            listed=bool(data.get("listed", False)),
            pending=tuple(str(i) for i in cast(list[JSON], data.get("pending") or [])),
            tally=Tally.from_json(cast(dict[str, JSON], data.get("tally") or {})),
            last_error=_text(data.get("last_error")),
            owner=_text(data.get("owner")),
            lease_until=_time(data.get("lease_until")),
            finished_at=_time(data.get("finished_at")),
            version=int(cast(int, data.get("version", 0))),
        )


def new_operation(
    action: BulkAction,
    selection: BulkFilter,
    *,
    actor: str,
    reason: str,
    rate: float,
    selected: int | None,
    now: datetime,
) -> BulkOperation:
    """A new operation, not yet taken by a process. Raises
    :class:`~runlane_sqs.core.errors.ConfigurationError` for a bad filter, rate, actor or
    reason."""
    if not 0 < rate <= MAX_BULK_RATE:
        raise ConfigurationError(
            f"rate must be above 0 and at most {MAX_BULK_RATE:g} runs a second"
        )
    return BulkOperation(
        id=f"{now:%Y%m%dT%H%M%S}-{secrets.token_hex(4)}",
        action=action,
        filter=selection.checked(action),
        actor=check_key("actor", actor, 128),
        reason=check_key("reason", reason, MAX_BULK_REASON_CHARS) if reason else "",
        rate=rate,
        status=OperationStatus.RUNNING,
        created_at=now,
        updated_at=now,
        selected_at_start=selected,
        lease_until=now + LEASE,
    )


def check_operation_id(operation_id: object) -> str:
    if not isinstance(operation_id, str) or not OPERATION_ID_PATTERN.fullmatch(operation_id):
        raise InvalidKeyError(
            f"{operation_id!r} is not a bulk operation id (like 20261205T120000-1a2b3c4d)"
        )
    return operation_id


def taken(
    operation: BulkOperation, owner: str, now: datetime, *, force: bool = False
) -> BulkOperation:
    """``operation`` held by ``owner`` for :data:`LEASE`, to act on; raises
    :class:`~runlane_sqs.core.errors.IllegalTransition` if it is done or another process
    holds it (unless ``force``: its process is known to be gone)."""
    if operation.status is OperationStatus.DONE:
        raise IllegalTransition(f"bulk operation {operation.id} is done")
    if is_taken(operation, now) and operation.owner != owner and not force:
        raise IllegalTransition(
            f"bulk operation {operation.id} is being carried out by {operation.owner} (its "
            f"lease lasts until {operation.lease_until:%Y-%m-%d %H:%M:%S} UTC)"
        )
    return replace(
        operation,
        status=OperationStatus.RUNNING,
        owner=owner,
        lease_until=now + LEASE,
        updated_at=now,
    )


def checkpoint(
    operation: BulkOperation,
    *,
    tally: Tally,
    last_error: str | None,
    now: datetime,
    page: tuple[tuple[str, ...], str | None] | None,
) -> BulkOperation:
    """``operation`` once its pending runs were examined (``tally``), with the next
    ``page`` to act on (the ids it selected and the cursor after it) and its lease
    renewed; done if there is no page (the listing had ended)."""
    if page is None:
        return replace(
            operation,
            pending=(),
            tally=tally,
            last_error=last_error,
            updated_at=now,
            status=OperationStatus.DONE,
            owner=None,
            lease_until=None,
            finished_at=now,
        )
    chosen, cursor = page
    return replace(
        midway(operation, tally=tally, last_error=last_error, pending=chosen, now=now),
        cursor=cursor,
        listed=cursor is None,
    )


def midway(
    operation: BulkOperation,
    *,
    tally: Tally,
    last_error: str | None,
    pending: tuple[str, ...],
    now: datetime,
) -> BulkOperation:
    """``operation`` part-way through its page: the runs of it still to examine
    (``pending``) and the tally of those examined, its lease renewed."""
    return replace(
        operation,
        pending=pending,
        tally=tally,
        last_error=last_error,
        updated_at=now,
        lease_until=now + LEASE,
    )


def handed_back(
    operation: BulkOperation,
    *,
    tally: Tally,
    last_error: str | None,
    pending: tuple[str, ...],
    now: datetime,
) -> BulkOperation:
    """``operation`` given up by a process whose time is over (a maintenance pass), not
    done: still running, held by nobody, listed at once for whoever carries it on."""
    return replace(
        midway(operation, tally=tally, last_error=last_error, pending=pending, now=now),
        owner=None,
        lease_until=now,
    )


def is_taken(operation: BulkOperation, now: datetime) -> bool:
    """Whether a process holds ``operation`` now (its lease has not expired)."""
    return (
        operation.owner is not None
        and operation.lease_until is not None
        and operation.lease_until > now
    )


def due_for_renewal(operation: BulkOperation, now: datetime) -> bool:
    """Whether the process holding ``operation`` must write before acting on more runs:
    :data:`RENEW_AFTER` of its lease passed (or all of it: it must not act before its
    write, which is refused if another process took the operation over)."""
    until = operation.lease_until
    return until is None or now >= until - LEASE + RENEW_AFTER


def agenda_at(operation: BulkOperation) -> datetime | None:
    """When maintenance looks at ``operation`` (``None``: never, it is stopped or done):
    the end of its lease, where it takes over an operation whose process died."""
    if operation.status is not OperationStatus.RUNNING:
        return None
    return operation.lease_until or operation.updated_at + LEASE


def parallel_runs(rate: float) -> int:
    """How many runs of a page a process acts on at once at ``rate``: one per 10 runs a
    second, at least one and at most :data:`PARALLEL_RUNS`."""
    return max(1, min(PARALLEL_RUNS, int(rate // 10)))


def stopped(operation: BulkOperation, now: datetime) -> BulkOperation:
    """``operation`` stopped by an operator: its process stops at its next checkpoint
    (its write finds the record changed), and anyone may resume it."""
    if operation.status is OperationStatus.DONE:
        raise IllegalTransition(f"bulk operation {operation.id} is done")
    return replace(
        operation, status=OperationStatus.STOPPED, updated_at=now, owner=None, lease_until=None
    )


def new_run_id_for(operation_id: str, source_id: str) -> str:
    """The id of the run a retry or rerun of ``source_id`` by this operation creates: the
    same each time, so doing it again finds the first."""
    return hashlib.sha256(f"{operation_id}:{source_id}".encode()).hexdigest()[:32]


def done_by(operation_id: str, events: list[RunEvent]) -> bool:
    """Whether a run's history records an action of the operation ``operation_id`` (its
    link to a new run, or its cancel)."""
    return any(
        event.type in (EventType.LINKED_RUN, EventType.CANCELLED, EventType.CANCEL_REQUESTED)
        and event.data.get("operation") == operation_id
        for event in events
    )


def done_before(operation: BulkOperation, events: list[RunEvent]) -> tuple[Outcome, str] | None:
    """What a run's history says of it for this operation, before acting: done by it
    already (a checkpoint was lost, or another process of it acted meanwhile), or retried
    already by something else; ``None``: act."""
    if done_by(operation.id, events):
        return Outcome.ACTED, f"{operation.action.value} done already by this operation"
    for event in events:
        if (
            operation.action is BulkAction.RETRY
            and event.type is EventType.LINKED_RUN
            and event.data.get("kind") == LinkKind.RETRY.value
        ):
            return Outcome.SKIPPED, f"retried already as {event.data.get('run')}"
    return None


def _time_json(at: datetime | None) -> JSON:
    return at.isoformat() if at is not None else None


def _time(value: JSON) -> datetime | None:
    return datetime.fromisoformat(str(value)) if value is not None else None


def _text(value: JSON) -> str | None:
    return str(value) if value is not None else None
