"""Pinning on the per-message path: a run of a task with ``pin_version`` that started
under another app version is left to a worker of that version (:mod:`runlane_sqs.core.versions`
has the rules; docs/versions.md, "Pinning")."""

from __future__ import annotations

import logging

from runlane_sqs.core.machine import SkipReason
from runlane_sqs.core.model import Run
from runlane_sqs.core.versions import pinned_retry_delay
from runlane_sqs.engine.driver import Disposition, Handling, Publish, WorkerIdentity

log = logging.getLogger("runlane_sqs.worker")


def leave_to_version(run: Run, path: WorkerIdentity) -> Handling:
    """Send ``run``'s wakeup again for a worker of the version it started under (later
    each time: no busy loop, and a new message never dead-letters) and delete this one."""
    delay = pinned_retry_delay(run, path.clock.now())
    yield Publish(run, delay)
    log.info(
        "leaving run %s of task %s to a worker of app version %s (this one runs %s); "
        "its wakeup comes back in %s",
        run.id,
        run.task,
        run.app_version,
        path.app_version,
        delay,
        extra={"run_id": run.id, "task": run.task, "worker_id": path.worker_id},
    )
    path.observer.skipped(SkipReason.PINNED_ELSEWHERE.value)
    return Disposition.SKIPPED
