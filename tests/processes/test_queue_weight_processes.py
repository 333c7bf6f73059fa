"""Queue weights with real worker processes (docs/operations.md, "Queue weights"): three
workers consuming ``high=3,low`` while both queues stay full start runs of ``high`` and
``low`` in a ratio within 10% of 3 to 1."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from runlane_sqs import Runlane, RunStatus
from tests.apps.weighted_worker import BULK, HIGH, LOW, URGENT, register
from tests.emulators import WorkerProcess

pytestmark = pytest.mark.integration
WORKERS = 3
RUNS_EACH = 64
"""Runs each worker executes: 192 of the 400 waiting, so both queues stay full; a whole
number of weight cycles (four receives of two messages each: ``high, high, low, high``)."""
EXIT_TIMEOUT = 120.0


def test_three_workers_start_runs_in_the_ratio_of_the_weights(
    make_app: Callable[..., Runlane], start_worker: Callable[..., WorkerProcess]
) -> None:
    app = register(make_app())
    app.provision([HIGH, LOW])
    urgent = app.trigger_many(URGENT, range(200))
    bulk = app.trigger_many(BULK, range(200))

    workers = [
        start_worker(
            "--app",
            "tests.apps.weighted_worker:app",
            "--queues",
            f"{HIGH}=3,{LOW}",
            "--drain",
            "--max-runs",
            str(RUNS_EACH),
        )
        for _ in range(WORKERS)
    ]
    for worker in workers:
        assert worker.wait(EXIT_TIMEOUT) == 0, worker.log()
        assert worker.output().strip() == f"executed {RUNS_EACH} run(s)"

    done = {
        queue: sum(app.runs.get_stored(r.id).status is RunStatus.SUCCEEDED for r in runs)
        for queue, runs in ((HIGH, urgent), (LOW, bulk))
    }
    assert done[HIGH] + done[LOW] == WORKERS * RUNS_EACH
    assert 2.7 <= done[HIGH] / done[LOW] <= 3.3, done
