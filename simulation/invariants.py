"""What must hold of every simulated history, each named after the semantic of the
product contract it checks (its number in the contract's "Semantics that must hold",
restated in docs/reliability.md, "The simulation").

Each check reads storage as it is (the run items, straight from the simulated DynamoDB,
with no request and no fault) and the simulation's ledger, and returns one line per
violation, naming the run.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from runlane_sqs.adapters.dynamodb.keys import RUN_SK
from runlane_sqs.adapters.dynamodb.runs import events_from_item, item_from_wire, run_from_wire
from runlane_sqs.core.model import EventType, Run, RunEvent, RunStatus
from runlane_sqs.core.rates import Rate, to_epoch_us
from runlane_sqs.core.values import Sealed, run_references
from simulation.workload import (
    EPOCH_US,
    FAILING,
    RATE,
    RATED,
    Ledger,
    Planned,
    expected_result,
)

TERMINAL = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})
ATTEMPT_EVENTS = frozenset(
    {
        EventType.SUCCEEDED,
        EventType.ATTEMPT_FAILED,
        EventType.RELEASED,
        EventType.STEP_RECORDED,
    }
)
"""Events only the attempt that holds the lease writes."""
FENCE_EVENTS = frozenset({EventType.LEASE_EXPIRED, EventType.ATTEMPT_TIMED_OUT})
"""Events after which the attempt they name holds no lease."""


@dataclass(frozen=True)
class Stored:
    """One run as storage holds it, with its history."""

    run: Run
    events: list[RunEvent]


def stored_runs(items: Iterable[dict[str, Any]]) -> dict[str, Stored]:
    runs = {}
    for item in items:
        if item["sk"]["S"] != RUN_SK:
            continue
        run = run_from_wire(item)
        runs[run.id] = Stored(run, events_from_item(item_from_wire(item)))
    return runs


@dataclass
class Observed:
    """What the simulation gathered for the checks."""

    runs: dict[str, Stored]
    ledger: Ledger
    triggered: dict[str, Planned]
    """Each run id a producer was given, with the trigger that made it."""
    by_key: dict[str, list[tuple[int, str]]]
    """Each idempotency key: the run id each of its triggers was given, in order, with
    when the trigger was sent (µs since the Unix epoch)."""
    cancelled: set[str]
    """Runs an operator asked to cancel."""
    unexpected: list[str]
    object_data: dict[str, bytes] = field(default_factory=dict)
    """The payload bucket at the end: each object's bytes, by key."""
    orders: set[str] = field(default_factory=set)
    """The producer's own table's items at the end."""
    rolled_back: dict[str, str] = field(default_factory=dict)
    """Runs whose transaction was refused, with the order it would have written."""
    committed: dict[str, str] = field(default_factory=dict)
    """Runs whose transaction committed, with its order."""
    unstored_publishes: list[str] = field(default_factory=list)
    pruned: dict[str, Stored] = field(default_factory=dict)
    """Finished runs an operator pruned at the end, as they were before."""

    def history(self, run_id: str) -> Stored | None:
        """The run as storage holds it, or held it until it was pruned."""
        return self.runs.get(run_id) or self.pruned.get(run_id)


def opened(value: Any, objects: dict[str, bytes]) -> Any:
    """A stored value as its handler returned it: a value kept in the payload bucket is
    read from there (the simulation's apps have no codec: its bytes are its JSON)."""
    if isinstance(value, Sealed) and value.reference is not None:
        data = objects.get(value.reference.key)
        return None if data is None else json.loads(data)
    return value


def no_lost_run(seen: Observed) -> list[str]:
    """12 (and 9): every run triggered is in storage and, once the faults stop and
    maintenance has run, finished."""
    lines = []
    for run_id in seen.triggered.keys() - seen.pruned:
        stored = seen.runs.get(run_id)
        if stored is None:
            lines.append(f"run {run_id} was triggered and is not in storage")
        elif stored.run.status not in TERMINAL:
            lines.append(f"run {run_id} never finished: it is {stored.run.status.value}")
    return lines


def exactly_one_success(seen: Observed) -> list[str]:
    """1 and 3: a run succeeds at most once, with the result its handler returns; a run
    nobody cancelled succeeds, or fails only if its task always fails."""
    lines = []
    for run_id, stored in seen.runs.items():
        successes = sum(1 for e in stored.events if e.type is EventType.SUCCEEDED)
        if successes > 1:
            lines.append(f"run {run_id} succeeded {successes} times")
    for run_id, planned in seen.triggered.items():
        found = seen.runs.get(run_id)
        if found is None:
            continue
        run = found.run
        if run.status is RunStatus.SUCCEEDED:
            want = expected_result(planned.task, planned.payload, run.attempt)
            got = opened(run.result, seen.object_data)
            if got != want:
                lines.append(f"run {run_id} succeeded with {str(got)[:200]}, not {want!r}")
        cancelled = run_id in seen.cancelled
        if run.status is RunStatus.FAILED and planned.task != FAILING:
            lines.append(f"run {run_id} of {planned.task} failed: {run.failure}")
        if run.status is RunStatus.SUCCEEDED and planned.task == FAILING:
            lines.append(f"run {run_id} of {FAILING} succeeded")
        if run.status is RunStatus.CANCELLED and not cancelled:
            lines.append(f"run {run_id} was cancelled though nobody asked")
    return lines


