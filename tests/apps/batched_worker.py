"""Worker app of the batch process tests (tests/processes/test_batch_processes.py):
``--app tests.apps.batched_worker:app``, with a 3 s lease so a killed worker's batch is
recovered within seconds. ``ledger.post`` takes items in batches of 100 (at most 30 s
old) and returns their numbers; ``ledger.post_slowly`` does the same in two seconds,
leaving ``<run id>.<attempt>.started`` in the directory ``BATCH_MARKERS`` names."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from runlane_sqs import Batch, Runlane, TaskContext

POST = "ledger.post"
SLOW = "ledger.post_slowly"
SIZE = 100
LEASE_SECONDS = 3
MARKERS_ENV = "BATCH_MARKERS"


def register(app: Runlane) -> Runlane:
    @app.task(name=POST, batch=Batch(size=SIZE, max_age=30))
    def post(ctx: TaskContext, items: list[Any]) -> Any:
        return [item["n"] for item in items]

    @app.task(name=SLOW, batch=Batch(size=SIZE, max_age=30))
    def post_slowly(ctx: TaskContext, items: list[Any]) -> Any:
        markers = os.environ.get(MARKERS_ENV)
        if markers:
            Path(markers, f"{ctx.run_id}.{ctx.attempt}.started").touch()
        time.sleep(2)
        return [item["n"] for item in items]

    return app


app = register(Runlane.from_env(lease_duration=LEASE_SECONDS))
