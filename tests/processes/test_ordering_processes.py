"""Ordered runs with real worker processes (``python -m runlane_sqs worker``).

Ten ordering keys with a line of runs each (:data:`RUNS_PER_KEY`), triggered interleaved
across the keys, are handled by three worker processes of eight threads each. The
handlers record every attempt outside the system (``tests.apps.ordering_tasks``, one file
per process, ``time.monotonic()``), and the test checks, per key, that no two attempts
overlapped, that the runs executed in trigger order, and that a retried run held the
key's later runs back until it finished (the retry succeeding, or the last attempt
failing for good). Runs of different keys did run at the same time: ordering serialises
a key, not the queue. No maintenance runs: each finished run's writer hands its key's
turn on, and retries (a second away) are published with SQS ``DelaySeconds`` by the
worker that recorded the failure.

The lines are shorter on moto than on DynamoDB Local + LocalStack (see
:data:`RUNS_PER_KEY`). The test prints what it measured (``-s`` shows it).
"""

from __future__ import annotations

import signal
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from runlane_sqs import EventType, Runlane, RunStatus
from runlane_sqs.core.model import Run
from runlane_sqs.core.ordering import OrderHead
from tests.apps.ordering_tasks import (
    FAIL_ALWAYS,
    FAIL_ONCE,
    HANDLER_SECONDS,
    LEDGER_QUEUE,
    LEDGER_TASK,
    MAX_ATTEMPTS,
    RAISED,
    RECORDS_ENV,
    RETRY_SECONDS,
    SUCCEEDED,
    Attempt,
    read_attempts,
    register_ordering,
)
from tests.emulators import TEST_BACKEND, WorkerProcess, queue_counts, queue_url, wait_until
from tests.processes.spans import Span, max_keys_at_once, max_overlap

WORKER_APP = "tests.apps.ordering_app:app"
WORKERS = 3
CONCURRENCY = "8"
ON_MOTO = TEST_BACKEND == "moto"
KEYS = 10
RUNS_PER_KEY = 12 if ON_MOTO else 30
"""Runs per ordering key. An ordered run costs some seven DynamoDB requests (its trigger,
claim, outcome, and the next run's read and wake), which the moto server applies one at a
time: a hand-over takes about a second there, and 10 x 12 runs about 25 s (the test about
35 s); on DynamoDB Local + LocalStack (``make test-aws-local``) 10 x 30 take about 18 s."""
FAIL_ONCE_AT = (3, 8) if ON_MOTO else (5, 17)
"""Places whose first attempt fails in every key's line (the retry succeeds)."""
FAIL_ALWAYS_AT = 6 if ON_MOTO else 23
"""The place whose every attempt fails in every key's line; the next run still runs."""
COMPLETION_TIMEOUT = 150.0
SETTLE_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0

pytestmark = pytest.mark.timeout(COMPLETION_TIMEOUT + 90)


@pytest.fixture
def records(tmp_path: Path) -> Path:
    directory = tmp_path / "records"
    directory.mkdir()
    return directory


@pytest.fixture
def app(make_app: Callable[..., Runlane]) -> Runlane:
    app = register_ordering(make_app())
    app.provision()
    return app


def fail_mode(n: int) -> str | None:
    if n == FAIL_ALWAYS_AT:
        return FAIL_ALWAYS
    return FAIL_ONCE if n in FAIL_ONCE_AT else None


def expected_outcomes(n: int) -> list[str]:
    """The outcomes of place ``n``'s attempts, in attempt order."""
    mode = fail_mode(n)
    if mode == FAIL_ALWAYS:
        return [RAISED] * MAX_ATTEMPTS
    if mode == FAIL_ONCE:
        return [RAISED, SUCCEEDED]
    return [SUCCEEDED]


def expected_status(n: int) -> RunStatus:
    return RunStatus.FAILED if fail_mode(n) == FAIL_ALWAYS else RunStatus.SUCCEEDED


# --- waiting on real processes --------------------------------------------------------


def wait_for_attempts(records: Path, expected: int, workers: list[WorkerProcess]) -> None:
    """Until ``expected`` attempts are recorded; fail early if a worker exits."""
    seen = [0]

    def recorded() -> bool:
        for worker in workers:
            code = worker.process.poll()
            assert code is None, f"worker {worker.pid} exited {code}:\n{worker.log()}"
        seen[0] = len(read_attempts(records))
        return seen[0] >= expected

    try:
        wait_until(recorded, COMPLETION_TIMEOUT, f"{expected} attempts")
    except AssertionError as exc:
        raise AssertionError(f"{exc} ({seen[0]} recorded)") from None


