"""One worker process for the throughput and memory measurements.

``python -m bench.workers sync|async --runs N --concurrency C`` builds the app from the
environment (``RUNLANE_TABLE``, ``RUNLANE_QUEUE_PREFIX``, boto3's variables), registers
the no-op task, prints ``ready``, works until it has executed ``N`` runs and prints one
JSON line: runs executed, the time it finished and its own peak RSS. With ``--hold`` it
then waits for its stdin to close before it exits, so the parent can still read its CPU
time when the last run is done. The no-op task appends one byte to ``BENCH_DONE_FILE``,
the side channel the producer counts completions by (Celery's task does the same, see
:mod:`bench.celery_peer`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

from runlane_sqs import Runlane, TaskContext

NOOP_TASK = "bench.noop"
DONE_FILE_VARIABLE = "BENCH_DONE_FILE"
SYNC = "sync"
ASYNC = "async"


def mark_done(path: str) -> None:
    """Append one byte: a completion the parent counts by the file's size."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, b".")
    finally:
        os.close(fd)


def build_app(kind: str) -> Runlane:
    """The app with the no-op task: ``async def`` for the async worker, which runs such
    handlers on its event loop (sync ones would go to its threads), plain for the sync
    worker."""
    app = Runlane.from_env(environment="bench")
    done_file = os.environ[DONE_FILE_VARIABLE]

    def noop(ctx: TaskContext, payload: Any) -> None:
        mark_done(done_file)

    async def async_noop(ctx: TaskContext, payload: Any) -> None:
        mark_done(done_file)

    app.task(async_noop if kind == ASYNC else noop, name=NOOP_TASK)
    return app


def async_unavailable() -> str | None:
    """Why the async worker cannot be measured, or ``None`` when it can."""
    try:
        from runlane_sqs.aio import AsyncWorker  # noqa: F401, PLC0415
    except ImportError as exc:
        return f"unavailable: runlane_sqs.aio not importable ({exc})"
    return None


def drain_async(app: Runlane, *, concurrency: int, max_runs: int) -> int:
    """The only place the bench calls the async worker: one ``drain`` to ``max_runs``."""
    from runlane_sqs.aio import AsyncWorker  # noqa: PLC0415 (optional, being written)

    worker = AsyncWorker(app, concurrency=concurrency)
    return int(asyncio.run(worker.drain(max_runs=max_runs)))


def drain_sync(app: Runlane, *, concurrency: int, max_runs: int) -> int:
    return app.worker(concurrency=concurrency).drain(max_runs=max_runs)


def work(kind: str, runs: int, concurrency: int) -> int:
    """Drain until ``runs`` runs were executed (a drain also returns when the queue is
    empty for a moment, so drain again)."""
    app = build_app(kind)
    app.transport.check_queue("default")
    drain = drain_async if kind == ASYNC else drain_sync
    print("ready", flush=True)
    executed = 0
    while executed < runs:
        executed += drain(app, concurrency=concurrency, max_runs=runs - executed)
    return executed


def peak_rss_bytes() -> int:
    """This process's peak resident set size: ``VmHWM`` on Linux, which starts afresh at
    ``exec`` (``ru_maxrss`` does not: it would include the forking parent's size)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.workers")
    parser.add_argument("kind", choices=(SYNC, ASYNC))
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--hold", action="store_true", help="exit when stdin closes")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    executed = work(args.kind, args.runs, args.concurrency)
    report = {"executed": executed, "finished_at": time.time(), "peak_rss": peak_rss_bytes()}
    print(json.dumps(report), flush=True)
    if args.hold:
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
