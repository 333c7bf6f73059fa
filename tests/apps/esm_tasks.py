"""Tasks of the simulated event source mapping test (tests/processes/test_lambda_esm.py),
and the ledger they keep of every execution.

The tasks of one queue kind are ``esm.standard.<name>`` on the ``default`` queue, or
``esm.fifo.<name>`` on the ``ordered`` queue (a FIFO queue the test names in
``RUNLANE_QUEUE_URLS``). The consumer app (``tests.apps.esm_app``, told the kind by
``RUNLANE_TEST_ESM_QUEUE_KIND``) and the test register them with :func:`register_esm`, so
both sides agree on names, queues and retry policies, and maintenance looks at the one
queue the test created.

A task's behaviour depends on whether this is the run's first execution, not on the
attempt number: an attempt claimed too close to the invocation's timeout is given back
unrun, so the first execution may be attempt 2. The first execution is the one that
creates the run's marker file (``<run id>.first``, ``O_EXCL``) in the ledger's folder.

Every attempt appends a ``start`` line to the ledger, and an ``end`` line with its
outcome when the handler returns or raises, to a file of its own process in the folder
``RUNLANE_TEST_LEDGER`` names (``<pid>.jsonl``, one ``os.write`` per line with
``O_APPEND``: nothing is buffered in a process that is killed). An attempt that was
killed has a ``start`` and no ``end``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runlane_sqs import RetryPolicy, Runlane, TaskContext

LEDGER_ENV = "RUNLANE_TEST_LEDGER"
QUEUE_KIND_ENV = "RUNLANE_TEST_ESM_QUEUE_KIND"
QUEUES = {"standard": "default", "fifo": "ordered"}
"""Queue kind -> the logical queue its tasks use."""

QUICK = "quick"
"""Returns at once."""
HANGS_FIRST = "hangs_first"
"""Its first execution ignores cancellation and sleeps until its invocation is killed at
the function's timeout; the next one returns."""
CRASHES_FIRST = "crashes_first"
"""Its first execution kills its own process (an invocation that crashes); the next one
returns."""
FLAKY = "flaky"
"""Its first execution raises; the retry returns."""
BROKEN = "broken"
"""Every execution raises; the run fails after its second failure."""
KINDS = (QUICK, HANGS_FIRST, CRASHES_FIRST, FLAKY, BROKEN)

RETURNED = "returned"
RAISED = "raised"

HANG_SECONDS = 600.0
"""Far beyond any function timeout: only the kill ends the sleep."""
RETRY = RetryPolicy(max_attempts=2, backoff="fixed", delay=0)
"""Two failures fail a run (attempts given back unrun or lost to lease expiry are not
failures)."""
OUTCOMES = {
    QUICK: [RETURNED],
    HANGS_FIRST: [RETURNED],
    CRASHES_FIRST: [RETURNED],
    FLAKY: [RAISED, RETURNED],
    BROKEN: [RAISED, RAISED],
}
"""The outcomes of a run's executions that end (an execution whose process died has
none): what its task dictates."""
DIES_FIRST = frozenset({HANGS_FIRST, CRASHES_FIRST})
"""Kinds whose first execution dies with its invocation."""


def task_name(queue_kind: str, kind: str) -> str:
    return f"esm.{queue_kind}.{kind}"


def _append(line: dict[str, Any]) -> None:
    path = Path(os.environ[LEDGER_ENV]) / f"{os.getpid()}.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def _line(ctx: TaskContext, event: str, **extra: Any) -> dict[str, Any]:
    return {
        "run": ctx.run_id,
        "attempt": ctx.attempt,
        "event": event,
        "pid": os.getpid(),
        "at": time.time(),
        **extra,
    }


def _first_execution(ctx: TaskContext) -> bool:
    """Whether no execution of this run began before (this one creates its marker)."""
    try:
        fd = os.open(Path(os.environ[LEDGER_ENV]) / f"{ctx.run_id}.first", os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _behave(kind: str, ctx: TaskContext, first: bool) -> Any:
    if first and kind == HANGS_FIRST:
        deadline = time.monotonic() + HANG_SECONDS
        while time.monotonic() < deadline:  # ignores ctx.cancellation on purpose
            time.sleep(0.05)
    if first and kind == CRASHES_FIRST:
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == BROKEN or (kind == FLAKY and first):
        raise RuntimeError(f"{kind} fails attempt {ctx.attempt} on purpose")
    return {"attempt": ctx.attempt}


def _handler(kind: str) -> Any:
    def handle(ctx: TaskContext, payload: Any) -> Any:
        first = _first_execution(ctx)
        _append(_line(ctx, "start"))
        try:
            result = _behave(kind, ctx, first)
        except Exception:
            _append(_line(ctx, "end", outcome=RAISED))
            raise
        _append(_line(ctx, "end", outcome=RETURNED))
        return result

    handle.__name__ = kind
    return handle


def register_esm(app: Runlane, queue_kind: str) -> Runlane:
    for kind in KINDS:
        app.task(
            _handler(kind), name=task_name(queue_kind, kind), queue=QUEUES[queue_kind], retry=RETRY
        )
    return app


@dataclass(frozen=True)
class Execution:
    """One attempt as the ledger saw it; ``ended_at`` and ``outcome`` are ``None`` when
    its process died during the attempt."""

    run_id: str
    attempt: int
    pid: int
    started_at: float
    ended_at: float | None
    outcome: str | None

    @property
    def succeeded(self) -> bool:
        return self.outcome == RETURNED


def read_ledger(folder: Path) -> list[Execution]:
    """Every execution in the ledger files of ``folder``, in order of start. An ``end``
    line closes the earliest open ``start`` of the same run and attempt in its file, so
    two executions of one attempt (which fencing forbids) would show as two."""
    executions: list[Execution] = []
    for path in sorted(folder.glob("*.jsonl")):
        open_starts: dict[tuple[str, int], list[dict[str, Any]]] = {}
        closed: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for text in path.read_text().splitlines():
            line = json.loads(text)
            key = (line["run"], line["attempt"])
            if line["event"] == "start":
                open_starts.setdefault(key, []).append(line)
            else:
                closed.append((open_starts[key].pop(0), line))
        unfinished: list[tuple[dict[str, Any], dict[str, Any]]] = [
            (start, {}) for starts in open_starts.values() for start in starts
        ]
        executions.extend(_execution(start, end) for start, end in [*closed, *unfinished])
    return sorted(executions, key=lambda e: e.started_at)


def _execution(start: dict[str, Any], end: dict[str, Any]) -> Execution:
    return Execution(
        run_id=start["run"],
        attempt=start["attempt"],
        pid=start["pid"],
        started_at=start["at"],
        ended_at=end.get("at"),
        outcome=end.get("outcome"),
    )
