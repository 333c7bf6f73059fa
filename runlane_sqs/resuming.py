"""Waking released runs: signals, token decisions and finished runs resume their waiters.

Waiters are found on the waits index, each is re-read and resumed by a conditional
write (a waiter that moved on meanwhile is skipped), and their wakeups are published in
batches. Anything missed here (the index lags writes by a moment) is caught by
maintenance, which polls runs waiting on tokens and runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runlane_sqs.context import RunOutcome
from runlane_sqs.core import waits
from runlane_sqs.core.machine import Skip
from runlane_sqs.core.model import JSON, EventType, Run, Wait, WaitKind
from runlane_sqs.errors import ConflictError

if TYPE_CHECKING:
    from runlane_sqs.app import Runlane

log = logging.getLogger("runlane_sqs.resume")
RESUME_BATCH = 25
"""Waiters resumed at once by a token decision or a finishing run; maintenance resumes
the rest in batches."""
PAGE_SIZE = 25


@dataclass(frozen=True, slots=True)
class Resumption:
    """What a wait's target decided, as written into each waiter."""

    kind: WaitKind
    target: str
    result: dict[str, JSON]
    event: EventType
    data: dict[str, JSON]


@dataclass(frozen=True, slots=True)
class ResumeReport:
    resumed: int
    more: bool
    """Waiters may remain beyond the limit."""


def resume_one(app: Runlane, run: Run, resumption: Resumption) -> Run | None:
    """Resume ``run`` at its current wait if it still waits for this target."""
    waiting = run.waiting
    if waiting is None or waiting.kind is not resumption.kind:
        return None
    if waiting.target != resumption.target:
        return None
    decision = waits.resume(
        run,
        wait=waiting,
        result=resumption.result,
        event=resumption.event,
        data=resumption.data,
        now=app.clock.now(),
        republish=app.config.republish,
    )
    if isinstance(decision, Skip):
        return None
    try:
        return app.store.apply(decision)
    except ConflictError:
        return None


def resume_waiters(app: Runlane, resumption: Resumption, limit: int | None) -> ResumeReport:
    """Resume up to ``limit`` waiters (all of them with ``None``) and publish their wakeups."""
    resumed: list[Run] = []
    examined = 0
    cursor: str | None = None
    while limit is None or examined < limit:
        page = PAGE_SIZE if limit is None else min(PAGE_SIZE, limit - examined)
        ids, cursor = app.store.waiting_runs(resumption.kind, resumption.target, page, cursor)
        examined += len(ids)
        for run_id in ids:
            run = app.store.get_run(run_id)
            stored = resume_one(app, run, resumption) if run is not None else None
            if stored is not None:
                resumed.append(stored)
        if cursor is None or not ids:
            break
    if resumed:
        app.publisher.publish_many(resumed)
        log.info(
            "resumed %d run(s) waiting on %s %s",
            len(resumed),
            resumption.kind.value,
            resumption.target,
        )
    return ResumeReport(resumed=len(resumed), more=cursor is not None)


def run_finished(run: Run) -> Resumption:
    """What a finished run writes into the runs waiting for it."""
    return Resumption(
        kind=WaitKind.RUN,
        target=run.id,
        result=RunOutcome.of(run).to_json(),
        event=EventType.RESUMED,
        data={"run": run.id, "status": run.status.value},
    )


def target_resumption(app: Runlane, waiting: Wait) -> Resumption | None:
    """The resumption for a token or run wait whose target has decided, else ``None``."""
    from runlane_sqs.tokens import token_resumption  # noqa: PLC0415 (tokens imports this module)

    if waiting.target is None:
        return None
    if waiting.kind is WaitKind.TOKEN:
        token = app.store.get_token(waiting.target)
        return token_resumption(token) if token is not None and token.is_decided else None
    if waiting.kind is WaitKind.RUN:
        other = app.store.get_run(waiting.target)
        return run_finished(other) if other is not None and other.is_terminal else None
    return None
