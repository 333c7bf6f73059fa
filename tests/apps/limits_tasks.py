"""Tasks of the concurrency-limit process tests (their worker app is
``tests.apps.limits_app:app``).

Three queues, each with a task of its own:

- ``billing`` (:data:`LIMITED_QUEUE`), limited to :data:`QUEUE_LIMIT` runs at once:
  :data:`TIMED_TASK` works :data:`HANDLER_SECONDS` (or the payload's ``seconds``) and
  records when;
- ``invoices`` (:data:`KEYED_QUEUE`), unlimited: :data:`KEYED_TASK` (the same handler)
  is limited to :data:`KEY_LIMIT` run per ``payload["customer"]``;
- ``solo`` (:data:`SOLO_QUEUE`), limited to one run at once: :data:`BLOCKING_TASK`'s
  first attempt of a payload with ``block`` waits for a file that never appears (until
  its worker is killed); other attempts succeed at once.

Handlers record outside the system, in the directory :data:`RECORDS_ENV` names: each
process appends ``<run id> <attempt> <key> <start> <end>`` (``time.monotonic()``, one
clock for every process of the machine) to ``<pid>.intervals`` once its handler is
done, and :data:`BLOCKING_TASK` leaves ``<run id>.<attempt>.started`` (holding its pid)
when it starts. The worker app builds itself at import, in the worker process; a test
builds its own app against the same table with :func:`register_limits`, so both sides
agree on names, queues and limits.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runlane_sqs import Runlane, TaskContext
from tests.apps.records import append_line

RECORDS_ENV = "RUNLANE_TEST_LIMIT_RECORDS"
LIMITED_QUEUE = "billing"
QUEUE_LIMIT = 2
KEYED_QUEUE = "invoices"
KEY_LIMIT = 1
SOLO_QUEUE = "solo"
TIMED_TASK = "limits.timed"
KEYED_TASK = "limits.keyed"
BLOCKING_TASK = "limits.blocking"
HANDLER_SECONDS = 0.05
BLOCK_SECONDS = 120.0
"""Longest a blocking attempt waits for its (never created) release file."""


@dataclass(frozen=True)
class Interval:
    """One handler execution, as recorded by the process that ran it."""

    run_id: str
    attempt: int
    key: str
    start: float
    end: float
    pid: int


def _records() -> Path:
    return Path(os.environ[RECORDS_ENV])


def _append(line: str) -> None:
    append_line(_records() / f"{os.getpid()}.intervals", line)


def timed(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    """Work ``payload["seconds"]`` (default :data:`HANDLER_SECONDS`); record the
    interval once done."""
    given = payload if isinstance(payload, dict) else {}
    start = time.monotonic()
    time.sleep(float(given.get("seconds", HANDLER_SECONDS)))
    end = time.monotonic()
    key = str(given.get("customer", "-"))
    _append(f"{ctx.run_id} {ctx.attempt} {key} {start!r} {end!r}\n")
    return {"pid": os.getpid(), "attempt": ctx.attempt}


def blocking(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    """Attempt 1 of a ``block`` payload waits for ``<run id>.release`` (never created:
    only SIGKILL ends it); anything else returns at once."""
    records = _records()
    (records / f"{ctx.run_id}.{ctx.attempt}.started").write_text(str(os.getpid()))
    if ctx.attempt == 1 and isinstance(payload, dict) and payload.get("block"):
        release = records / f"{ctx.run_id}.release"
        deadline = time.monotonic() + BLOCK_SECONDS
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # ignores cancellation, as a stuck handler would
    return {"pid": os.getpid(), "attempt": ctx.attempt}


def register_limits(app: Runlane) -> Runlane:
    app.task(timed, name=TIMED_TASK, queue=app.queue(LIMITED_QUEUE, concurrency_limit=QUEUE_LIMIT))
    app.task(
        timed,
        name=KEYED_TASK,
        queue=KEYED_QUEUE,
        concurrency_key=lambda payload: str(payload["customer"]),
        key_limit=KEY_LIMIT,
    )
    app.task(blocking, name=BLOCKING_TASK, queue=app.queue(SOLO_QUEUE, concurrency_limit=1))
    return app


def read_intervals(records: Path) -> list[Interval]:
    """Every interval the worker processes recorded in ``records``."""
    intervals: list[Interval] = []
    for path in sorted(records.glob("*.intervals")):
        pid = int(path.name.split(".")[0])
        for line in path.read_text().splitlines():
            run_id, attempt, key, start, end = line.split()
            intervals.append(Interval(run_id, int(attempt), key, float(start), float(end), pid))
    return intervals
