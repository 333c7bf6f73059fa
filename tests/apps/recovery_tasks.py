"""Task handlers for the maintenance and recovery tests (worker processes and tests alike).

The worker apps (``recovery_worker``, ``maintenance_app``) build their ``app`` at import,
in the process that loads them. A test builds its own app against the same table and
registers the same tasks with :func:`register_recovery`, so both sides agree on names,
queues, retry policies and timeouts.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from runlane_sqs import RetryPolicy, Runlane, TaskContext

MARKERS_ENV = "RUNLANE_TEST_RECOVERY_MARKERS"
"""Directory where handlers leave ``<run id>.<attempt>.started`` markers."""

PLAIN_TASK = "recovery.plain"
"""Returns its payload."""
DEADLINE_TASK = "recovery.deadline"
"""Has a fixed 30 s attempt timeout and one immediate retry."""
HANGS_FIRST_TASK = "recovery.hangs_first"
"""Attempt 1 blocks (until its worker is killed); later attempts succeed."""
KILLS_WORKER_TASK = "recovery.kills_worker"
"""Every attempt SIGKILLs its own worker process."""

WORKER_LEASE_SECONDS = 3
"""Lease of the ``recovery_worker`` app: short, so a killed worker's lease expires soon."""
DEADLINE_TIMEOUT_SECONDS = 30
DEADLINE_RETRY = RetryPolicy(max_attempts=2, backoff="fixed", delay=0)


def _mark(ctx: TaskContext) -> None:
    directory = os.environ.get(MARKERS_ENV)
    if directory:
        Path(directory, f"{ctx.run_id}.{ctx.attempt}.started").write_text(str(os.getpid()))


def plain(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    _mark(ctx)
    return {"attempt": ctx.attempt, "payload": payload}


def hangs_first(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    _mark(ctx)
    if ctx.attempt == 1:
        deadline = time.monotonic() + float((payload or {}).get("hang_seconds", 60))
        while time.monotonic() < deadline:  # ignores cancellation: only SIGKILL ends it
            time.sleep(0.05)
    return {"attempt": ctx.attempt, "pid": os.getpid()}


def kills_worker(ctx: TaskContext, payload: Any) -> None:
    _mark(ctx)
    os.kill(os.getpid(), signal.SIGKILL)


def register_recovery(app: Runlane) -> Runlane:
    app.task(plain, name=PLAIN_TASK)
    app.task(
        plain,
        name=DEADLINE_TASK,
        timeout=DEADLINE_TIMEOUT_SECONDS,
        retry=DEADLINE_RETRY,
    )
    app.task(hangs_first, name=HANGS_FIRST_TASK)
    app.task(kills_worker, name=KILLS_WORKER_TASK)
    return app
