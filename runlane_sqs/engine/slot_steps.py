"""The per-message path's steps for a run whose claim found its concurrency limit
reached (:mod:`runlane_sqs.engine.message`; the decisions are in
:mod:`runlane_sqs.core.slots`)."""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime

from runlane_sqs.core.errors import ConflictError, RunlaneError
from runlane_sqs.core.machine import SkipReason
from runlane_sqs.core.model import Run, Slot
from runlane_sqs.core.slots import wait_for_slot
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.engine import outcomes
from runlane_sqs.engine.outcomes import Disposition
from runlane_sqs.engine.steps import RecheckSlot, Steps, Write

log = logging.getLogger("runlane_sqs.worker")


def slot_wait_steps(
    wakeup: Wakeup, run: Run, slot: Slot, holders: int, now: datetime, worker_id: str
) -> Steps:
    """Every slot of ``slot``'s scope is held: the run waits, with no attempt counted,
    and its wakeup is acknowledged; the write that frees a slot wakes the oldest waiter
    (docs/concurrency.md). The run is checked once more after its write, in case the
    slot freed in between."""
    try:
        waiting: Run = yield Write(wait_for_slot(run, slot, holders=holders, now=now))
    except ConflictError:
        return outcomes.log_skip(wakeup, SkipReason.CLAIM_LOST, worker_id, run)
    log.info(
        "run %s waits for a slot of %s (%d of %d held)",
        run.id,
        slot.scope,
        holders,
        slot.limit,
        extra={"run_id": run.id, "task": run.task, "worker_id": worker_id},
    )
    with contextlib.suppress(RunlaneError):  # maintenance checks the slot record too
        yield RecheckSlot(waiting, slot)
    return Disposition.SKIPPED