def fenced_writes(seen: Observed) -> list[str]:
    """3: a write an attempt makes lands only while its own lease holds the run (checked
    as each write lands), never after its lease was taken from it; and events stay in
    order with no gap (2)."""
    lines = list(seen.ledger.unfenced)
    for run_id, stored in seen.runs.items():
        fenced: set[int] = set()
        for expected_seq, event in enumerate(stored.events, start=1):
            if event.seq != expected_seq:
                lines.append(f"run {run_id}: event {event.seq} where {expected_seq} belongs")
                break
            if event.type in FENCE_EVENTS:
                fenced.add(event.attempt)
            elif event.type in ATTEMPT_EVENTS and event.attempt in fenced:
                lines.append(
                    f"run {run_id}: attempt {event.attempt} wrote {event.type.value} "
                    f"(event {event.seq}) after its lease was taken from it"
                )
    return lines


def idempotent_triggers(seen: Observed) -> list[str]:
    """16: every trigger with one idempotency key gets the same run, until that run fails
    (docs/concepts.md, "Idempotency key"): only then may a later trigger get a new one."""
    lines = []
    for key, given in seen.by_key.items():
        for (_, earlier), (asked_us, later) in itertools.pairwise(given):
            if earlier == later:
                continue
            stored = seen.history(earlier)
            failed = stored is not None and any(
                e.type is EventType.FAILED and to_epoch_us(e.at) <= asked_us for e in stored.events
            )
            if not failed:
                lines.append(
                    f"idempotency key {key!r} gave run {later} while its run {earlier} had "
                    "not failed"
                )
    return lines


def steps_recorded_once(seen: Observed) -> list[str]:
    """The durable step (docs/steps.md): a succeeded run's steps were recorded once, and
    the result holds what was recorded."""
    lines = []
    for run_id, stored in seen.runs.items():
        counts: dict[str, int] = defaultdict(int)
        for event in stored.events:
            if event.type is EventType.STEP_RECORDED:
                counts[str(event.data.get("step"))] += 1
        for name, count in counts.items():
            if count > 1:
                lines.append(f"run {run_id}: step {name!r} recorded {count} times")
    return lines


def concurrency_held(seen: Observed) -> list[str]:
    """20: no handler of a limited queue entered while its limit's worth of other
    attempts held live leases."""
    return list(seen.ledger.over_limit)


def rate_held_at_entry(seen: Observed) -> list[str]:
    """26: no window of the limit's interval holds more handler entries than it allows,
    counted where the handler is entered, by the clock of the process that entered it."""
    entries = sorted(e.at_us for e in seen.ledger.entries if e.task == RATED)
    rate: Rate = RATE.rate_in(RATED)
    per_us = RATE.per_us
    allowed = RATE.rate + RATE.burst
    lines = []
    for i, start in enumerate(entries):
        inside = [at for at in entries[i:] if at < start + per_us]
        if len(inside) > allowed:
            lines.append(
                f"{len(inside)} handlers of {RATED} entered within {per_us / 1e6:g} s from "
                f"{(start - EPOCH_US) / 1e6:.6f} (at most {allowed}; grace {rate.grace_us} µs)"
            )
            break
    return lines


def groups_join_once(seen: Observed) -> list[str]:
    """23: a group's parent is resumed by its join once; each child counts once (a
    parent's result, checked by :func:`exactly_one_success`, holds its children's)."""
    lines = []
    for run_id, stored in seen.runs.items():
        joins: dict[str, int] = defaultdict(int)
        for event in stored.events:
            if event.type is EventType.RESUMED and "group" in event.data:
                joins[str(event.data["group"])] += 1
        lines += [
            f"run {run_id} was resumed {count} times by the join of group {group}"
            for group, count in joins.items()
            if count > 1
        ]
    return lines


def claim_checks_kept(seen: Observed) -> list[str]:
    """25: every value a stored run references in the payload bucket is there, however
    many passes of maintenance reviewed its object record."""
    lines = []
    for run_id, stored in seen.runs.items():
        for reference in run_references(stored.run):
            if reference.key not in seen.object_data:
                lines.append(f"run {run_id} references {reference.key}, which is gone")
    return lines


def transactions_all_or_nothing(seen: Observed) -> list[str]:
    """24: a transaction's runs exist if and only if its own writes committed."""
    lines = [
        f"run {run_id} exists though its transaction was rolled back"
        for run_id in seen.rolled_back
        if run_id in seen.runs
    ]
    for run_id, order in seen.committed.items():
        if (run_id not in seen.runs and run_id not in seen.pruned) or order not in seen.orders:
            lines.append(f"the transaction of run {run_id} ({order}) committed only in part")
    return lines


def wakeups_after_writes(seen: Observed) -> list[str]:
    """12 (and 24): a wakeup is sent only for a run already stored."""
    return list(seen.unstored_publishes)


def worker_never_crashes(seen: Observed) -> list[str]:
    """4: whatever a wakeup holds, handling it never raises out of the path."""
    return list(seen.unexpected)


CHECKS: tuple[Callable[[Observed], list[str]], ...] = (
    no_lost_run,
    exactly_one_success,
    fenced_writes,
    idempotent_triggers,
    steps_recorded_once,
    concurrency_held,
    rate_held_at_entry,
    groups_join_once,
    claim_checks_kept,
    transactions_all_or_nothing,
    wakeups_after_writes,
    worker_never_crashes,
)


def violations(seen: Observed) -> list[tuple[str, str]]:
    """Every violation: (the invariant's name, what happened)."""
    return [(check.__name__, line) for check in CHECKS for line in check(seen)]
