"""Task handlers shared by the worker-process apps and the tests that trigger them.

The worker apps (``counting``, ``patient``) build ``app = Runlane.from_env()`` at import,
in the worker process. A test builds its own app against the same table and registers
the same tasks with :func:`register_counting` / :func:`register_patient`, so both sides
agree on names and queues.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from runlane_sqs import Runlane, TaskContext

SIDE_EFFECTS_ENV = "RUNLANE_TEST_SIDE_EFFECTS"
"""File every ``record`` attempt appends one line to: ``<run id> <pid> <attempt>``."""
MARKERS_ENV = "RUNLANE_TEST_MARKERS"
"""Directory where the shutdown handlers leave ``<run id>.started`` / ``.finished``."""

RECORD_TASK = "counting.record"
PATIENT_TASK = "shutdown.patient"
STUBBORN_TASK = "shutdown.stubborn"


def record(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    """Append this attempt to the side-effect file (outside the worker, O_APPEND)."""
    line = f"{ctx.run_id} {os.getpid()} {ctx.attempt}\n".encode()
    fd = os.open(os.environ[SIDE_EFFECTS_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return {"pid": os.getpid(), "payload": payload}


def _marker(ctx: TaskContext, suffix: str) -> Path:
    return Path(os.environ[MARKERS_ENV]) / f"{ctx.run_id}.{suffix}"


def patient(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    """Wait for the cancellation signal (at most ``wait_seconds``), then return."""
    _marker(ctx, "started").write_text(str(os.getpid()))
    observed = ctx.cancellation.wait(timeout=float(payload.get("wait_seconds", 30)))
    _marker(ctx, "finished").write_text("cancelled" if observed else "not cancelled")
    return {"cancelled": observed}


def stubborn(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    """Ignore cancellation and keep working for ``seconds``."""
    _marker(ctx, "started").write_text(str(os.getpid()))
    time.sleep(float(payload.get("seconds", 30)))
    _marker(ctx, "finished").write_text("done")
    return {"cancelled": ctx.cancelled}


def register_counting(app: Runlane) -> Runlane:
    app.task(record, name=RECORD_TASK)
    return app


def register_patient(app: Runlane) -> Runlane:
    app.task(patient, name=PATIENT_TASK)
    app.task(stubborn, name=STUBBORN_TASK)
    return app
