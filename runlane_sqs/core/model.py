"""The run record and its history: plain values, no I/O; the ids of new runs and the
fencing tokens of new leases."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cached_property
from typing import Any

JSON = Any
"""A value that round-trips through ``json.dumps``/``json.loads``."""


RUN_ID_PATTERN = re.compile(r"^[0-9a-f]{32}$")
"""How every run id is written (:func:`new_run_id`)."""


def new_run_id() -> str:
    """A random, unguessable run id (128 bits, lowercase hex)."""
    return uuid.uuid4().hex


def is_run_id(value: object) -> bool:
    """Whether ``value`` is written as a run id is (a forged or mistyped one is not)."""
    return isinstance(value, str) and RUN_ID_PATTERN.fullmatch(value) is not None


def new_lease_token() -> str:
    """A fresh fencing token for one attempt."""
    return uuid.uuid4().hex


class RunStatus(StrEnum):
    """Where a run is in its life. Terminal statuses never change again."""

    QUEUED = "queued"
    """Created and waiting for its first attempt (runnable once ``due_at`` has passed)."""
    RUNNING = "running"
    """An attempt holds the lease."""
    RETRYING = "retrying"
    """An attempt failed; the retry policy scheduled another one at ``due_at``."""
    RELEASED = "released"
    """An attempt ended without failure and waits (a time, a signal, a token, a run)."""
    CANCEL_REQUESTED = "cancel_requested"
    """Cancellation was asked for while an attempt held the lease."""
    PARKED = "parked"
    """Workers that received its wakeup do not register its task. Not republished; a
    worker that registers the task, maintenance or an operator unparks it."""
    SUCCEEDED = "succeeded"
    """The handler returned a result. Terminal."""
    FAILED = "failed"
    """The last allowed attempt failed, or the failure was not retryable. Terminal."""
    CANCELLED = "cancelled"
    """Cancelled by an operator. Terminal."""

    @cached_property
    def is_terminal(self) -> bool:
        """True for succeeded, failed and cancelled (each member's answer is kept: every
        write of a run asks it several times)."""
        return self in TERMINAL_STATUSES

    @cached_property
    def is_runnable(self) -> bool:
        """True when a worker may claim the run once it is due."""
        return self in RUNNABLE_STATUSES


TERMINAL_STATUSES = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})
RUNNABLE_STATUSES = frozenset({RunStatus.QUEUED, RunStatus.RETRYING, RunStatus.RELEASED})
LEASED_STATUSES = frozenset({RunStatus.RUNNING, RunStatus.CANCEL_REQUESTED})


class EventType(StrEnum):
    """What one history record says happened."""

    TRIGGERED = "triggered"
    """The run was created by a trigger."""
    STARTED = "started"
    """A worker claimed the lease and began an attempt."""
    SUCCEEDED = "succeeded"
    """The attempt returned; the run is finished."""
    ATTEMPT_FAILED = "attempt_failed"
    """The attempt raised; ``data`` holds the failure and the retry time, if any."""
    FAILED = "failed"
    """No attempt is left (or the failure is not retryable); the run is finished."""
    LEASE_EXPIRED = "lease_expired"
    """Maintenance found the lease expired and made the same run runnable again."""
    ATTEMPT_TIMED_OUT = "attempt_timed_out"
    """The attempt passed the task's fixed deadline; the retry policy decides what follows."""
    CANCEL_REQUESTED = "cancel_requested"
    """An operator asked to cancel a running run; its worker learns at the next heartbeat."""
    CANCELLED = "cancelled"
    """The run was cancelled; ``data`` holds the actor and the reason."""
    RELEASED = "released"
    """The attempt ended without failure to wait; ``data["wait"]`` says for what."""
    STEP_RECORDED = "step_recorded"
    """A durable step's result was recorded; later attempts reuse it."""
    SIGNAL_RECEIVED = "signal_received"
    """A signal woke the run at its wait."""
    TOKEN_COMPLETED = "token_completed"
    """The token the run waited on was completed."""
    TOKEN_TIMED_OUT = "token_timed_out"
    """The token the run waited on timed out."""
    WAIT_TIMED_OUT = "wait_timed_out"
    """A signal wait reached its timeout before any signal."""
    RESUMED = "resumed"
    """The run the run waited on finished."""
    LINKED_RUN = "linked_run"
    """An operator created a retry or rerun of this finished run; ``data`` names it."""
    PARKED = "parked"
    """No worker that received the run's wakeup registers its task; ``data`` names one."""
    UNPARKED = "unparked"
    """The parked run is runnable again; ``data`` says who unparked it."""
    WAITING_FOR_SLOT = "waiting_for_slot"
    """A claim found its queue's (or key's) concurrency limit reached; the run waits for
    a slot, with no attempt counted. ``data`` names the scope and the limit."""
    SLOT_FREED = "slot_freed"
    """A slot of the scope the run waited on freed; the run is runnable again."""
    WAITING_FOR_RATE = "waiting_for_rate"
    """A claim found the run early for its rate limits: it sleeps until its reserved
    start, with no attempt counted."""
    RATE_LIMIT_CHANGED = "rate_limit_changed"
    """A deploy raised or removed a rate limit the run slept for: it is due at once and
    reserves its start again. ``data`` names the limit."""
    TURN_REACHED = "turn_reached"
    """The earlier runs of its ordering key finished; the run holds the key's turn and
    is due."""


