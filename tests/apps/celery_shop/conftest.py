"""Runs the shop's tests on the app ``CELERY_SHOP_APP`` names (``switch.py``), before the
test module imports the tasks; on a runlane app, works its runs as a deployed worker
would for the whole session."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from tests.apps.celery_shop import switch

VARIANT = switch.variant()
if VARIANT != switch.CELERY:
    switch.use_runlane_app()

WORKER_APP = "tests.apps.celery_shop.runlane_worker:app"
IDLE_SECONDS = 0.05
STOP_SECONDS = 30


@pytest.fixture(scope="session", autouse=True)
def shop_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Nothing for Celery (eager); a draining thread over in-memory storage, or a
    ``runlane-sqs worker`` process on the emulators the environment names."""
    if VARIANT == switch.CELERY:
        yield
    elif VARIANT == switch.RUNLANE_MEMORY:
        yield from _draining_thread()
    else:
        yield from _worker_process(tmp_path_factory)


def _draining_thread() -> Iterator[None]:
    from runlane_sqs.core.clock import SystemClock  # noqa: PLC0415 (runlane variants only)
    from runlane_sqs.testing import InMemoryRunStore, InMemoryTransport  # noqa: PLC0415
    from tests.apps.celery_shop.runlane_app import app  # noqa: PLC0415

    runlane, clock = app.runlane, SystemClock()  # retries fall due in real time
    runlane.rewire(
        store=InMemoryRunStore(runlane.config.environment),
        transport=InMemoryTransport(clock),
        clock=clock,
    )
    worker, stop, errors = runlane.worker(concurrency=4), threading.Event(), []

    def drain() -> None:
        try:
            while not stop.is_set():
                if not worker.drain():
                    stop.wait(IDLE_SECONDS)
        except BaseException as exc:  # reported at the end of the session
            errors.append(exc)

    thread = threading.Thread(target=drain, name="celery-shop-drain", daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(STOP_SECONDS)
    assert not errors, errors


def _worker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    from tests.apps.celery_shop.runlane_app import app  # noqa: PLC0415
    from tests.emulators import REPO_ROOT, WorkerProcess  # noqa: PLC0415

    app.runlane.provision(["default", "payments"])
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    args = ["--app", WORKER_APP, "--concurrency", "4"]
    worker = WorkerProcess(args, env, tmp_path_factory.mktemp("shop-worker"), "worker")
    yield
    worker.process.send_signal(signal.SIGTERM)
    try:
        assert worker.wait(STOP_SECONDS) == 0, worker.log()
    finally:
        worker.kill()