def wait_for_ends(app: Runlane, expected: dict[str, RunStatus]) -> dict[str, Run]:
    """Each run once it is terminal; its status must be the expected one."""
    done: dict[str, Run] = {}
    pending = set(expected)

    def all_ended() -> bool:
        for run_id in sorted(pending):
            run = app.runs.get(run_id)
            if run.is_terminal:
                done[run_id] = run
                pending.discard(run_id)
        return not pending

    wait_until(all_ended, SETTLE_TIMEOUT, f"{len(pending)} run(s) to end")
    wrong = {i: (r.status, expected[i]) for i, r in done.items() if r.status is not expected[i]}
    assert not wrong, f"runs ended with the wrong status (got, expected): {wrong}"
    return done


def wait_for_empty_queue(sqs: Any, url: str) -> None:
    """Every wakeup was acknowledged (a worker deletes handled messages in batches)."""
    empty = {"visible": 0, "in_flight": 0, "delayed": 0}
    wait_until(lambda: queue_counts(sqs, url) == empty, SETTLE_TIMEOUT, "an empty queue")


def stop(workers: list[WorkerProcess]) -> None:
    """SIGTERM every worker (what ECS sends); each exits 0 once idle."""
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
    for worker in workers:
        code = worker.wait(timeout=STOP_TIMEOUT)
        assert code == 0, f"worker {worker.pid} exited {code}:\n{worker.log()}"


# --- checks over the recorded attempts ------------------------------------------------


def by_key(attempts: list[Attempt]) -> dict[str, list[Attempt]]:
    """Each key's attempts in the order they started."""
    lines: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in attempts:
        lines[attempt.key].append(attempt)
    return {key: sorted(line, key=lambda a: a.start) for key, line in lines.items()}


def check_one_at_a_time(key: str, line: list[Attempt]) -> None:
    """No two attempts of the key overlapped."""
    for before, after in pairwise(line):
        assert after.start >= before.end, (
            f"{key}: place {after.n} attempt {after.attempt} started "
            f"{(before.end - after.start) * 1000:.1f} ms before place {before.n} attempt "
            f"{before.attempt} ended"
        )


def check_trigger_order(key: str, line: list[Attempt]) -> None:
    """Attempts ran place after place, each place's attempts in attempt order, with the
    outcomes its payload asked for; the successful places are in trigger order."""
    ran = [(a.n, a.attempt) for a in line]
    assert ran == sorted(ran), f"{key}: attempts out of order: {ran}"
    outcomes: dict[int, list[str]] = defaultdict(list)
    for a in line:
        outcomes[a.n].append(a.outcome)
    assert outcomes == {n: expected_outcomes(n) for n in range(RUNS_PER_KEY)}, key
    succeeded = [a.n for a in line if a.outcome == SUCCEEDED]
    assert succeeded == [n for n in range(RUNS_PER_KEY) if n != FAIL_ALWAYS_AT], key


def check_held_back(key: str, line: list[Attempt]) -> list[float]:
    """Every attempt of place n started after the last attempt of place n - 1 ended (a
    retried run held the later ones back). Returns each hand-over's gap (seconds from
    place n - 1's last end to place n's first start)."""
    starts: dict[int, float] = {}
    ends: dict[int, float] = {}
    for a in line:
        starts[a.n] = min(starts.get(a.n, a.start), a.start)
        ends[a.n] = max(ends.get(a.n, a.end), a.end)
    gaps: list[float] = []
    for n in range(1, RUNS_PER_KEY):
        gap = starts[n] - ends[n - 1]
        assert gap >= 0, (
            f"{key}: place {n} started {-gap * 1000:.1f} ms before place {n - 1}'s last "
            "attempt ended"
        )
        gaps.append(gap)
    return gaps


def check_history(app: Runlane, run: Run, n: int) -> None:
    """``triggered`` (behind the n runs before it, all unfinished), ``turn_reached``
    unless it was first, then its attempts: one ``started`` each, the last ending the
    run."""
    events = app.runs.events(run.id)
    types = [e.type for e in events]
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), run.id
    triggered = events[0]
    assert triggered.type is EventType.TRIGGERED, types
    assert triggered.data["ordering_key"] == run.ordering_key
    assert triggered.data["place"] == n
    assert triggered.data.get("behind", 0) == n, triggered.data
    if n:
        assert types[1] is EventType.TURN_REACHED, (n, types)
        assert events[1].data == {"ordering_key": run.ordering_key, "place": n}
    assert types.count(EventType.TURN_REACHED) == (1 if n else 0), (n, types)
    attempts = len(expected_outcomes(n))
    assert types.count(EventType.STARTED) == attempts, (n, types)
    assert types.count(EventType.ATTEMPT_FAILED) == expected_outcomes(n).count(RAISED), types
    final = EventType.FAILED if expected_status(n) is RunStatus.FAILED else EventType.SUCCEEDED
    assert types[-1] is final, (n, types)
    first_start = types.index(EventType.STARTED)
    assert EventType.TURN_REACHED not in types[first_start:], types


