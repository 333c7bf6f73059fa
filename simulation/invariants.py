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
from datetime import datetime
from typing import Any

from runlane_sqs.adapters.dynamodb.keys import RUN_SK
from runlane_sqs.adapters.dynamodb.runs import events_from_item, item_from_wire, run_from_wire
from runlane_sqs.core.bulk import BulkOperation, OperationStatus, new_run_id_for
from runlane_sqs.core.groups import Group, GroupStatus, callback_run_id, redrive_run_id
from runlane_sqs.core.model import EventType, Run, RunEvent, RunStatus
from runlane_sqs.core.rates import RateLimit, to_epoch_us
from runlane_sqs.core.values import Sealed, run_references
from simulation.workload import (
    BATCHED,
    DEADLINED,
    DEBOUNCED,
    EPOCH_US,
    FAILING,
    KEY_RATE,
    KEY_RATED,
    KEYED_TASK_RATE,
    PINNED,
    PLAIN,
    PLAIN_STAGES,
    QUEUES,
    RATE,
    RATED,
    RELEASED_SIGNALLED,
    SCHEDULE_ID,
    SIGNALLED,
    SINGLE,
    TOKENED,
    UNCHECKED,
    WAITER,
    WEIGHTS,
    Entry,
    Ledger,
    Planned,
    expected_result,
    fanout_result,
    schedule,
)
from simulation.world import EPOCH

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
    when the trigger's answer came, by the producer's clock (µs since the Unix epoch)."""
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
    collected: dict[int, tuple[str, str, int | None]] = field(default_factory=dict)
    """Each debounced or batched trigger that returned, by its number: its task, the run
    it was told carries its item, and (a batch) the item's index."""
    resent: set[int] = field(default_factory=set)
    """Debounced or batched triggers sent again after an error."""
    rival_decisions: list[str] = field(default_factory=list)
    """Second completions of a token that were accepted."""
    returned: dict[str, int] = field(default_factory=dict)
    """When a trigger first returned each run (µs since the Unix epoch, by the producer's
    clock): the run was stored by then."""
    chords: dict[str, Planned] = field(default_factory=dict)
    """Each chord's group id the producer was given, with its trigger."""
    groups: dict[str, Group] = field(default_factory=dict)
    """Each chord's group record at the end."""
    joins: dict[str, dict[int, Group]] = field(default_factory=dict)
    """Each chord's group as the operator read it at each join before it reran its
    failed children, by generation."""
    versions: dict[str, str] = field(default_factory=dict)
    """Each worker process's app version, by its name."""
    operations: dict[str, BulkOperation] = field(default_factory=dict)
    """Every bulk operation in the table at the end (one whose start's answer was lost
    too, which its operator started again)."""
    bulk_cutoff: datetime = EPOCH
    """The runs of the task that always fails triggered before this are retried in bulk."""
    spread_seconds: int = 60
    max_skew_us: int = 0

    def history(self, run_id: str) -> Stored | None:
        """The run as storage holds it, or held it until it was pruned."""
        return self.runs.get(run_id) or self.pruned.get(run_id)

    def histories(self) -> Iterable[Stored]:
        """Every run storage holds or held until it was pruned."""
        return itertools.chain(self.runs.values(), self.pruned.values())

    def of_task(self, task: str) -> Iterable[tuple[str, Stored]]:
        """Each run a producer triggered of ``task``, with its history."""
        for run_id, planned in self.triggered.items():
            stored = self.history(run_id)
            if planned.task == task and stored is not None:
                yield run_id, stored


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
        if run.status is RunStatus.SUCCEEDED and planned.task not in UNCHECKED:
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


def progress_kept(seen: Observed) -> list[str]:
    """29: a succeeded run of a task that reports holds its last attempt's last report
    (it rode on the outcome's write, whatever the reporter had written or was writing);
    reports of stale attempts are refused (checked as each lands: ``fenced_writes``)."""
    lines = []
    for run_id, stored in seen.of_task(PLAIN):
        run = stored.run
        if run.status is not RunStatus.SUCCEEDED:
            continue
        progress = run.progress
        want = (PLAIN_STAGES, PLAIN_STAGES, run.attempt)
        got = (progress.done, progress.total, progress.attempt) if progress else None
        if got != want:
            lines.append(f"run {run_id} succeeded with progress {got}, not {want}")
    return lines


