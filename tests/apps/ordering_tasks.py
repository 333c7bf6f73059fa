"""Tasks of the ordered-runs process test (tests/processes/test_ordering_processes.py;
their worker app is ``tests.apps.ordering_app:app``).

One task, :data:`LEDGER_TASK` on the ``ledger`` queue (:data:`LEDGER_QUEUE`), triggered
with ``ordering_key=payload["key"]``. Its handler works ``payload["seconds"]`` (default
:data:`HANDLER_SECONDS`), then fails if ``payload["fail"]`` says so: :data:`FAIL_ONCE`
fails the first attempt (the retry succeeds), :data:`FAIL_ALWAYS` every attempt (the run
fails after :data:`MAX_ATTEMPTS`). Retries wait :data:`RETRY_SECONDS`, short enough that
the worker publishes the retry's wakeup itself, with SQS ``DelaySeconds``: no
maintenance is needed.

Handlers record outside the system, in the directory :data:`RECORDS_ENV` names: each
process appends ``<run id> <key> <n> <attempt> <start> <end> <outcome>``
(``time.monotonic()``, one clock for every process of the machine; outcome
:data:`SUCCEEDED` or :data:`RAISED`) to ``<pid>.attempts`` once its handler is done,
before it returns or raises. The worker app builds itself at import, in the worker
process; a test builds its own app against the same table with :func:`register_ordering`,
so both sides agree on names, queues and retry policies.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runlane_sqs import RetryPolicy, Runlane, TaskContext
from tests.apps.records import append_line

RECORDS_ENV = "RUNLANE_TEST_ORDERING_RECORDS"
LEDGER_QUEUE = "ledger"
LEDGER_TASK = "ordering.post"
HANDLER_SECONDS = 0.03
MAX_ATTEMPTS = 3
RETRY_SECONDS = 1
"""Far below SQS's longest delay (900 s): the worker that records the failure publishes
the retry's wakeup at once, delayed by SQS."""
RETRY = RetryPolicy(max_attempts=MAX_ATTEMPTS, backoff="fixed", delay=RETRY_SECONDS)
FAIL_ONCE = "once"
FAIL_ALWAYS = "always"
SUCCEEDED = "succeeded"
RAISED = "raised"


class PostingFailed(RuntimeError):
    """What a failing attempt raises."""


@dataclass(frozen=True)
class Attempt:
    """One handler execution, as recorded by the process that ran it."""

    run_id: str
    key: str
    n: int
    attempt: int
    start: float
    end: float
    outcome: str
    pid: int


def _append(line: str) -> None:
    append_line(Path(os.environ[RECORDS_ENV]) / f"{os.getpid()}.attempts", line)


def post(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    """Work a little, record the attempt, then fail if the payload says so."""
    start = time.monotonic()
    time.sleep(float(payload.get("seconds", HANDLER_SECONDS)))
    fail = payload.get("fail")
    fails = fail == FAIL_ALWAYS or (fail == FAIL_ONCE and ctx.attempt == 1)
    end = time.monotonic()
    outcome = RAISED if fails else SUCCEEDED
    _append(
        f"{ctx.run_id} {payload['key']} {payload['n']} {ctx.attempt} {start!r} {end!r} {outcome}\n"
    )
    if fails:
        raise PostingFailed(f"posting {payload['key']}/{payload['n']} failed")
    return {"pid": os.getpid(), "n": payload["n"], "attempt": ctx.attempt}


def register_ordering(app: Runlane) -> Runlane:
    app.task(post, name=LEDGER_TASK, queue=LEDGER_QUEUE, retry=RETRY)
    return app


def read_attempts(records: Path) -> list[Attempt]:
    """Every attempt the worker processes recorded in ``records`` (complete lines only:
    a process may be writing one while the test reads)."""
    attempts: list[Attempt] = []
    for path in sorted(records.glob("*.attempts")):
        pid = int(path.name.split(".")[0])
        for line in path.read_text().split("\n")[:-1]:
            run_id, key, n, attempt, start, end, outcome = line.split()
            attempts.append(
                Attempt(run_id, key, int(n), int(attempt), float(start), float(end), outcome, pid)
            )
    return attempts
