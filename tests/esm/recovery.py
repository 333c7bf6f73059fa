"""Time to recovery after an invocation died (killed at its timeout, or crashed), from
the mapping's batches and the tasks' ledger (tests/apps/esm_tasks.py).

Two kinds of runs are left behind by an invocation that dies:

- ``killed attempt``: the run whose attempt was running in the dead process. Its lease
  is no longer renewed; once it expires, maintenance makes the run runnable again and
  publishes a wakeup;
- ``stranded record``: a run whose record was in the dead invocation's batch but not yet
  started. Nothing was written for it: its wakeup stays in flight (the invocation
  deleted nothing) and maintenance publishes another once the first is no longer trusted
  (``republish_after``).

Either way the time to recovery is from the death to the start of the run's next
attempt.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tests.apps.esm_tasks import Execution
from tests.esm.mapping import Batch

KILLED_ATTEMPT = "killed attempt"
STRANDED_RECORD = "stranded record"


@dataclass(frozen=True)
class Recovery:
    run_id: str
    kind: str
    died_at: float
    next_start: float | None
    """When the run's next attempt started; ``None``: it never did."""

    @property
    def seconds(self) -> float | None:
        return None if self.next_start is None else self.next_start - self.died_at


def run_id_of(body: str) -> str | None:
    """The run a wakeup body names (``None`` for a malformed one)."""
    try:
        wakeup = json.loads(body)
    except ValueError:
        return None
    run_id = wakeup.get("run_id") if isinstance(wakeup, dict) else None
    return run_id if isinstance(run_id, str) else None


def recoveries(
    batches: Sequence[Batch],
    executions: Sequence[Execution],
    final_attempts: Mapping[str, int],
) -> list[Recovery]:
    """Every run an invocation left behind when it died, with its next attempt's start.
    ``final_attempts`` (run id -> its last attempt) names the runs to look at (not those
    of forged wakeups) and tells runs that were over before the death (a stale record)
    from runs it stranded."""
    by_run: dict[str, list[Execution]] = {}
    for execution in executions:
        by_run.setdefault(execution.run_id, []).append(execution)
    found: list[Recovery] = []
    for batch in batches:
        for invocation in batch.invocations:
            if not invocation.died:
                continue
            died_at = invocation.ended_at
            named = {run_id_of(m["Body"]) for m in batch.messages}
            run_ids = {r for r in named if r is not None and r in final_attempts}  # not forged
            for run_id in sorted(run_ids):
                history = by_run.get(run_id, [])
                killed = [e for e in history if e.pid == invocation.pid and e.ended_at is None]
                started_before = [e for e in history if e.started_at < died_at]
                if killed:
                    kind = KILLED_ATTEMPT
                elif _over(started_before, final_attempts.get(run_id)):
                    continue
                elif any(e.pid == invocation.pid or _running(e, died_at) for e in history):
                    continue  # executed by this invocation, or running in another one
                else:
                    kind = STRANDED_RECORD
                later = [e.started_at for e in history if e.started_at > died_at]
                found.append(Recovery(run_id, kind, died_at, min(later, default=None)))
    return found


def _running(execution: Execution, at: float) -> bool:
    ended = execution.ended_at
    return execution.started_at < at and (ended is None or ended > at)


def _over(started_before: Iterable[Execution], final_attempt: int | None) -> bool:
    """Whether the run's last attempt had ended before the death."""
    return any(e.attempt == final_attempt and e.ended_at is not None for e in started_before)


def summary(found: Sequence[Recovery], kind: str) -> str:
    """``n runs, median x s, max y s`` of the recovered runs of one kind."""
    seconds = [s for r in found if r.kind == kind and (s := r.seconds) is not None]
    if not seconds:
        return f"{kind}: none"
    return (
        f"{kind}: {len(seconds)} run(s), median {statistics.median(seconds):.1f} s, "
        f"max {max(seconds):.1f} s"
    )
