"""Concurrency limits with real worker processes (``python -m runlane_sqs worker``).

A queue's limit and a key's limit hold across every worker process: the handlers record
when they ran outside the system (``tests.apps.limits_tasks``, one file per process,
``time.monotonic()``), and a sweep over those intervals counts how many ran at once. A
worker killed while it holds the only slot gives it back once maintenance recovers its
expired lease, and the run that waited for it runs on a surviving worker. No maintenance
runs in the first two tests: freed slots wake their waiters on the workers' own writes.

The runs are fewer on moto than on DynamoDB Local + LocalStack (see :data:`RUNS`). Each
test prints what it measured (``-s`` shows it): waits, overlaps, and how long slots stood
free while runs waited for one.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runlane_sqs import EventType, Runlane, RunStatus
from runlane_sqs.core.config import ENV_LEASE_SECONDS
from runlane_sqs.core.model import Run
from runlane_sqs.core.slots import holder_run, key_scope, queue_scope, slot_holder
from runlane_sqs.engine.reports import JOB_EXPIRED
from tests.apps.limits_tasks import (
    BLOCKING_TASK,
    HANDLER_SECONDS,
    KEY_LIMIT,
    KEYED_QUEUE,
    KEYED_TASK,
    LIMITED_QUEUE,
    QUEUE_LIMIT,
    RECORDS_ENV,
    SOLO_QUEUE,
    TIMED_TASK,
    Interval,
    read_intervals,
    register_limits,
)
from tests.emulators import TEST_BACKEND, WorkerProcess, queue_counts, queue_url, wait_until
from tests.processes.spans import (
    Span,
    handler_spans,
    max_keys_at_once,
    max_overlap,
    report_idle,
)

WORKER_APP = "tests.apps.limits_app:app"
WORKERS = 3
CONCURRENCY = "8"
ON_MOTO = TEST_BACKEND == "moto"
RUNS = 60 if ON_MOTO else 200
"""Runs of the limited queue. A run of a limited queue costs about a dozen DynamoDB
requests (more when it waits more than once), which the moto server applies one at a
time, some 40 a second on a 2-core machine: 200 runs take about 150 s there, 35 s on
DynamoDB Local + LocalStack (``make test-aws-local`` runs all 200)."""
KEYS = 10
RUNS_PER_KEY = 6 if ON_MOTO else 20
KEYED_SECONDS = 0.2
"""Each keyed run's work: long enough next to the time a slot takes to pass to the next
run of its key (up to a second on moto) that runs of different keys visibly overlap."""
LEASE_SECONDS = 3
"""The SIGKILL test's lease (the shortest allowed), so the dead worker's expires soon."""
COMPLETION_TIMEOUT = 150.0
STARTUP_TIMEOUT = 30.0
RECOVERY_TIMEOUT = LEASE_SECONDS + 20.0
STOP_TIMEOUT = 30.0
SAMPLE_SECONDS = 0.5

pytestmark = pytest.mark.timeout(COMPLETION_TIMEOUT + 60)


@pytest.fixture
def records(tmp_path: Path) -> Path:
    directory = tmp_path / "records"
    directory.mkdir()
    return directory


@pytest.fixture
def app(make_app: Callable[..., Runlane]) -> Runlane:
    app = register_limits(make_app(lease_duration=LEASE_SECONDS))
    app.provision()
    return app


# --- waiting on real processes --------------------------------------------------------


def wait_for_intervals(
    records: Path,
    expected: int,
    workers: list[WorkerProcess],
    sample: Callable[[], None] | None = None,
) -> list[Interval]:
    """Poll the records until ``expected`` intervals are in (``sample`` is called on each
    poll); fail early if a worker exits."""
    deadline = time.monotonic() + COMPLETION_TIMEOUT
    while True:
        intervals = read_intervals(records)
        if len(intervals) >= expected:
            return intervals
        for worker in workers:
            code = worker.process.poll()
            assert code is None, f"worker {worker.pid} exited {code}:\n{worker.log()}"
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {COMPLETION_TIMEOUT} s with {len(intervals)} of "
                f"{expected} runs done"
            )
        if sample is not None:
            sample()
        time.sleep(SAMPLE_SECONDS)


def wait_for_status(app: Runlane, run_ids: Iterable[str], status: RunStatus) -> dict[str, Run]:
    """Each run once it has ``status`` (its handler ends before its outcome is written)."""
    done: dict[str, Run] = {}
    pending = set(run_ids)

    def all_done() -> bool:
        for run_id in sorted(pending):
            run = app.runs.get(run_id)
            if run.status is status:
                done[run_id] = run
                pending.discard(run_id)
        return not pending

    wait_until(all_done, STARTUP_TIMEOUT, f"{len(pending)} run(s) to be {status}")
    return done


def wait_for_empty_queue(sqs: Any, url: str) -> None:
    """Every wakeup was acknowledged: those of runs that waited for a slot too (a worker
    deletes handled messages in batches, within seconds)."""
    empty = {"visible": 0, "in_flight": 0, "delayed": 0}
    wait_until(lambda: queue_counts(sqs, url) == empty, STARTUP_TIMEOUT, "an empty queue")


def stop(workers: list[WorkerProcess]) -> None:
    """SIGTERM every worker (what ECS sends); each exits 0 once idle."""
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
    for worker in workers:
        code = worker.wait(timeout=STOP_TIMEOUT)
        assert code == 0, f"worker {worker.pid} exited {code}:\n{worker.log()}"


def holders(app: Runlane, scope: str) -> set[str]:
    state = app.store.slots.get_slot(scope)
    return set(state.holders) if state is not None else set()


def event_types(app: Runlane, run_id: str) -> list[EventType]:
    events = app.runs.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    return [e.type for e in events]


def waited_then_succeeded(app: Runlane, run_id: str, key: str) -> tuple[int, Span]:
    """Check the run's history: ``triggered``, any number of (``waiting_for_slot``,
    ``slot_freed``), then one ``started`` and ``succeeded`` (waiting counted no attempt).
    Returns how often it waited, and its attempt's span as stored (wall clock)."""
    events = app.runs.events(run_id)
    types = [e.type for e in events]
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), run_id
    assert types[0] is EventType.TRIGGERED, types
    assert types[-2:] == [EventType.STARTED, EventType.SUCCEEDED], types
    waits = types[1:-2]
    assert waits == [EventType.WAITING_FOR_SLOT, EventType.SLOT_FREED] * (len(waits) // 2), types
    started, succeeded = events[-2].at.timestamp(), events[-1].at.timestamp()
    return len(waits) // 2, Span(started, succeeded, key)


def occupancy(app: Runlane) -> dict[str, tuple[int, int]]:
    """``(holding, waiting)`` of each scope, as operators read it."""
    return {o.scope: (o.holding, o.waiting) for o in app.queues.list()}


# --- the tests ---------------------------------------------------------------------


def test_a_queue_limit_holds_across_worker_processes(
    app: Runlane, records: Path, sqs: Any, start_worker: Callable[..., WorkerProcess]
) -> None:
    """Three processes of eight threads each, 200 runs (60 on moto) of a queue limited
    to two: never more than two handlers at once, every run succeeds on its first
    attempt, and slots are handed on without maintenance."""
    scope = queue_scope(LIMITED_QUEUE)
    runs = app.trigger_many(TIMED_TASK, [{"n": n} for n in range(RUNS)])
    run_ids = sorted(run.id for run in runs)
    env = {RECORDS_ENV: str(records)}
    began = time.monotonic()
    workers = [
        start_worker(
            "--app",
            WORKER_APP,
            "--queue",
            LIMITED_QUEUE,
            "--concurrency",
            CONCURRENCY,
            extra_env=env,
        )
        for _ in range(WORKERS)
    ]
    most_holding = [0]

    def sample() -> None:  # storage's view: never more holders than the limit
        most_holding[0] = max(most_holding[0], len(holders(app, scope)))

    intervals = wait_for_intervals(records, RUNS, workers, sample)
    done = wait_for_status(app, run_ids, RunStatus.SUCCEEDED)
    elapsed = time.monotonic() - began
    wait_for_empty_queue(sqs, queue_url(sqs, app, LIMITED_QUEUE))
    stop(workers)

    assert sorted(i.run_id for i in intervals) == run_ids  # each executed once
    assert all(i.attempt == 1 for i in intervals)
    assert {run.attempt for run in done.values()} == {1}
    handlers = handler_spans(intervals)
    overlap = max_overlap(handlers)
    assert overlap <= QUEUE_LIMIT, f"{overlap} runs of a queue limited to {QUEUE_LIMIT} at once"
    assert most_holding[0] == QUEUE_LIMIT  # 24 threads: the limit, not the pool, binds
    assert len({i.pid for i in intervals}) == WORKERS  # every process took part
    checked = [waited_then_succeeded(app, run_id, scope) for run_id in run_ids]
    waits = sum(w for w, _ in checked)
    assert sum(1 for w, _ in checked if w) >= RUNS // 2  # most runs waited for a slot
    assert holders(app, scope) == set()
    assert app.store.slots.slot_waiters(scope, 10) == []
    assert occupancy(app)[scope] == (0, 0)

    # The stored times are when each write was decided, not when it landed (a write may
    # wait, and a transaction DynamoDB cancels for a conflict is sent again with the same
    # times): they approximate when a slot was held, too loosely to count overlaps.
    held = [span for _, span in checked]
    busy = max(s.end for s in handlers) - min(s.start for s in handlers)
    working = sum(s.end - s.start for s in handlers)
    print(
        f"\nqueue limit {QUEUE_LIMIT}, {RUNS} runs of {HANDLER_SECONDS * 1000:.0f} ms, "
        f"{WORKERS} workers x {CONCURRENCY} threads, {elapsed:.1f} s: {waits} waits; "
        f"busy {busy:.2f} s, handlers {working:.2f} s ({working / busy / QUEUE_LIMIT:.0%} of "
        f"the limit's capacity)\n"
        f"  handlers (recorded by the processes): max overlap {overlap}; "
        f"{report_idle(handlers, QUEUE_LIMIT)}\n"
        f"  slot records sampled: at most {most_holding[0]} holders; attempts (started to "
        f"succeeded, as stored, roughly): {report_idle(held, QUEUE_LIMIT)}"
    )


def test_a_key_limit_holds_per_key_across_worker_processes_while_keys_run_in_parallel(
    app: Runlane, records: Path, sqs: Any, start_worker: Callable[..., WorkerProcess]
) -> None:
    """Ten customers with twenty runs each (six on moto), one run per customer at a time,
    on an unlimited queue: no two runs of one key overlap, runs of different keys do."""
    payloads = [
        {"customer": f"customer-{k}", "n": n, "seconds": KEYED_SECONDS}
        for n in range(RUNS_PER_KEY)
        for k in range(KEYS)
    ]
    runs = app.trigger_many(KEYED_TASK, payloads)
    keys = {run.id: str(run.concurrency_key) for run in runs}
    assert set(keys.values()) == {f"customer-{k}" for k in range(KEYS)}
    env = {RECORDS_ENV: str(records)}
    began = time.monotonic()
    workers = [
        start_worker(
            "--app",
            WORKER_APP,
            "--queue",
            KEYED_QUEUE,
            "--concurrency",
            CONCURRENCY,
            extra_env=env,
        )
        for _ in range(WORKERS)
    ]
    intervals = wait_for_intervals(records, len(runs), workers)
    done = wait_for_status(app, keys, RunStatus.SUCCEEDED)
    elapsed = time.monotonic() - began
    wait_for_empty_queue(sqs, queue_url(sqs, app, KEYED_QUEUE))
    stop(workers)

    assert sorted(i.run_id for i in intervals) == sorted(keys)  # each executed once
    assert all(i.attempt == 1 for i in intervals)
    assert {run.attempt for run in done.values()} == {1}
    assert all(keys[i.run_id] == i.key for i in intervals)
    handlers = handler_spans(intervals)
    per_key = {key: max_overlap(s for s in handlers if s.key == key) for key in set(keys.values())}
    assert per_key == dict.fromkeys(per_key, KEY_LIMIT), per_key
    in_parallel = max_keys_at_once(handlers)
    assert in_parallel >= 2, "runs of different keys never overlapped"
    checked = [waited_then_succeeded(app, run_id, key) for run_id, key in sorted(keys.items())]
    waits = sum(w for w, _ in checked)
    for key in sorted(per_key):
        assert holders(app, key_scope(KEYED_TASK, key)) == set(), key
        assert app.store.slots.slot_waiters(key_scope(KEYED_TASK, key), 10) == [], key
    listed = occupancy(app)
    assert all(listed.get(key_scope(KEYED_TASK, key), (0, 0)) == (0, 0) for key in per_key)
    held = [span for _, span in checked]
    print(
        f"\nkey limit {KEY_LIMIT}, {KEYS} keys x {RUNS_PER_KEY} runs, {WORKERS} workers x "
        f"{CONCURRENCY} threads, {elapsed:.1f} s: {waits} waits; handlers: max overlap per "
        f"key {max(per_key.values())}, up to {in_parallel} keys at once; attempts as "
        f"stored: up to {max_keys_at_once(held)} keys at once"
    )


def test_a_killed_workers_slot_returns_with_its_lease_and_the_waiting_run_runs(
    app: Runlane, records: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    """The worker holding a queue's only slot is SIGKILLed while another run waits for
    it: maintenance recovers the expired lease, which frees the slot in the same write
    and wakes the waiter; the waiter runs on the surviving worker, and the killed run,
    recovered, runs again and succeeds."""
    began = time.monotonic()
    scope = queue_scope(SOLO_QUEUE)
    env = {RECORDS_ENV: str(records), ENV_LEASE_SECONDS: str(LEASE_SECONDS)}
    workers = [
        start_worker(
            "--app", WORKER_APP, "--queue", SOLO_QUEUE, "--concurrency", "2", extra_env=env
        )
        for _ in range(2)
    ]
    blocked = app.trigger(BLOCKING_TASK, {"block": True})
    started = records / f"{blocked.id}.1.started"
    wait_until(started.exists, STARTUP_TIMEOUT, "the blocking attempt to start")
    (killed,) = [w for w in workers if w.pid == int(started.read_text())]
    (survivor,) = [w for w in workers if w is not killed]
    running = app.runs.get(blocked.id)
    assert running.status is RunStatus.RUNNING and running.lease is not None
    # the workers' lease is the short one their environment sets
    assert running.lease.expires_at <= datetime.now(UTC) + timedelta(seconds=LEASE_SECONDS)
    killed_holder = slot_holder(running.lease.token, blocked.id)
    assert holders(app, scope) == {killed_holder}

    waiting = app.trigger(BLOCKING_TASK, {"block": False})
    wait_until(
        lambda: app.runs.get(waiting.id).slot_wait == scope,
        STARTUP_TIMEOUT,
        "the second run to wait for the slot",
    )
    assert app.runs.get(waiting.id).attempt == 0
    assert occupancy(app)[scope] == (1, 1)

    os.kill(killed.pid, signal.SIGKILL)
    assert killed.wait(timeout=10) == -signal.SIGKILL
    assert holders(app, scope) == {killed_holder}  # nobody frees a dead worker's slot...
    assert app.runs.get(waiting.id).slot_wait == scope

    expired = [0]

    def recovered() -> bool:  # ...but maintenance, once its lease has expired
        expired[0] += app.maintenance.run_pass().jobs[JOB_EXPIRED].acted
        return EventType.LEASE_EXPIRED in event_types(app, blocked.id)

    wait_until(recovered, RECOVERY_TIMEOUT, "maintenance to recover the killed worker's lease")
    assert expired[0] == 1
    after = holders(app, scope)
    assert killed_holder not in after  # freed by the recovery's own write
    assert len(after) <= 1 and {holder_run(h)[1] for h in after} <= {waiting.id, blocked.id}
    assert app.runs.get(waiting.id).slot_wait is None  # woken in the same pass

    done = wait_for_status(app, [waiting.id, blocked.id], RunStatus.SUCCEEDED)
    assert done[waiting.id].attempt == 1
    assert (records / f"{waiting.id}.1.started").read_text() == str(survivor.pid)
    assert waited_then_succeeded(app, waiting.id, scope)[0] >= 1
    assert done[blocked.id].attempt == 2 and done[blocked.id].lease_losses == 0
    assert (records / f"{blocked.id}.2.started").read_text() == str(survivor.pid)
    events = app.runs.events(blocked.id)
    types = [e.type for e in events]
    assert types[:3] == [EventType.TRIGGERED, EventType.STARTED, EventType.LEASE_EXPIRED]
    assert events[2].data["worker"] == running.lease.owner
    assert types[-2:] == [EventType.STARTED, EventType.SUCCEEDED]
    assert set(types[3:-2]) <= {EventType.WAITING_FOR_SLOT, EventType.SLOT_FREED}
    assert holders(app, scope) == set()
    assert occupancy(app)[scope] == (0, 0)
    stop([survivor])
    print(f"\nkilled slot holder recovered, both runs done: {time.monotonic() - began:.1f} s")