@dataclass(frozen=True, slots=True)
class Failure:
    """Why an attempt failed, as recorded in storage."""

    type: str
    message: str
    traceback: str = ""
    retryable: bool = True

    def to_json(self) -> dict[str, JSON]:
        return {
            "type": self.type,
            "message": self.message,
            "traceback": self.traceback,
            "retryable": self.retryable,
        }

    @classmethod
    def from_json(cls, data: dict[str, JSON]) -> Failure:
        return cls(
            type=str(data.get("type", "")),
            message=str(data.get("message", "")),
            traceback=str(data.get("traceback", "")),
            retryable=bool(data.get("retryable", True)),
        )


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a run's attempt said it got (``ctx.progress``; docs/progress.md)."""

    done: int | float
    total: int | float | None = None
    """``None``: the attempt did not say how much there is."""
    message: str | None = None
    """Any text the handler gave: stored as is, shown escaped."""
    attempt: int = 0
    """The attempt that reported it."""
    at: datetime | None = None
    """When it was reported (by the worker's clock)."""

    @property
    def fraction(self) -> float | None:
        """``done / total`` within 0 and 1 (``None`` without a total)."""
        if not self.total:
            return None
        return max(0.0, min(1.0, self.done / self.total))

    def summary(self) -> str:
        """``3 of 10 (30%): message``; the message as stored (shown escaped)."""
        line = _number_text(self.done)
        if self.total is not None:
            line += f" of {_number_text(self.total)}"
            if self.fraction is not None:
                line += f" ({self.fraction:.0%})"
        return f"{line}: {self.message}" if self.message else line

    def to_json(self) -> dict[str, JSON]:
        return {
            "done": self.done,
            "total": self.total,
            "message": self.message,
            "attempt": self.attempt,
            "at": self.at.isoformat() if self.at is not None else None,
        }


def _number_text(number: float) -> str:
    return f"{number:g}" if isinstance(number, float) else str(number)


@dataclass(frozen=True, slots=True)
class Lease:
    """Temporary ownership of a run by one worker for one attempt."""

    owner: str
    token: str
    """A fresh random value per attempt: the fencing token every attempt write carries."""
    expires_at: datetime

    def is_live(self, now: datetime) -> bool:
        return now < self.expires_at


class LinkKind(StrEnum):
    """How an operator made a new run from a finished one (the audit link)."""

    RETRY = "retry"
    """From a failed run: try the same work again."""
    RERUN = "rerun"
    """From any finished run: run the same work again."""
    REDRIVE = "redrive"
    """From a parent that failed with its group: the group's failed children were rerun
    (``runs retry-failed``) and the group joined again; the new run's ``ctx.map`` calls
    find the groups of the run it redrives, with their new results."""


class WaitKind(StrEnum):
    """What a released run waits for."""

    TIME = "time"
    """A point in time (``ctx.release``)."""
    SIGNAL = "signal"
    """A signal sent to a key (``ctx.wait_for_signal``)."""
    TOKEN = "token"
    """A token's decision (``ctx.wait_for_token``)."""
    RUN = "run"
    """Another run to finish (``ctx.wait_for_run``)."""
    GROUP = "group"
    """A group of runs to join (``ctx.map``): target is the group id."""


