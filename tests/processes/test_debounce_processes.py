"""Debounce with three real worker processes (docs/debounce.md), on the moto server and
on DynamoDB Local + LocalStack: 1,000 triggers over five keys make five runs, each run
once with its key's last payload, after the quiet period; under a constant stream of
triggers the maximum wait starts a run every few seconds, and each run carries the last
payload of the triggers that went to it (none lost). The figures are printed."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from runlane_sqs import EventType, Run, Runlane, RunStatus
from tests.apps.debounced_worker import BUILD, BUILD_QUIET, CAP, STREAM, register
from tests.emulators import WorkerProcess, wait_until

pytestmark = pytest.mark.integration
WORKERS = 3
KEYS = 5
TRIGGERS = 1000
GRACE = timedelta(seconds=3)
"""How late a run may start after its due time here: a whole-second SQS delay, a poll."""


STARTUP_TIMEOUT_SECONDS = 60


def _workers(start_worker: Callable[..., WorkerProcess]) -> list[WorkerProcess]:
    return [
        start_worker("--app", "tests.apps.debounced_worker:app", "--concurrency", "4")
        for _ in range(WORKERS)
    ]


def _consuming(workers: list[WorkerProcess]) -> None:
    """Wait until every worker consumes: a cap is measured from a run's first trigger,
    not from the start of a worker process (seconds on a busy machine)."""
    for worker in workers:
        wait_until(
            lambda w=worker: "consuming" in w.log(), STARTUP_TIMEOUT_SECONDS, "a worker to start"
        )


def _started(app: Runlane, run_id: str) -> list[EventType]:
    return [e.type for e in app.runs.events(run_id) if e.type is EventType.STARTED]


def test_a_thousand_triggers_over_five_keys_make_five_runs(
    make_app: Callable[..., Runlane], start_worker: Callable[..., WorkerProcess]
) -> None:
    app = register(make_app())
    app.provision()
    _workers(start_worker)

    def trigger_key(key: int) -> tuple[list[Run], float]:
        """Trigger the key's payloads one after another; returns the runs and when the
        last trigger was made."""
        runs, last_at = [], 0.0
        for n in range(TRIGGERS // KEYS):
            last_at = time.time()
            runs.append(app.trigger(BUILD, {"key": f"k{key}", "n": n}))
        return runs, last_at

    began = time.monotonic()
    with ThreadPoolExecutor(KEYS) as pool:
        results = list(pool.map(trigger_key, range(KEYS)))
    took = time.monotonic() - began
    ids = {r.id for runs, _ in results for r in runs}
    assert len(ids) == KEYS  # one run per key: every trigger of a key went to it

    def all_done() -> bool:
        return all(app.runs.get_stored(i).status is RunStatus.SUCCEEDED for i in ids)

    wait_until(all_done, 60, "the five runs to succeed")
    for runs, last_at in results:
        run = app.runs.get(runs[0].id)
        assert run.result == {"key": runs[0].payload["key"], "n": TRIGGERS // KEYS - 1}
        assert (run.attempt, run.collapsed) == (1, TRIGGERS // KEYS - 1)
        started = next(e.at for e in app.runs.events(run.id) if e.type is EventType.STARTED)
        assert started.timestamp() >= last_at + BUILD_QUIET - 0.01  # after the quiet period
    assert len(app.runs.list().runs) == KEYS
    print(
        f"\n{TRIGGERS} debounced triggers over {KEYS} keys in {took:.1f} s "
        f"({took / TRIGGERS * 1000 * KEYS:.1f} ms each per key): {len(ids)} runs"
    )


def test_the_maximum_wait_starts_runs_under_a_constant_stream(
    make_app: Callable[..., Runlane], start_worker: Callable[..., WorkerProcess]
) -> None:
    """A trigger every 100 ms for 13 s never leaves 2 s of quiet: a run starts about
    every 4 s (its cap), each with the payload of the last trigger that went to it."""
    app = register(make_app())
    app.provision()
    _consuming(_workers(start_worker))

    last_of: dict[str, int] = {}
    first_at: dict[str, float] = {}
    n, end = 0, time.monotonic() + 13
    while time.monotonic() < end:
        at = time.time()
        run = app.trigger(STREAM, n)
        last_of[run.id] = n
        first_at.setdefault(run.id, at)
        n += 1
        time.sleep(0.1)

    def all_done() -> bool:
        return all(app.runs.get_stored(i).status is RunStatus.SUCCEEDED for i in last_of)

    wait_until(all_done, 30, "every run of the stream to succeed")
    lateness = []
    for run_id, last in last_of.items():
        run = app.runs.get(run_id)
        assert run.result == last and run.attempt == 1  # no trigger lost, none run twice
        assert len(_started(app, run_id)) == 1
        started = next(e.at for e in app.runs.events(run_id) if e.type is EventType.STARTED)
        cap = first_at[run_id] + CAP
        lateness.append(started.timestamp() - cap)
        assert started.timestamp() <= cap + GRACE.total_seconds()
    # 13 s of triggers: runs capped at 4 s each (the last one after its quiet period)
    assert 3 <= len(last_of) <= 5
    print(
        f"\nconstant stream: {n} triggers in 13 s, {len(last_of)} runs; start after the "
        f"cap {min(lateness):+.2f} to {max(lateness):+.2f} s"
    )
