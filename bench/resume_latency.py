"""How long a token completion takes to reach an idle worker, on the embedded backend.

Not a test (pytest collects ``tests/`` only). Starts a moto server process, provisions a
table and queue, runs a worker (4 handler threads, 20 second idle long polls) in a
background thread and measures, over real HTTP:

- trigger -> handler start: ``app.trigger`` until the handler's first attempt begins;
- resume: ``app.tokens.complete`` until the handler's second attempt begins. No
  maintenance pass runs: the completion itself resumes the waiter and publishes its
  wakeup, and the long-polling worker picks it up.

Run: ``.venv/bin/python bench/resume_latency.py [--iterations N]``
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import sys
import threading
import time
import uuid
from typing import Any

from runlane_sqs import Runlane, RunStatus, TaskContext
from runlane_sqs.local import MotoServer

TASK = "bench.approval"
CONCURRENCY = 4
IDLE_WAIT_SECONDS = 20
DEADLINE_SECONDS = 30.0
SETTLE_SECONDS = 0.3
"""Pause between iterations so the worker is back in an idle long poll."""


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


def wait_for_status(app: Runlane, run_id: str, status: RunStatus) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while app.runs.get(run_id).status is not status:
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} did not become {status.value}")
        time.sleep(0.005)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(fraction * len(ordered))))
    return ordered[rank - 1]


def summary(name: str, seconds: list[float]) -> str:
    ms = [s * 1000 for s in seconds]
    return (
        f"{name:<28} n={len(ms):<3} p50={statistics.median(ms):7.1f} ms  "
        f"p95={percentile(ms, 0.95):7.1f} ms  max={max(ms):7.1f} ms"
    )


def build_app(server: MotoServer, starts: Starts) -> Runlane:
    os.environ.update(server.environment())
    app = Runlane.from_env(table=f"bench-{uuid.uuid4().hex[:8]}", environment="bench")

    @app.task(name=TASK)
    def approval(ctx: TaskContext, payload: Any) -> Any:
        starts.record(ctx.run_id, ctx.attempt)
        return ctx.wait_for_token(payload["token"]).value

    app.provision()
    return app


def measure(app: Runlane, starts: Starts, iterations: int) -> tuple[list[float], list[float]]:
    trigger_to_start: list[float] = []
    complete_to_resume: list[float] = []
    for _ in range(iterations):
        time.sleep(SETTLE_SECONDS)
        token = app.tokens.create()
        t0 = time.perf_counter()
        run = app.trigger(TASK, {"token": token.id})
        trigger_to_start.append(starts.wait_for(run.id, 1) - t0)
        wait_for_status(app, run.id, RunStatus.RELEASED)

        time.sleep(SETTLE_SECONDS)
        t0 = time.perf_counter()
        app.tokens.complete(token.id, {"approved": True})
        complete_to_resume.append(starts.wait_for(run.id, 2) - t0)
        wait_for_status(app, run.id, RunStatus.SUCCEEDED)
    return trigger_to_start, complete_to_resume


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    starts = Starts()
    with MotoServer() as server:
        app = build_app(server, starts)
        worker = app.worker(concurrency=CONCURRENCY, wait_seconds=IDLE_WAIT_SECONDS)
        thread = threading.Thread(target=worker.run, name="bench-worker", daemon=True)
        thread.start()
        try:
            trigger_to_start, complete_to_resume = measure(app, starts, args.iterations)
        finally:
            worker.stop()
            thread.join(timeout=IDLE_WAIT_SECONDS + 10)

    print(
        f"moto server at {server.endpoint_url}; worker concurrency={CONCURRENCY}, "
        f"idle long poll={IDLE_WAIT_SECONDS} s; no maintenance pass"
    )
    print(summary("trigger -> handler start", trigger_to_start))
    print(summary("token complete -> resume", complete_to_resume))
    return 0


if __name__ == "__main__":
    sys.exit(main())