@dataclass(frozen=True, slots=True)
class Wait:
    """One wait of a run: its kind, its target and the handler call site it belongs to.

    ``name`` identifies the wait within the run (kind, target and the order of the call in
    the attempt), so the next attempt finds the result at the same wait.
    """

    kind: WaitKind
    name: str
    target: str | None = None
    """The signal key, token id or run id."""
    until: datetime | None = None
    """Release time (``time``) or timeout (``signal``); ``None`` waits without limit."""

    def to_json(self) -> dict[str, JSON]:
        data: dict[str, JSON] = {"kind": self.kind.value, "name": self.name}
        if self.target is not None:
            data["target"] = self.target
        if self.until is not None:
            data["until"] = self.until.isoformat()
        return data

    @classmethod
    def from_json(cls, data: dict[str, JSON]) -> Wait:
        until = data.get("until")
        return cls(
            kind=WaitKind(data["kind"]),
            name=str(data["name"]),
            target=data.get("target"),
            until=datetime.fromisoformat(until) if isinstance(until, str) else None,
        )


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One append-only history record. ``seq`` starts at 1 and has no gaps."""

    seq: int
    type: EventType
    at: datetime
    attempt: int
    data: dict[str, JSON] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ScheduleOrigin:
    """How a schedule made a run: the run records it, and its ``triggered`` event says."""

    schedule_id: str
    occurrence: datetime | None
    """The occurrence the run is (``None``: an operator's extra run, ``trigger_now``)."""
    pass_id: str | None = None
    """The maintenance pass that created an occurrence's run."""

    def event_data(self) -> dict[str, JSON]:
        data: dict[str, JSON] = {
            "schedule": self.schedule_id,
            "occurrence": self.occurrence.isoformat() if self.occurrence else None,
        }
        if self.pass_id is not None:
            data["pass"] = self.pass_id
        return data


@dataclass(frozen=True, slots=True)
class Slot:
    """One concurrency slot an attempt holds: the limit's scope (``queue#{queue}`` or
    ``key#{task}#{key}``, :mod:`runlane_sqs.core.slots`) and the limit it was taken
    under."""

    scope: str
    limit: int


class KeyKind(StrEnum):
    """The kinds of key a trigger may hold."""

    IDEMPOTENCY = "idempotency"
    """Duplicate triggers return the existing run; released when the run fails."""
    SINGLETON = "singleton"
    """At most one active run per key; released when the run finishes."""
    DEBOUNCE = "debounce"
    """Later triggers collapse into the run until it starts; the key's claim ends at the
    run's cap (:mod:`runlane_sqs.core.debounce`)."""
    BATCH = "batch"
    """Later triggers add their items to the run until it is full or starts; the key's
    claim ends when the run is due by age (:mod:`runlane_sqs.core.batches`)."""


@dataclass(frozen=True, slots=True)
class Run:
    """The authoritative record of one durable invocation of a task."""

    id: str
    environment: str
    task: str
    queue: str
    status: RunStatus
    payload: JSON
    created_at: datetime
    updated_at: datetime
    seq: int
    """Sequence number of the last event; every state change advances it."""
    attempt: int = 0
    """How many attempts have started (the first attempt is 1)."""
    due_at: datetime | None = None
    """When a runnable run may next be claimed."""
    lease: Lease | None = None
    result: JSON = None
    failure: Failure | None = None
    idempotency_key: str | None = None
    singleton_key: str | None = None
    deadline_at: datetime | None = None
    """The current attempt's fixed deadline (tasks with a ``timeout`` only)."""
    lease_losses: int = 0
    """Leases that expired in a row; reset by any outcome an attempt records."""
    wake_at: datetime | None = None
    """When maintenance should next publish a wakeup for this runnable run
    (``None``: at ``due_at``). Moves forward each time a wakeup is published."""
    publishes: int = 0
    """Wakeups published by maintenance since the run last became runnable."""
    review_at: datetime | None = None
    """An earlier look maintenance takes at this run than its agenda time: set when its
    wakeup was published at once, to its due time plus the lease duration (see
    :func:`~runlane_sqs.core.indexes.listed_at`). Cleared by every state change; a claim on
    the wakeup's hint leaves the stored listing as it is."""
    line_at: datetime | None = None
    """When the wakeup this runnable run waits on became visible in its queue, kept while
    maintenance holds back a republish because the queue's line has not reached it yet
    (:func:`~runlane_sqs.core.recovery.line_position`). Cleared by every state change."""
    failures: int = 0
    """Attempts that failed or timed out: what the retry policy counts (releases do not)."""
    waiting: Wait | None = None
    """What a released run waits for (``None`` otherwise)."""
    wait_results: dict[str, JSON] = field(default_factory=dict)
    """Results of satisfied waits by wait name: the next attempt reads them at its waits."""
    steps: dict[str, JSON] = field(default_factory=dict)
    """Recorded durable step results by step name."""
    watched: bool = False
    """Another run waits for this one; finishing it resumes the waiters."""
    opened_groups: bool = False
    """The run opened a group (``ctx.map``): it carries no TTL expiry, and ``runs prune``
    deletes its groups with it (:mod:`runlane_sqs.core.groups`)."""
    source_run_id: str | None = None
    """The finished run this one retries or reruns (the audit link)."""
    source_kind: str | None = None
    """``retry`` or ``rerun`` when ``source_run_id`` is set."""
    parked_from: RunStatus | None = None
    """The runnable status a parked run returns to when it is unparked."""
    parked_reason: str | None = None
    """Why a parked run is parked: ``unknown_task`` (a worker or maintenance that
    registers the task unparks it), or ``history_diverged`` (only an operator does:
    :mod:`runlane_sqs.core.replay`)."""
    schedule_id: str | None = None
    """The schedule that made this run (an occurrence, or an operator's ``trigger``)."""
    scheduled_for: datetime | None = None
    """The occurrence this run is (``None`` for a run an operator triggered by hand)."""
    concurrency_key: str | None = None
    """The key its task's ``key_limit`` counts runs by (fixed at trigger time)."""
    slots: tuple[Slot, ...] = ()
    """The concurrency slots the current attempt holds (empty without a lease)."""
    slot_wait: str | None = None
    """The scope whose slot this runnable run waits for (``None``: it waits for none)."""
    rate_start: datetime | None = None
    """The start its rate limits reserved for it (a claim found it early): it sleeps until
    then, and its claim at that time reserves nothing more (docs/rate-limits.md)."""
    ordering_key: str | None = None
    """Runs with the same ordering key execute one at a time in trigger order."""
    place: int | None = None
    """The run's number among its ordering key's runs (from 0, in trigger order)."""
    turn_wait: bool = False
    """The run waits for earlier runs of its ordering key to finish (not due meanwhile)."""
    group_id: str | None = None
    """The group this run is a child of (:mod:`runlane_sqs.core.groups`)."""
    group_index: int | None = None
    """The index of the child's item in its group."""
    joined_group: str | None = None
    """The group whose join triggered this run (a group's callback)."""
    debounce_key: str | None = None
    """The debounce key its first trigger claimed: later triggers of the key collapse
    into the run until it starts (:mod:`runlane_sqs.core.debounce`)."""
    retention: timedelta | None = None
    """How long the run is kept once finished before DynamoDB's TTL deletes it (``None``:
    until pruned), fixed when it is created (docs/operations.md, "Retention")."""
    batch_key: str | None = None
    """The batch key its first item claimed: later triggers of the key add their items
    to the run until it is full or starts (:mod:`runlane_sqs.core.batches`); its payload
    is the list of items."""
    collapsed: int = 0
    """Triggers that went to this run after the one that created it: a debounced run's
    collapses, a batch's items after the first."""
    item: int | None = None
    """On the ``Run`` a batched trigger returns only: its item's index in the run's
    payload."""
    trace: str | None = None
    """The trace context of the span that triggered the run, packed
    (:func:`~runlane_sqs.core.telemetry.pack_trace`); its attempts continue that trace."""
    app_version: str | None = None
    """The app version its first attempt ran under (``None``: none was known; docs/
    versions.md). Each attempt's ``started`` event names the version that ran it."""
    tags: dict[str, str] = field(default_factory=dict)
    """Key/value labels the run can be found by (:mod:`runlane_sqs.core.tags`), sorted
    by key, fixed when it is created."""
    progress: Progress | None = None
    """What its latest reporting attempt said of how far it got (``ctx.progress``)."""
    state: JSON = None
    """The small JSON value its latest attempt set (``ctx.set_state``)."""
    created: bool = False
    """True only on the ``Run`` returned by the trigger that created it."""

    @property
    def is_terminal(self) -> bool:
        return self.status.is_terminal

    @property
    def not_started(self) -> bool:
        """Queued and never attempted: a debounce's trigger or a batch's item may still
        join it."""
        return self.status is RunStatus.QUEUED and self.attempt == 0 and self.lease is None

    def is_due(self, now: datetime) -> bool:
        """A runnable run with no due time waits for something else (a signal, a token)."""
        return self.due_at is not None and self.due_at <= now

    def with_changes(self, **changes: Any) -> Run:
        return replace(self, **changes)


def keys_to_release(run: Run) -> list[tuple[KeyKind, str]]:
    """The keys a finished run no longer holds (its idempotency key only on failure)."""
    keys: list[tuple[KeyKind, str]] = []
    if run.idempotency_key is not None and run.status is RunStatus.FAILED:
        keys.append((KeyKind.IDEMPOTENCY, run.idempotency_key))
    if run.singleton_key is not None and run.status.is_terminal:
        keys.append((KeyKind.SINGLETON, run.singleton_key))
    return keys


def finishing_needs_storage(run: Run) -> bool:
    """Whether a finished run has keys to free, waiters to resume, a turn to hand on or
    a group to move on."""
    return (
        run.watched
        or bool(keys_to_release(run))
        or run.ordering_key is not None
        or run.group_id is not None
    )
