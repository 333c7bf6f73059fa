"""Batches with real worker processes (docs/batches.md), on the moto server and on
DynamoDB Local + LocalStack: 1,000 items triggered from four threads in batches of 100
make 10 runs of 100 items, each item in exactly one of them at the index its trigger
was told, each run once; a worker SIGKILLed in the middle of a batch loses no item
(maintenance recovers the batch and another worker runs it again). The figures are
printed."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from runlane_sqs import Run, Runlane, RunStatus
from tests.apps.batched_worker import LEASE_SECONDS, MARKERS_ENV, POST, SIZE, SLOW, register
from tests.emulators import WorkerProcess, wait_until

pytestmark = pytest.mark.integration
WORKER_APP = "tests.apps.batched_worker:app"
ITEMS = 1000


def _trigger_all(app: Runlane, task: str, count: int) -> list[Run]:
    """Trigger ``count`` items from four threads; the runs returned, by item number."""

    def trigger(n: int) -> Run:
        return app.trigger(task, {"n": n})

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(trigger, range(count)))


def _check_every_item_in_one_run(app: Runlane, runs: list[Run]) -> dict[str, Run]:
    """Each item sits at its trigger's index in the run it was told, and every run's
    result lists exactly its items; returns the finished runs by id."""
    finished = {run_id: app.runs.get(run_id) for run_id in {r.id for r in runs}}
    for n, told in enumerate(runs):
        assert told.item is not None
        assert finished[told.id].payload[told.item] == {"n": n}
    carried = sorted(n for run in finished.values() for n in run.result)
    assert carried == list(range(len(runs)))  # every item once: none lost, none twice
    return finished


def test_a_thousand_items_in_batches_of_a_hundred_make_ten_runs(
    make_app: Callable[..., Runlane], start_worker: Callable[..., WorkerProcess]
) -> None:
    app = register(make_app(lease_duration=LEASE_SECONDS))
    app.provision()
    for _ in range(3):
        start_worker("--app", WORKER_APP, "--concurrency", "4")

    began = time.monotonic()
    runs = _trigger_all(app, POST, ITEMS)
    took = time.monotonic() - began
    ids = {r.id for r in runs}
    assert len(ids) == ITEMS // SIZE and sum(r.created for r in runs) == ITEMS // SIZE

    def all_done() -> bool:
        return all(app.runs.get_stored(i).status is RunStatus.SUCCEEDED for i in ids)

    wait_until(all_done, 60, "the ten batches to succeed")
    finished = _check_every_item_in_one_run(app, runs)
    assert all((run.attempt, len(run.payload)) == (1, SIZE) for run in finished.values())
    print(
        f"\n{ITEMS} batched triggers from 4 threads in {took:.1f} s "
        f"({took / ITEMS * 4 * 1000:.1f} ms each): {len(ids)} runs of {SIZE}"
    )


def test_a_killed_worker_loses_no_item(
    make_app: Callable[..., Runlane],
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    app = register(make_app(lease_duration=LEASE_SECONDS))
    app.provision()
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {MARKERS_ENV: str(markers)}
    runs = _trigger_all(app, SLOW, 3 * SIZE)
    first = start_worker("--app", WORKER_APP, "--concurrency", "1", extra_env=env)

    wait_until(lambda: any(markers.iterdir()), 30, "the first worker to start a batch")
    killed_run = next(markers.iterdir()).name.split(".")[0]
    os.kill(first.pid, signal.SIGKILL)
    for _ in range(2):
        start_worker("--app", WORKER_APP, "--concurrency", "2", extra_env=env)

    ids = {r.id for r in runs}

    def recovered() -> bool:
        app.maintenance.run_pass()  # expires the killed worker's lease
        return all(app.runs.get_stored(i).status is RunStatus.SUCCEEDED for i in ids)

    wait_until(recovered, LEASE_SECONDS + 40, "every batch to succeed after the kill")
    finished = _check_every_item_in_one_run(app, runs)
    again = finished[killed_run]
    assert (again.attempt, again.failures) == (2, 0)  # run again, no failure counted
    print(f"\nbatch {killed_run} run again after its worker was killed: no item lost")
