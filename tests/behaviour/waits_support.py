"""What the waits behaviour tests (test_waits_release_steps.py, test_waits_signals.py,
test_waits_tokens.py, test_waits_runs.py) share: draining until nothing is left, the
count a maintenance pass published, and an exception's qualified name as a failure
records it. Each file keeps its own ``Handlers``; which worker drains does not matter to
waits (test_worker.py holds both kinds), so the sync one does."""

from __future__ import annotations

from runlane_sqs import Runlane
from runlane_sqs.engine.reports import PassReport
from tests.behaviour.worker_support import drain


def qualified(error: type[BaseException]) -> str:
    return f"{error.__module__}.{error.__qualname__}"


def drain_all(app: Runlane, concurrency: int = 1) -> int:
    """Drain until a drain executes nothing (releases and resumes publish new wakeups while
    draining)."""
    total = 0
    while executed := drain(app, concurrency=concurrency):
        total += executed
    return total


def published(report: PassReport) -> int:
    """How many wakeups the pass published, over all its jobs."""
    return sum(job.published for job in report.jobs.values())
