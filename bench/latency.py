"""Latency with an idle worker: trigger -> handler start, and token completion -> the
resumed attempt's start, with no maintenance pass (the completion itself resumes the
waiter and publishes its wakeup, and the long-polling worker picks it up).

The worker (4 handler threads, 20 s idle long polls) runs in a thread of the bench
process, so the handler can record when each attempt starts on the same clock.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.backends import Backend
from runlane_sqs import Runlane, RunStatus, TaskContext

TASK = "bench.approval"
CONCURRENCY = 4
IDLE_WAIT_SECONDS = 20
DEADLINE_SECONDS = 30.0
SETTLE_SECONDS = 0.3
"""Pause before each measured step so the worker is back in an idle long poll."""


class Starts:
    """``time.perf_counter()`` at the start of each (run id, attempt), set by the handler."""

    def __init__(self) -> None:
        self._at: dict[tuple[str, int], float] = {}
        self._changed = threading.Condition()

    def record(self, run_id: str, attempt: int) -> None:
        now = time.perf_counter()
        with self._changed:
            self._at[(run_id, attempt)] = now
            self._changed.notify_all()

    def wait_for(self, run_id: str, attempt: int) -> float:
        with self._changed:
            if not self._changed.wait_for(
                lambda: (run_id, attempt) in self._at, timeout=DEADLINE_SECONDS
            ):
                raise TimeoutError(f"attempt {attempt} of run {run_id} did not start")
            return self._at[(run_id, attempt)]


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(fraction * len(ordered))))
    return ordered[rank - 1]


@dataclass
class LatencySeries:
    name: str
    seconds: list[float]

    def to_json(self) -> dict[str, Any]:
        ms = [s * 1000 for s in self.seconds]
        return {
            "name": self.name,
            "n": len(ms),
            "p50_ms": statistics.median(ms),
            "p95_ms": percentile(ms, 0.95),
            "max_ms": max(ms),
            "samples_ms": ms,
        }


def wait_for_status(app: Runlane, run_id: str, status: RunStatus) -> None:
    """Poll the run's stored state (``get_stored``: a large payload or result is not read
    back from the payload bucket at every poll) until it has ``status``."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while app.runs.get_stored(run_id).status is not status:
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} did not become {status.value}")
        time.sleep(0.005)


def build_app(backend: Backend, starts: Starts) -> Runlane:
    app = backend.app()

    @app.task(name=TASK)
    def approval(ctx: TaskContext, payload: Any) -> Any:
        starts.record(ctx.run_id, ctx.attempt)
        return ctx.wait_for_token(payload["token"]).value

    app.provision()
    return app


def time_trigger_to_start(
    app: Runlane, starts: Starts, task: str, payload: Any
) -> tuple[str, float]:
    """After a pause (the worker back in an idle long poll), trigger one run: its id and
    the seconds from before ``app.trigger`` until its first attempt started."""
    time.sleep(SETTLE_SECONDS)
    t0 = time.perf_counter()
    run = app.trigger(task, payload)
    return run.id, starts.wait_for(run.id, 1) - t0


def measure(
    app: Runlane, starts: Starts, iterations: int, progress: Callable[[int], None]
) -> tuple[list[float], list[float]]:
    trigger_to_start: list[float] = []
    complete_to_resume: list[float] = []
    for n in range(iterations):
        token = app.tokens.create()
        run_id, seconds = time_trigger_to_start(app, starts, TASK, {"token": token.id})
        trigger_to_start.append(seconds)
        wait_for_status(app, run_id, RunStatus.RELEASED)

        time.sleep(SETTLE_SECONDS)
        t0 = time.perf_counter()
        app.tokens.complete(token.id, {"approved": True})
        complete_to_resume.append(starts.wait_for(run_id, 2) - t0)
        wait_for_status(app, run_id, RunStatus.SUCCEEDED)
        progress(n + 1)
    return trigger_to_start, complete_to_resume


def measure_latency(
    backend: Backend, iterations: int, progress: Callable[[int], None]
) -> list[LatencySeries]:
    starts = Starts()
    app = build_app(backend, starts)
    worker = app.worker(concurrency=CONCURRENCY, wait_seconds=IDLE_WAIT_SECONDS)
    thread = threading.Thread(target=worker.run, name="bench-worker", daemon=True)
    thread.start()
    try:
        to_start, to_resume = measure(app, starts, iterations, progress)
    finally:
        worker.stop()
        thread.join(timeout=IDLE_WAIT_SECONDS + 10)
    return [
        LatencySeries("trigger -> handler start", to_start),
        LatencySeries("token complete -> resumed start", to_resume),
    ]
