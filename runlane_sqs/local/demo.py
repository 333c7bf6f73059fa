"""``make demo``: the core loop end to end on the embedded moto server.

Starts a moto server on 127.0.0.1, provisions the table and queues, triggers four runs
(one succeeds, one fails twice then succeeds, one is delayed, one exhausts its retries),
runs a worker until every run is finished, prints what happened and stops the server.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Sequence

from runlane_sqs import RetryPolicy, Run, Runlane, RunStatus, TaskContext
from runlane_sqs.local import MotoServer

DEADLINE_SECONDS = 60


def build_app() -> Runlane:
    app = Runlane.from_env(lease_duration=10)
    retry_twice = RetryPolicy(max_attempts=3, backoff="fixed", delay=1)
    failures: dict[str, int] = {}

    @app.task(name="greet")
    def greet(ctx: TaskContext, payload: dict[str, str]) -> str:
        return f"hello, {payload['name']}"

    @app.task(name="flaky", retry=retry_twice)
    def flaky(ctx: TaskContext, payload: None) -> str:
        failures[ctx.run_id] = failures.get(ctx.run_id, 0) + 1
        if failures[ctx.run_id] <= 2:
            raise ConnectionError(f"upstream unavailable (attempt {ctx.attempt})")
        return "worked on attempt 3"

    @app.task(name="reminder")
    def reminder(ctx: TaskContext, payload: dict[str, str]) -> str:
        return f"reminded {payload['who']}"

    @app.task(name="doomed", retry=retry_twice)
    def doomed(ctx: TaskContext, payload: None) -> None:
        raise ValueError("this input can never be processed")

    return app


def wait_until_finished(app: Runlane, runs: Sequence[Run]) -> list[Run]:
    worker = app.worker(concurrency=4, wait_seconds=1)
    thread = threading.Thread(target=worker.run, name="demo-worker", daemon=True)
    thread.start()
    deadline = time.monotonic() + DEADLINE_SECONDS
    current = [app.runs.get(r.id) for r in runs]
    while not all(r.is_terminal for r in current) and time.monotonic() < deadline:
        time.sleep(0.2)
        current = [app.runs.get(r.id) for r in runs]
    worker.stop()
    thread.join(timeout=30)
    return current


def print_summary(app: Runlane, runs: Sequence[Run]) -> None:
    for run in runs:
        print(f"\nrun {run.id}  task={run.task}  status={run.status.value}  attempts={run.attempt}")
        if run.result is not None:
            print(f"  result: {run.result!r}")
        if run.failure is not None:
            print(f"  last failure: {run.failure.type}: {run.failure.message}")
        for event in app.runs.events(run.id):
            detail = ""
            if "failure" in event.data:
                detail = f"  {event.data['failure']['message']}"
            if "retry_at" in event.data:
                detail += f"  (retry at {event.data['retry_at']})"
            if "due_at" in event.data:
                detail += f"  (due at {event.data['due_at']})"
            stamp = event.at.strftime("%H:%M:%S.%f")[:-3]
            print(f"  {event.seq:>2}  {stamp}  attempt {event.attempt}  {event.type.value}{detail}")


def main() -> int:
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s %(message)s")
    with MotoServer() as server:
        os.environ.update(server.environment())
        os.environ.setdefault("RUNLANE_ENVIRONMENT", "demo")
        print(f"moto server on {server.endpoint_url}")
        app = build_app()
        app.provision()
        print(f"provisioned table {app.config.table!r} and queue(s) {app.tasks.queues()}")
        runs = [
            app.trigger("greet", {"name": "Ada"}),
            app.trigger("flaky"),
            app.trigger("reminder", {"who": "Grace"}, delay=3),
            app.trigger("doomed"),
        ]
        print(f"triggered {len(runs)} runs; working until all are finished...")
        finished = wait_until_finished(app, runs)
        print_summary(app, finished)
    expected = [RunStatus.SUCCEEDED, RunStatus.SUCCEEDED, RunStatus.SUCCEEDED, RunStatus.FAILED]
    ok = [r.status for r in finished] == expected
    print("\ndemo finished" if ok else "\ndemo did not reach the expected outcome")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
