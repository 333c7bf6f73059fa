"""Bulk recovery at volume (docs/operations.md, "Bulk recovery"): a bulk retry of
``runs`` failed runs (10,000; 100 with ``--smoke``) by the real CLI in its own process,
SIGKILLed once it retried about 40% of them, then resumed by a second process.

Seeding (not timed into the figures): the runs are triggered in batches and worked by a
worker of 16 threads in this process whose handler fails, so each is ``failed``. Then
``runlane-sqs runs bulk retry --yes --rate 1000`` runs; this process reads the
operation's record every half second throughout (its progress, as an operator would)
and kills the first process when the record says 40% were retried; ``runs bulk resume
--force`` carries it on. Afterwards (not timed) each source run's history is read: one
``linked_run`` each, naming the operation, and as many retries queued as sources.

Figures: the operation's runs a second (acted on, over the wall time of both processes),
the reads of its progress (and the longest time the record's tally stood still while it
ran), where it was killed, its final tally, and whether every run was retried exactly
once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.backends import ENVIRONMENT, REPO_ROOT, Backend
from runlane_sqs import EventType, OperationStatus, RetryPolicy, Runlane, TaskContext

TASK = "bench.declined"
SEED_BATCH = 500
SEED_THREADS = 16
KILL_AT = 0.4
"""The share of the runs retried when the first process is killed."""
RATE = 1000
POLL_SECONDS = 0.5
DEADLINE_SECONDS = 1800


@dataclass
class BulkResult:
    runs: int
    seed_seconds: float = 0.0
    bulk_seconds: float = 0.0
    runs_per_second: float = 0.0
    progress_reads: int = 0
    longest_still_seconds: float = 0.0
    """The longest time the record's tally did not move while the operation ran (the
    kill's gap and the resume's start included)."""
    killed_at: int = 0
    acted: int = 0
    skipped: int = 0
    failed: int = 0
    linked_once: int = 0
    retries_queued: int = 0
    status: str = "ok"
    progress: list[tuple[float, int]] = field(default_factory=list)
    """(seconds since the start, runs retried) at each read where it moved."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _declined(ctx: TaskContext, payload: Any) -> Any:
    raise RuntimeError(f"declined {payload}")


def _seed(app: Runlane, runs: int, progress: Callable[[int], None]) -> list[str]:
    app.task(_declined, name=TASK, retry=RetryPolicy(max_attempts=1))
    app.provision()
    ids: list[str] = []
    for start in range(0, runs, SEED_BATCH):
        ids.extend(
            r.id for r in app.trigger_many(TASK, range(start, min(runs, start + SEED_BATCH)))
        )
    worker = app.worker(concurrency=SEED_THREADS)
    done = 0
    while done < runs:
        executed = worker.drain()
        if not executed:
            break
        done += executed
        progress(done)
    return ids


