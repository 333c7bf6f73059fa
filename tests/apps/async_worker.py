"""An asyncio worker process for the shutdown tests: ``python -m
tests.apps.async_worker`` builds the app from the environment and runs
``asyncio.run(AsyncWorker(app, ...).run())`` until SIGTERM or SIGINT.

The app has the ``patient`` tasks (``def`` handlers, run on the worker's threads) and
:data:`ASYNC_PATIENT_TASK` (an ``async def`` handler, run on its event loop). A test
builds its own app with :func:`register_async_patient` to trigger them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

from runlane_sqs import Runlane, TaskContext
from runlane_sqs.aio import AsyncWorker
from tests.apps.tasks import MARKERS_ENV, register_patient

GRACE_ENV = "RUNLANE_TEST_GRACE_SECONDS"
ASYNC_PATIENT_TASK = "shutdown.patient-async"


def _marker(ctx: TaskContext, suffix: str) -> Path:
    return Path(os.environ[MARKERS_ENV]) / f"{ctx.run_id}.{suffix}"


async def patient_async(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    """Await the cancellation signal (at most ``wait_seconds``), then return."""
    _marker(ctx, "started").write_text(str(os.getpid()))
    try:
        await asyncio.wait_for(ctx.until_cancelled(), float(payload.get("wait_seconds", 30)))
    except TimeoutError:
        observed = False
    else:
        observed = True
    _marker(ctx, "finished").write_text("cancelled" if observed else "not cancelled")
    return {"cancelled": observed}


def register_async_patient(app: Runlane) -> Runlane:
    register_patient(app)
    app.task(patient_async, name=ASYNC_PATIENT_TASK)
    return app


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    app = register_async_patient(Runlane.from_env())
    worker = AsyncWorker(
        app, concurrency=2, wait_seconds=1, grace_period=float(os.environ.get(GRACE_ENV, "10"))
    )
    asyncio.run(worker.run())


if __name__ == "__main__":
    main()
