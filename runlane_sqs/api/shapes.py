"""The stable JSON shapes of runs, events, attempts, tokens and schedules (pure functions).

What ``runlane-sqs ... --json`` prints, and what other tooling (the console) can reuse.
Times are ISO-8601 in UTC with millisecond precision and a ``Z`` suffix
(``2026-11-30T10:29:05.040Z``); absent values are ``null``. Fields are only ever added,
never renamed or removed. A lease's fencing token is never shown.
"""

from __future__ import annotations

from datetime import UTC, datetime

from runlane_sqs.core.attempts import Attempt
from runlane_sqs.core.groups import Group
from runlane_sqs.core.model import JSON, Failure, Lease, Run, RunEvent, Wait
from runlane_sqs.core.schedule_state import ScheduleState
from runlane_sqs.core.tokens import Token
from runlane_sqs.core.values import Sealed

UPCOMING_SHOWN = 3
"""Occurrences a schedule's shape lists in ``upcoming``."""


def iso(value: datetime | None) -> str | None:
    """``2026-11-30T10:29:05.040Z``; a naive time is taken to be UTC."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def failure_to_json(failure: Failure | None) -> dict[str, JSON] | None:
    return failure.to_json() if failure is not None else None


def lease_to_json(lease: Lease | None) -> dict[str, JSON] | None:
    """Who holds the run and until when (without the fencing token)."""
    if lease is None:
        return None
    return {"owner": lease.owner, "expires_at": iso(lease.expires_at)}


def wait_to_json(wait: Wait | None) -> dict[str, JSON] | None:
    if wait is None:
        return None
    return {
        "kind": wait.kind.value,
        "name": wait.name,
        "target": wait.target,
        "until": iso(wait.until),
    }


def run_to_json(run: Run) -> dict[str, JSON]:
    """One run as stored: identity, status, timing, lease, wait, outcome, what its
    attempts reported (progress, state), audit link, the schedule that made it, its
    concurrency key, the limit's scope it waits for, the app version it started under and
    its tags."""
    return {
        "id": run.id,
        "environment": run.environment,
        "task": run.task,
        "queue": run.queue,
        "status": run.status.value,
        "parked_reason": run.parked_reason,
        "attempt": run.attempt,
        "app_version": run.app_version,
        "failures": run.failures,
        "created_at": iso(run.created_at),
        "updated_at": iso(run.updated_at),
        "due_at": iso(run.due_at),
        "deadline_at": iso(run.deadline_at),
        "lease": lease_to_json(run.lease),
        "waiting": wait_to_json(run.waiting),
        "payload": value_to_json(run.payload),
        "result": value_to_json(run.result),
        "failure": failure_to_json(run.failure),
        "progress": run.progress.to_json() if run.progress is not None else None,
        "state": value_to_json(run.state),
        "idempotency_key": run.idempotency_key,
        "singleton_key": run.singleton_key,
        "source_run_id": run.source_run_id,
        "source_kind": run.source_kind,
        "schedule_id": run.schedule_id,
        "scheduled_for": iso(run.scheduled_for),
        "concurrency_key": run.concurrency_key,
        "ordering_key": run.ordering_key,
        "place": run.place,
        "waiting_for_turn": run.turn_wait,
        "slot_wait": run.slot_wait,
        "rate_start": iso(run.rate_start),
        "debounce_key": run.debounce_key,
        "batch_key": run.batch_key,
        "collapsed": run.collapsed,
        "group_id": run.group_id,
        "group_index": run.group_index,
        "joined_group": run.joined_group,
        "tags": dict(run.tags),
        "seq": run.seq,
    }


def group_to_json(group: Group) -> dict[str, JSON]:
    """One group as stored: its status, size, window, counts per status, how many
    children started and are running, its parent or callback, and when it joined."""
    return {
        "id": group.id,
        "status": group.status.value,
        "total": group.total,
        "started": group.started,
        "running": group.running,
        "generation": group.generation,
        "succeeded": group.succeeded,
        "failed": group.failed,
        "cancelled": group.cancelled,
        "max_in_flight": group.window,
        "tolerate": group.tolerate,
        "parent_run_id": group.parent_run_id,
        "then": group.then.task if group.then else None,
        "created_at": iso(group.created_at),
        "joined_at": iso(group.joined_at),
    }


def event_to_json(event: RunEvent) -> dict[str, JSON]:
    """One history record: ``seq`` (1, 2, ...), ``type``, ``at``, ``attempt``, ``data``."""
    return {
        "seq": event.seq,
        "type": event.type.value,
        "at": iso(event.at),
        "attempt": event.attempt,
        "data": event.data,
    }


def attempt_to_json(attempt: Attempt) -> dict[str, JSON]:
    """One attempt: ``number``, ``worker``, ``app_version``, ``started_at``,
    ``ended_at``, ``outcome``, ``failure``."""
    return {
        **attempt.to_json(),
        "started_at": iso(attempt.started_at),
        "ended_at": iso(attempt.ended_at),
    }


def value_to_json(value: JSON) -> JSON:
    """A stored value: itself, or for one not opened (as ``runs list`` reads them)
    ``{"sealed": {"bucket", "key", "size", "sha256"}}`` (a large value), with
    ``"codecs"`` when codecs encoded it (a small encoded one has its ``size`` only)."""
    if isinstance(value, Sealed):
        kept = value.reference.to_json() if value.reference else {"size": len(value.data or b"")}
        return {"sealed": {**kept, "codecs": list(value.codecs)} if value.codecs else kept}
    return value


def token_to_json(token: Token) -> dict[str, JSON]:
    """One token: its decision (``pending``, ``completed``, ``timed_out``) and value."""
    return {
        "id": token.id,
        "environment": token.environment,
        "status": token.status.value,
        "created_at": iso(token.created_at),
        "timeout_at": iso(token.timeout_at),
        "decided_at": iso(token.decided_at),
        "value": value_to_json(token.value),
        "metadata": value_to_json(token.metadata),
        "resuming": token.resuming,
    }


def schedule_to_json(state: ScheduleState) -> dict[str, JSON]:
    """One stored schedule: its definition (``definition`` is the one line for people,
    the fields after it the parts), where it stands, and its next ``UPCOMING_SHOWN``
    occurrences (none unless it is active). ``interval_seconds`` is whole seconds,
    ``jitter_seconds`` has millisecond precision."""
    schedule = state.schedule
    return {
        "id": state.id,
        "task": schedule.task,
        "queue": schedule.queue,
        "kind": schedule.kind.value,
        "definition": schedule.describe(),
        "expression": schedule.expression,
        "interval_seconds": (
            int(schedule.interval.total_seconds()) if schedule.interval is not None else None
        ),
        "at": iso(schedule.at),
        "tz": schedule.tz,
        "catch_up": schedule.catch_up.value,
        "jitter_seconds": schedule.jitter.total_seconds(),
        "start_at": iso(schedule.start_at),
        "end_at": iso(schedule.end_at),
        "payload": value_to_json(schedule.payload),
        "status": state.status.value,
        "next_at": iso(state.next_at),
        "last_at": iso(state.last_at),
        "updated_at": iso(state.updated_at),
        "runs": state.runs,
        "version": state.version,
        "upcoming": [iso(at) for at in state.upcoming(UPCOMING_SHOWN)],
    }
