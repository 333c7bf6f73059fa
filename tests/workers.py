"""One way to drive either worker from a test: the sync :class:`~runlane_sqs.Worker` or the
asyncio :class:`~runlane_sqs.aio.AsyncWorker`.

``WorkerKind("sync")`` and ``WorkerKind("async")`` build, drain and run their worker with
the same calls, so one test body checks both (``asyncio.run`` hides the event loop).
``running()`` works the worker in a background thread, as a deployed one works its
queues, and stops it on exit.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from runlane_sqs import Runlane, Worker
from runlane_sqs.aio import AsyncWorker

SYNC = "sync"
ASYNC = "async"
KINDS = (SYNC, ASYNC)
STOP_TIMEOUT_SECONDS = 30.0
DRAIN_WAIT_SECONDS = 0

AnyWorker = Worker | AsyncWorker


@dataclass
class Started:
    """A worker working in a background thread."""

    worker: AnyWorker
    thread: threading.Thread
    errors: list[BaseException] = field(default_factory=list)

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """``worker.stop()`` from this (another) thread, then wait for ``run()`` to return."""
        self.worker.stop()
        self.join(timeout)

    def join(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop"
        assert self.errors == [], self.errors


@dataclass(frozen=True)
class WorkerKind:
    """``sync`` or ``async``: which worker class a test drives."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in KINDS:
            raise ValueError(f"worker kind must be one of {KINDS}, not {self.name!r}")

    @property
    def cancels_abandoned_attempts(self) -> bool:
        """Whether attempts left after the grace period are stopped for good (the async
        worker cancels their tasks); the sync worker cannot stop a thread, so a handler
        that ignores cancellation returns later and its outcome is refused by fencing."""
        return self.name == ASYNC

    def build(self, app: Runlane, **options: Any) -> AnyWorker:
        """A worker of this kind; its ``drain()`` ends with a short poll instead of a
        one-second long poll (the emulators return every visible message at once)."""
        worker = Worker(app, **options) if self.name == SYNC else AsyncWorker(app, **options)
        worker.config = replace(worker.config, drain_wait_seconds=DRAIN_WAIT_SECONDS)
        return worker

    def drain_worker(self, worker: AnyWorker, max_runs: int | None = None) -> int:
        if isinstance(worker, AsyncWorker):
            return asyncio.run(worker.drain(max_runs=max_runs))
        return worker.drain(max_runs=max_runs)

    def drain(self, app: Runlane, max_runs: int | None = None, **options: Any) -> int:
        """Build a worker with ``options``; process the work available now."""
        return self.drain_worker(self.build(app, **options), max_runs)

    def drain_all(self, app: Runlane) -> None:
        """Drain until a drain executes nothing (retries and resumed runs included)."""
        while self.drain(app):
            pass

    def run_worker(self, worker: AnyWorker) -> None:
        if isinstance(worker, AsyncWorker):
            asyncio.run(worker.run())
        else:
            worker.run()

    @contextmanager
    def running(self, app: Runlane, **options: Any) -> Iterator[Started]:
        """``run()`` in a background thread; stopped (and joined) on exit."""
        options.setdefault("wait_seconds", 1)
        started = Started(self.build(app, **options), threading.Thread(target=lambda: None))

        def work() -> None:
            try:
                self.run_worker(started.worker)
            except BaseException as exc:  # reported by the test, not lost in the thread
                started.errors.append(exc)

        started.thread = threading.Thread(target=work, name=f"test-{self.name}-worker")
        started.thread.daemon = True
        started.thread.start()
        try:
            yield started
        finally:
            started.worker.stop()
            started.thread.join(STOP_TIMEOUT_SECONDS)
        started.join(0)  # reached only when the body passed: report a stuck worker

    @contextmanager
    def draining(self, app: Runlane, **options: Any) -> Iterator[Drain]:
        """``drain()`` in a background thread (for a worker that must hold an attempt
        while the test acts); joined on exit."""
        drain = Drain(self, self.build(app, **options))
        drain.thread.start()
        try:
            yield drain
        finally:
            drain.thread.join(STOP_TIMEOUT_SECONDS)
        drain.join(0)


class Drain:
    """One ``drain()`` in a background thread; ``executed`` once it returned."""

    def __init__(self, kind: WorkerKind, worker: AnyWorker) -> None:
        self.worker = worker
        self.executed: int | None = None
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(
            target=self._drain, args=(kind,), name=f"test-{kind.name}-drain", daemon=True
        )

    def _drain(self, kind: WorkerKind) -> None:
        try:
            self.executed = kind.drain_worker(self.worker)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def join(self, timeout: float = STOP_TIMEOUT_SECONDS) -> int:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the drain did not return"
        assert self.errors == [], self.errors
        assert self.executed is not None
        return self.executed