# --- the test ---------------------------------------------------------------------


def test_ordered_runs_execute_one_at_a_time_in_trigger_order_across_worker_processes(
    app: Runlane, records: Path, sqs: Any, start_worker: Callable[..., WorkerProcess]
) -> None:
    """Ten keys of 30 runs (12 on moto), triggered interleaved; in every key's line two
    runs fail their first attempt and one fails every attempt. Per key: one attempt at a
    time, in trigger order, each place after the previous one's last attempt; keys in
    parallel; every run behind another reached its turn."""
    keys = [f"acct-{k}" for k in range(KEYS)]
    runs: dict[str, tuple[str, int]] = {}
    began_triggering = time.monotonic()
    for n in range(RUNS_PER_KEY):
        for key in keys:
            payload = {"key": key, "n": n, "fail": fail_mode(n)}
            run = app.trigger(LEDGER_TASK, payload, ordering_key=key)
            assert run.created and run.place == n and run.turn_wait == (n > 0)
            runs[run.id] = (key, n)
    triggering = time.monotonic() - began_triggering
    env = {RECORDS_ENV: str(records)}
    began = time.monotonic()
    workers = [
        start_worker(
            "--app",
            WORKER_APP,
            "--queue",
            LEDGER_QUEUE,
            "--concurrency",
            CONCURRENCY,
            extra_env=env,
        )
        for _ in range(WORKERS)
    ]
    total_attempts = KEYS * sum(len(expected_outcomes(n)) for n in range(RUNS_PER_KEY))
    wait_for_attempts(records, total_attempts, workers)
    done = wait_for_ends(app, {run_id: expected_status(n) for run_id, (_, n) in runs.items()})
    elapsed = time.monotonic() - began
    wait_for_empty_queue(sqs, queue_url(sqs, app, LEDGER_QUEUE))
    stop(workers)

    attempts = read_attempts(records)
    assert len(attempts) == total_attempts  # no attempt ran twice, none after the wait
    assert all(runs[a.run_id] == (a.key, a.n) for a in attempts)
    assert len({(a.run_id, a.attempt) for a in attempts}) == total_attempts
    for run_id, run in done.items():
        assert run.attempt == len(expected_outcomes(runs[run_id][1])), run_id
    lines = by_key(attempts)
    assert sorted(lines) == sorted(keys)
    gaps: list[float] = []
    for key, line in sorted(lines.items()):
        check_one_at_a_time(key, line)
        check_trigger_order(key, line)
        gaps.extend(check_held_back(key, line))
    spans = [Span(a.start, a.end, a.key) for a in attempts]
    per_key = {key: max_overlap(s for s in spans if s.key == key) for key in keys}
    assert per_key == dict.fromkeys(keys, 1), per_key
    in_parallel = max_keys_at_once(spans)
    assert in_parallel > 1, "runs of different keys never overlapped"
    for run_id, (_, n) in sorted(runs.items()):
        check_history(app, done[run_id], n)
    for key in keys:
        assert app.store.orders.first_place(key) is None, key  # the line is empty
        assert app.store.orders.order_head(key) == OrderHead(RUNS_PER_KEY, 0), key

    retry_waits = [
        later.start - earlier.end
        for line in lines.values()
        for earlier, later in pairwise(line)
        if later.n == earlier.n
    ]
    # each retry waited out its delay (its wakeup is due then), holding the key's line
    assert min(retry_waits) >= RETRY_SECONDS - 0.1, min(retry_waits)
    busy = max(s.end for s in spans) - min(s.start for s in spans)
    print(
        f"\nordering: {KEYS} keys x {RUNS_PER_KEY} runs of {HANDLER_SECONDS * 1000:.0f} ms "
        f"({total_attempts} attempts; places {list(FAIL_ONCE_AT)} retried after "
        f"{RETRY_SECONDS} s, place {FAIL_ALWAYS_AT} failed {MAX_ATTEMPTS} times), "
        f"{WORKERS} workers x {CONCURRENCY} threads; triggered in {triggering:.1f} s, "
        f"done in {elapsed:.1f} s ({len(runs) / elapsed:.1f} runs/s, handlers busy "
        f"{busy:.1f} s)\n"
        f"  per key: max overlap {max(per_key.values())}; up to {in_parallel} keys at once; "
        f"hand-over gap median {statistics.median(gaps) * 1000:.0f} ms, max "
        f"{max(gaps) * 1000:.0f} ms; retry waits {min(retry_waits):.2f} to "
        f"{max(retry_waits):.2f} s"
    )