def _cli(backend: Backend, app: Runlane, *args: str) -> subprocess.Popen[bytes]:
    env = backend.subprocess_env(
        RUNLANE_TABLE=app.config.table,
        RUNLANE_ENVIRONMENT=ENVIRONMENT,
        RUNLANE_QUEUE_PREFIX=app.config.queue_prefix or "",
    )
    return subprocess.Popen(
        [sys.executable, "-m", "runlane_sqs", *args],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def measure_bulk(backend: Backend, runs: int, progress: Callable[[int], None]) -> BulkResult:
    result = BulkResult(runs)
    app = backend.app()
    started = time.monotonic()
    sources = _seed(app, runs, progress)
    result.seed_seconds = time.monotonic() - started
    if len(sources) != runs:
        result.status = f"seeded {len(sources)} runs, not {runs}"
        return result
    operation_id = _retry_killed_and_resumed(backend, app, result, progress)
    if operation_id is not None:
        _check(app, sources, operation_id, result)
    return result


def _retry_killed_and_resumed(
    backend: Backend, app: Runlane, result: BulkResult, progress: Callable[[int], None]
) -> str | None:
    """Run the bulk retry, kill its process at :data:`KILL_AT`, resume it; read its
    progress throughout. Returns the operation's id (``None``: it did not finish)."""
    runs, began = result.runs, time.monotonic()
    first = _cli(
        backend, app, "runs", "bulk", "retry", "--task", TASK, "--yes", "--rate", f"{RATE}"
    )
    second: subprocess.Popen[bytes] | None = None
    last_acted, last_move = -1, began
    try:
        while time.monotonic() - began < DEADLINE_SECONDS:
            time.sleep(POLL_SECONDS)
            listed = app.bulk.list(limit=1).operations
            if not listed:
                continue
            operation = listed[0]
            result.progress_reads += 1
            now, acted = time.monotonic(), operation.tally.acted
            if acted != last_acted:
                result.longest_still_seconds = max(result.longest_still_seconds, now - last_move)
                last_acted, last_move = acted, now
                result.progress.append((round(now - began, 2), acted))
                progress(runs + acted)
            if second is None and acted >= runs * KILL_AT:
                first.send_signal(signal.SIGKILL)
                first.wait(timeout=30)
                result.killed_at = acted
                second = _cli(backend, app, "runs", "bulk", "resume", operation.id, "--force")
            if operation.status is OperationStatus.DONE:
                result.bulk_seconds = time.monotonic() - began
                if second is None:
                    result.status = "the operation ended before it could be killed"
                return operation.id
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
    result.status = f"not done in {DEADLINE_SECONDS} s"
    return None


def _check(app: Runlane, sources: list[str], operation_id: str, result: BulkResult) -> None:
    """Read the tally, each source's links and the retries queued."""
    tally = app.bulk.get(operation_id).tally
    result.acted, result.skipped, result.failed = tally.acted, tally.skipped, tally.failed
    result.runs_per_second = tally.acted / result.bulk_seconds if result.bulk_seconds else 0.0

    def linked_by(source: str) -> int:
        return sum(
            1
            for e in app.runs.events(source)
            if e.type is EventType.LINKED_RUN and e.data.get("operation") == operation_id
        )

    with ThreadPoolExecutor(SEED_THREADS) as pool:
        result.linked_once = sum(1 for n in pool.map(linked_by, sources) if n == 1)
    cursor: str | None = None
    while True:
        page = app.runs.list(status="queued", task=TASK, limit=100, cursor=cursor)
        result.retries_queued += len(page.runs)
        if (cursor := page.cursor) is None:
            break
    runs = result.runs
    if result.status == "ok" and (result.linked_once, result.retries_queued) != (runs, runs):
        result.status = "a run was not retried exactly once"


def print_bulk(console: Console, row: dict[str, Any] | None, backend: str) -> None:
    if not row:
        return
    table = Table(
        title=f"Bulk retry of {row['runs']:,} failed runs, its process SIGKILLed at "
        f"{KILL_AT:.0%} and resumed ({backend})"
    )
    for header in (
        "runs/s",
        "seconds",
        "progress reads",
        "longest still s",
        "killed at",
        "acted",
        "skipped",
        "failed",
        "retried once",
        "retries queued",
        "status",
    ):
        table.add_column(header, justify="left" if header == "status" else "right")
    table.add_row(
        f"{row['runs_per_second']:,.0f}",
        f"{row['bulk_seconds']:,.1f}",
        str(row["progress_reads"]),
        f"{row['longest_still_seconds']:.1f}",
        f"{row['killed_at']:,}",
        f"{row['acted']:,}",
        str(row["skipped"]),
        str(row["failed"]),
        f"{row['linked_once']:,}",
        f"{row['retries_queued']:,}",
        row["status"],
    )
    table.caption = (
        f"runlane-sqs runs bulk retry --rate {RATE} in its own process, then runs bulk "
        "resume --force; progress: the operation's record read every 0.5 s by the bench; "
        "retried once: sources whose history links exactly one run of the operation"
    )
    console.print(table)