def idempotent_triggers(seen: Observed) -> list[str]:
    """16: every trigger with one idempotency key gets the same run, until that run fails
    (docs/concepts.md, "Idempotency key"): only then may a later trigger get a new one. The
    run failed before the later trigger's answer came: its ``failed`` event is stamped by a
    worker's clock and the answer by the producer's, which may be apart by twice the
    skew."""
    lines = []
    for key, given in seen.by_key.items():
        for (_, earlier), (answered_us, later) in itertools.pairwise(given):
            if earlier == later:
                continue
            stored = seen.history(earlier)
            latest_us = answered_us + 2 * seen.max_skew_us
            failed = stored is not None and any(
                e.type is EventType.FAILED and to_epoch_us(e.at) <= latest_us for e in stored.events
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
    return crowded(RATED, [e for e in seen.ledger.entries if e.task == RATED], RATE)


def key_rates_held_at_entry(seen: Observed) -> list[str]:
    """26 (docs/rate-limits.md, "Several limits"): a task under a task-wide limit and a
    per-key one keeps both at handler entry: no window holds more entries of one key than
    the per-key limit allows, nor more of the task than its own limit allows."""
    entries = [e for e in seen.ledger.entries if e.task == KEY_RATED]
    lines = crowded(KEY_RATED, entries, KEYED_TASK_RATE)
    by_key: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        by_key[str(entry.key)].append(entry)
    for key, of_key in sorted(by_key.items()):
        lines += crowded(key, of_key, KEY_RATE)
    return lines


def crowded(scope: str, entries: list[Entry], limit: RateLimit) -> list[str]:
    """The first window of ``limit``'s interval holding more of ``entries`` (handler
    entries of one scope) than it allows, in words."""
    starts = sorted(e.at_us for e in entries)
    per_us = limit.per_us
    allowed = limit.rate + limit.burst
    for i, start in enumerate(starts):
        inside = [at for at in starts[i : i + allowed + 1] if at < start + per_us]
        if len(inside) > allowed:
            return [
                f"{len(inside)} handlers of {scope} entered within {per_us / 1e6:g} s from "
                f"{(start - EPOCH_US) / 1e6:.6f} (at most {allowed}; grace "
                f"{limit.rate_in(scope).grace_us} µs)"
            ]
    return []


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


def current_children(group: Group) -> dict[int, str]:
    """Each item the group counts, with the run id of its current child (its latest
    rerun, if any): the children its counts stand for. An item whose rerun has not
    started (the group failed again first) is counted nowhere: ``retry-failed`` took its
    earlier child's count back."""
    current: dict[int, str | None] = {}
    for position in range(group.positions):  # reruns come after the items, in order
        index, run_id = group.at(position)
        if position < group.started:
            current[index] = run_id
        elif position >= group.total:
            current[index] = None
    return {index: run_id for index, run_id in current.items() if run_id is not None}


@dataclass
class Tally:
    """A group's children as storage holds them: how many ended how, the sum of their
    results, and when each ended."""

    counts: dict[str, int] = field(
        default_factory=lambda: {"succeeded": 0, "failed": 0, "cancelled": 0}
    )
    total: int = 0
    ended: list[tuple[int | None, str]] = field(default_factory=list)
    """When each child ended (µs since the Unix epoch), with its run id."""
    problems: list[str] = field(default_factory=list)


def tally(seen: Observed, group: Group) -> Tally:
    """What ``group``'s counts should be, from its current children in storage."""
    found = Tally()
    for index, run_id in sorted(current_children(group).items()):
        stored = seen.history(run_id)
        if stored is None or stored.run.status not in TERMINAL:
            status = "missing" if stored is None else stored.run.status.value
            found.problems.append(f"child {run_id} (item {index}) of group {group.id} is {status}")
            continue
        found.counts[stored.run.status.value] += 1
        result = opened(stored.run.result, seen.object_data)
        if stored.run.status is RunStatus.SUCCEEDED and isinstance(result, int):
            found.total += result
        found.ended.append((first_at(stored, FINISHED), run_id))
    return found


def join_of(seen: Observed, group: Group, planned: Planned) -> list[str]:
    """The callback of ``group``'s join at its generation: triggered once every child it
    counts had ended, and saw the counts of the children storage holds."""
    callback_id = callback_run_id(group.id, group.generation)
    callback = seen.history(callback_id)
    where = f"callback {callback_id} of group {group.id} (join {group.generation})"
    if callback is None:
        return [f"{where} was never triggered"]
    found = tally(seen, group)
    lines = list(found.problems)
    counted = {"succeeded": group.succeeded, "failed": group.failed, "cancelled": group.cancelled}
    if counted != found.counts:
        lines.append(f"group {group.id} counted {counted}; its children ended {found.counts}")
    triggered = to_epoch_us(callback.events[0].at) if callback.events else 0
    lines += [
        f"{where} was triggered before child {run_id} ended"
        for ended, run_id in found.ended
        if ended is None or ended > triggered + 2 * seen.max_skew_us
    ]
    if callback.run.status is not RunStatus.SUCCEEDED:
        return [*lines, f"{where} is {callback.run.status.value}"]
    want = {"n": planned.payload["n"], "status": group.status.value, **found.counts}
    want["sum"] = found.total
    got = opened(callback.run.result, seen.object_data)
    if got != want:
        lines.append(f"{where} saw {got}, not {want}")
    return lines


def callbacks_run_once(seen: Observed) -> list[str]:
    """23 (docs/groups.md, "What holds"): a chord's callback is triggered once per join
    (one join, and one more after each ``retry-failed``), after every child it counts
    ended, and sees the counts of its children as storage holds them; a group whose
    failed children are within its tolerance succeeds."""
    lines = []
    callbacks: dict[str, list[str]] = defaultdict(list)
    for stored in seen.histories():
        if stored.run.joined_group is not None:
            callbacks[stored.run.joined_group].append(stored.run.id)
    for group_id, planned in seen.chords.items():
        final = seen.groups.get(group_id)
        if final is None or final.joined_at is None:
            state = "is not in storage" if final is None else "never joined"
            lines.append(f"group {group_id} of chord {planned.payload['n']} {state}")
            continue
        read = seen.joins.get(group_id, {})
        joins = [read[g] for g in range(final.generation) if g in read]
        if len(joins) < final.generation:
            lines.append(f"group {group_id} was rerun at a join nobody read")
            continue
        wanted = [callback_run_id(group_id, g) for g in range(final.generation + 1)]
        if sorted(callbacks[group_id]) != sorted(wanted):
            lines.append(
                f"group {group_id} joined {final.generation + 1} time(s) and triggered "
                f"callbacks {', '.join(sorted(callbacks[group_id]))}"
            )
        for group in [*joins, final]:
            lines += join_of(seen, group, planned)
        first = joins[0] if joins else final
        lines += tolerated(first, planned)
    return lines


def tolerated(group: Group, planned: Planned) -> list[str]:
    """A group's first join: succeeded with every failing child counted if no more
    failed than it tolerates, else failed (docs/groups.md, "Failure is explicit")."""
    want = fanout_result(planned.payload)
    if want["group"] == "failed":
        if group.status is GroupStatus.FAILED:
            return []
        return [f"group {group.id} is {group.status.value}; more children failed than tolerated"]
    if group.status is GroupStatus.SUCCEEDED and group.failed == want["failed"]:
        return []
    return [
        f"group {group.id} is {group.status.value} with {group.failed} failed; "
        f"{want['failed']} failed within a tolerance of {planned.payload['tolerate']}"
    ]


def retried_children_rerun(seen: Observed) -> list[str]:
    """23 (docs/groups.md, "Operating groups"): ``retry-failed`` of a joined group reruns
    exactly its failed and cancelled children, each as a new run linked to the child it
    replaces, and leaves those that succeeded; the reruns end before the group joins
    again (checked by :func:`callbacks_run_once`), and a group that succeeds the second
    time started every item."""
    lines = []
    for group_id, joins in seen.joins.items():
        final = seen.groups.get(group_id)
        if final is None:
            continue
        for generation, before in sorted(joins.items()):
            after = joins.get(generation + 1, final)
            if after.generation != generation + 1:
                continue  # a refused rerun: checked where the group never joined again
            lines += rerun_between(seen, before, after)
    return lines


def rerun_between(seen: Observed, before: Group, after: Group) -> list[str]:
    """What one ``retry-failed`` did between two joins of a group."""
    lines = []
    current = current_children(before)
    unsuccessful = set()
    for index, run_id in current.items():
        stored = seen.history(run_id)
        if stored is not None and stored.run.status in (RunStatus.FAILED, RunStatus.CANCELLED):
            unsuccessful.add(index)
    reran = {index for index, generation in after.redriven if generation == after.generation}
    if reran != unsuccessful:
        lines.append(
            f"retry-failed of group {before.id} reran items {sorted(reran)}, not its failed "
            f"and cancelled ones {sorted(unsuccessful)}"
        )
    for k, (index, generation) in enumerate(after.redriven):
        if generation != after.generation or after.total + k >= after.started:
            continue  # an earlier rerun, or one the group did not start (it failed again)
        stored = seen.history(redrive_run_id(before.id, index, generation))
        if stored is None or stored.run.source_run_id != current.get(index):
            lines.append(
                f"the rerun of item {index} of group {before.id} is not a run linked to its "
                f"child {current.get(index)}"
            )
    again = [
        index
        for index in current.keys() - unsuccessful
        if seen.history(redrive_run_id(before.id, index, after.generation)) is not None
    ]
    lines += [f"item {i} of group {before.id} succeeded and ran again" for i in sorted(again)]
    if after.status is GroupStatus.SUCCEEDED and after.started < after.positions:
        lines.append(f"group {before.id} succeeded with items never started")
    return lines


def queues_served_by_weight(seen: Observed) -> list[str]:
    """docs/operations.md, "Queue weights": each worker's receives try its queues first by
    their weights (in every ``sum(weights)`` receives, a queue of weight ``w`` first ``w``
    times, so none starves however full the others are), and a run triggered on a queue
    other than its task's is kept there (its finishing is :func:`no_lost_run`'s)."""
    weights = {queue: WEIGHTS.get(queue, 1) for queue in QUEUES}
    cycle = sum(weights.values())
    lines = []
    for worker, turns in sorted(seen.ledger.turns.items()):
        for start in range(0, len(turns) - cycle + 1, cycle):
            block = turns[start : start + cycle]
            counts = {queue: block.count(queue) for queue in QUEUES}
            if counts != weights:
                lines.append(
                    f"{worker}'s receives {start} to {start + cycle - 1} tried first {counts}, "
                    f"not {weights}"
                )
                break
    for run_id, planned in seen.triggered.items():
        stored = seen.history(run_id)
        if planned.queue is not None and stored is not None and stored.run.queue != planned.queue:
            lines.append(f"run {run_id} triggered on {planned.queue} is on {stored.run.queue}")
    return lines


def versions_kept(seen: Observed) -> list[str]:
    """docs/versions.md ("Which version ran what", "Pinning"): each attempt's ``started``
    event names the app version of the worker that claimed it; a run of a pinned task
    records the version of its first attempt, and every attempt of it, wherever its
    wakeups went, is claimed and entered by a worker of that version."""
    lines = []
    for stored in seen.histories():
        for event in stored.events:
            if event.type is not EventType.STARTED:
                continue
            process = str(event.data.get("worker", "")).rsplit("-", 1)[0]
            version = event.data.get("app_version")
            if version != seen.versions.get(process):
                lines.append(
                    f"run {stored.run.id}: attempt {event.attempt} started on {process} "
                    f"({seen.versions.get(process)}) records version {version}"
                )
            pinned = stored.run.task == PINNED and version != stored.run.app_version
            if pinned:
                lines.append(
                    f"run {stored.run.id} of {stored.run.app_version}: attempt "
                    f"{event.attempt} started on {process}, of {version}"
                )
    for entry in seen.ledger.entries:
        run = seen.history(entry.run_id) if entry.task == PINNED else None
        if run is not None and entry.version != run.run.app_version:
            lines.append(
                f"run {entry.run_id} of {run.run.app_version}: attempt {entry.attempt} "
                f"entered on {entry.process}, of {entry.version}"
            )
    return lines


def bulk_operations_complete(seen: Observed) -> list[str]:
    """17 (docs/operations.md, "Bulk recovery"): a bulk retry whose process was killed
    during it is carried on by maintenance until it is done (so is one whose start's
    answer was lost, which its operator started again); each retries a run once at most
    (one new run, made by it, linked both ways), its tally of runs acted on is exact, and
    every run that had failed when they started was retried by one of them (a run one
    retried, the other skips), unless a tally counts a failure."""
    lines, failures = [], 0
    for operation in seen.operations.values():
        if operation.status is not OperationStatus.DONE:
            lines.append(f"bulk operation {operation.id} is {operation.status.value}")
            continue
        failures += operation.tally.failed
        acted = 0
        for stored in seen.histories():
            made = seen.history(new_run_id_for(operation.id, stored.run.id))
            if made is not None:
                acted += 1
                lines += made_by(operation, stored, made)
        if acted != operation.tally.acted:
            lines.append(
                f"bulk operation {operation.id} counts {operation.tally.acted} runs acted on; "
                f"it made {acted}"
            )
    first = min(seen.operations.values(), key=lambda o: o.created_at, default=None)
    missed = []
    for stored in seen.histories():
        links = retry_links(stored)
        if len(links) > 1:
            lines.append(f"run {stored.run.id} was retried {len(links)} times: {', '.join(links)}")
        if not links and first is not None and failed_before(seen, stored, first):
            missed.append(stored.run.id)
    if len(missed) > failures:
        lines.append(f"no bulk operation retried {', '.join(missed)}")
    return lines


def retry_links(stored: Stored) -> list[str]:
    """The runs a run's history says it was retried as."""
    return [
        str(e.data.get("run"))
        for e in stored.events
        if e.type is EventType.LINKED_RUN and e.data.get("kind") == "retry"
    ]


def made_by(operation: BulkOperation, stored: Stored, made: Stored) -> list[str]:
    """What is wrong with ``made``, the run ``operation`` made to retry ``stored``."""
    lines = []
    links = retry_links(stored)
    if made.run.source_run_id != stored.run.id or made.run.id not in links:
        lines.append(
            f"run {made.run.id}, made by bulk operation {operation.id}, is not linked both "
            f"ways to run {stored.run.id} (linked to {', '.join(links) or 'none'})"
        )
    if not operation.filter.selects(stored.run):
        lines.append(f"bulk operation {operation.id} retried run {stored.run.id}")
    return lines


def failed_before(seen: Observed, stored: Stored, operation: BulkOperation) -> bool:
    """Whether the operation was to retry the run: of its task, triggered before the
    cutoff, failed before the operation started (give or take the clocks' skew)."""
    if stored.run.task != operation.filter.task or stored.run.created_at >= seen.bulk_cutoff:
        return False
    failed = first_at(stored, frozenset({EventType.FAILED}))
    return failed is not None and failed + 2 * seen.max_skew_us < to_epoch_us(operation.created_at)


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


def count(stored: Stored, kind: EventType, data_key: str | None = None) -> int:
    return sum(
        1 for e in stored.events if e.type is kind and (data_key is None or data_key in e.data)
    )


def first_at(stored: Stored, kinds: frozenset[EventType]) -> int | None:
    """When (µs since the Unix epoch) the run's first event of ``kinds`` was written."""
    return next((to_epoch_us(e.at) for e in stored.events if e.type in kinds), None)


FINISHED = frozenset({EventType.SUCCEEDED, EventType.FAILED, EventType.CANCELLED})
STARTED = frozenset({EventType.STARTED})


def signals_received_once(seen: Observed) -> list[str]:
    """7: a run waiting for a signal is woken once at its wait, with the payload sent (its
    result, checked by :func:`exactly_one_success`, holds it); a run that succeeded was
    woken (a signal sent before it waited was not kept for it)."""
    lines = []
    signalled = itertools.chain(seen.of_task(SIGNALLED), seen.of_task(RELEASED_SIGNALLED))
    for run_id, stored in signalled:
        woken = count(stored, EventType.SIGNAL_RECEIVED)
        if woken > 1 or (woken == 0 and stored.run.status is RunStatus.SUCCEEDED):
            lines.append(f"run {run_id} was woken by its signal {woken} times")
    return lines


def tokens_decided_once(seen: Observed) -> list[str]:
    """8: a token's first decision wins (a second completion is refused), and each run
    waiting on it is resumed by it at most once (with its value: its result holds it)."""
    lines = list(seen.rival_decisions)
    for run_id, stored in seen.of_task(TOKENED):
        resumed = count(stored, EventType.TOKEN_COMPLETED)
        if resumed > 1:
            lines.append(f"run {run_id} was resumed {resumed} times by its token")
    return lines


def runs_awaited_once(seen: Observed) -> list[str]:
    """6: a run waiting for another run is resumed once, when that run has finished, with
    its outcome (its result, checked by :func:`exactly_one_success`, holds it)."""
    lines = []
    for run_id, stored in seen.of_task(WAITER):
        resumed = count(stored, EventType.RESUMED, "run")
        if resumed > 1:
            lines.append(f"run {run_id} was resumed {resumed} times by the run it waits for")
        target = seen.history(str(seen.triggered[run_id].payload.get("target")))
        done = first_at(target, FINISHED) if target is not None else None
        for event in stored.events:
            if event.type is EventType.RESUMED and "run" in event.data:
                early = done is None or to_epoch_us(event.at) + seen.max_skew_us * 2 < done
                if early:
                    lines.append(f"run {run_id} was resumed before the run it waits for ended")
    return lines


def schedule_occurrences_once(seen: Observed) -> list[str]:
    """19: each occurrence of the schedule makes exactly one run, however many passes ran
    at once, and one missed while an operator paused it is made when it resumes (catch-up
    ``all``)."""
    every = schedule(seen.spread_seconds)
    assert every.end_at is not None
    wanted = list(every.occurrences(EPOCH, every.end_at))
    made: dict[Any, int] = defaultdict(int)
    for stored in seen.histories():
        run = stored.run
        if run.schedule_id == SCHEDULE_ID and run.scheduled_for is not None:
            made[run.scheduled_for] += 1
    lines = [f"occurrence {at.isoformat()} made {made[at]} runs" for at in wanted if made[at] != 1]
    lines += [
        f"run of a time that is no occurrence: {at.isoformat()}" for at in made.keys() - set(wanted)
    ]
    return lines


def keys_held_one_at_a_time(seen: Observed) -> list[str]:
    """16 and 20: no handler is entered while another attempt with its key holds a live
    lease (a key limit of 1, singleton and ordering keys; counted at handler entry); and
    the runs of one singleton key never overlap (one unfinished run per key).

    A run counts as unfinished from its trigger's answer to its first finishing event. A
    run that finished before its trigger answered (a worker ran it while the producer's
    answer was still on its way: seed 369) was unfinished at no moment the producer can
    point to, and overlaps nothing."""
    lines = list(seen.ledger.key_overlaps)
    lives: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for run_id, stored in seen.of_task(SINGLE):
        end = first_at(stored, FINISHED)
        key = stored.run.singleton_key
        if key is not None and end is not None and seen.returned[run_id] < end:
            lives[key].append((seen.returned[run_id], end, run_id))
    for key, spans in lives.items():
        spans.sort()
        for (_, end, earlier), (start, _, later) in itertools.pairwise(spans):
            if start + 2 * seen.max_skew_us < end:
                lines.append(
                    f"runs {earlier} and {later} of singleton key {key!r} were unfinished at once"
                )
    return lines


def carried(stored: Stored) -> list[int]:
    """The triggers (by number) whose items a debounced or batched run carries."""
    payload = stored.run.payload
    if stored.run.task == DEBOUNCED and isinstance(payload, dict):
        return [int(n) for n in payload["items"]]
    if isinstance(payload, list):
        return [int(item["n"]) for item in payload]
    return []


def nothing_debounced_or_batched_lost(seen: Observed) -> list[str]:
    """26 (docs/debounce.md, docs/batches.md, "Guarantees"): every trigger that returned
    has its item in the run it was told (at the index it was told), that run's handler got
    it, and no other run carries it (unless the producer sent it again after an error)."""
    lines = []
    where: dict[int, list[str]] = defaultdict(list)
    for stored in seen.histories():
        if stored.run.task in (DEBOUNCED, BATCHED):
            items = carried(stored)
            for n in items:
                where[n].append(stored.run.id)
            result = stored.run.result
            succeeded = stored.run.status is RunStatus.SUCCEEDED
            got = result.get("items") if isinstance(result, dict) else result
            if succeeded and got != items:
                lines.append(f"run {stored.run.id} ran with {got}, not its items {items}")
    for n, (task, run_id, index) in seen.collected.items():
        told = seen.history(run_id)
        items = carried(told) if told is not None else []
        if n not in items:
            lines.append(f"trigger {n} of {task} was told run {run_id}, which lacks its item")
        elif index is not None and (index >= len(items) or items[index] != n):
            lines.append(f"trigger {n} of {task} was told index {index} of run {run_id}: {items}")
        if len(where[n]) > 1 and n not in seen.resent:
            lines.append(f"trigger {n} of {task} is carried by runs {', '.join(where[n])}")
    return lines


def ordering_held(seen: Observed) -> list[str]:
    """22: the runs of one ordering key start in trigger order (their places), each once
    the one before it finished (one at a time; give or take the clocks' skew)."""
    lines = []
    lines_of: dict[str, list[Stored]] = defaultdict(list)
    for stored in seen.histories():
        if stored.run.ordering_key is not None and stored.run.place is not None:
            lines_of[stored.run.ordering_key].append(stored)
    for key, runs in lines_of.items():
        runs.sort(key=lambda s: s.run.place or 0)
        for earlier, later in itertools.pairwise(runs):
            done = first_at(earlier, FINISHED)
            started = first_at(later, STARTED)
            if started is None:
                continue
            if done is None or started + 2 * seen.max_skew_us < done:
                lines.append(
                    f"run {later.run.id} (place {later.run.place}) of ordering key {key!r} "
                    f"started before run {earlier.run.id} (place {earlier.run.place}) finished"
                )
    return lines


def attempt_deadlines_held(seen: Observed) -> list[str]:
    """10 (docs/concepts.md, "Attempt timeouts"): an attempt past its deadline is told to
    stop, or timed out by maintenance, and its run goes on by its retry policy: it never
    works on unbounded, and never succeeds as that attempt."""
    lines = list(seen.ledger.past_deadline)
    for run_id, stored in seen.of_task(DEADLINED):
        slow = int(seen.triggered[run_id].payload["slow"])
        for event in stored.events:
            if event.type is EventType.SUCCEEDED and event.attempt <= slow:
                lines.append(
                    f"run {run_id} succeeded on attempt {event.attempt}, past its deadline"
                )
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
    progress_kept,
    idempotent_triggers,
    steps_recorded_once,
    concurrency_held,
    rate_held_at_entry,
    key_rates_held_at_entry,
    groups_join_once,
    callbacks_run_once,
    retried_children_rerun,
    queues_served_by_weight,
    versions_kept,
    bulk_operations_complete,
    claim_checks_kept,
    transactions_all_or_nothing,
    wakeups_after_writes,
    worker_never_crashes,
    signals_received_once,
    tokens_decided_once,
    runs_awaited_once,
    schedule_occurrences_once,
    keys_held_one_at_a_time,
    nothing_debounced_or_batched_lost,
    ordering_held,
    attempt_deadlines_held,
)


def violations(seen: Observed) -> list[tuple[str, str]]:
    """Every violation: (the invariant's name, what happened)."""
    return [(check.__name__, line) for check in CHECKS for line in check(seen)]
