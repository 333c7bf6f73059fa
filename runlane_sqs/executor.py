"""One wakeup in, at most one attempt out: the per-message path of the sync worker and
the Lambda handler (the async worker mirrors it with awaits; both take every decision
from :mod:`runlane_sqs.outcomes`).

parse -> re-read the run -> claim the lease (conditional write) -> run the handler
-> record the outcome under the lease token. Anything that is not a runnable, due run
of this environment is acknowledged and ignored.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from runlane_sqs import outcomes
from runlane_sqs.attempt import AttemptRuntime
from runlane_sqs.context import TaskContext
from runlane_sqs.core import machine
from runlane_sqs.core.machine import Skip, SkipReason
from runlane_sqs.core.model import Run
from runlane_sqs.core.wakeup import MalformedWakeup, Wakeup, parse_wakeup
from runlane_sqs.errors import ConflictError, LeaseLost, StorageError, StorageUnavailable
from runlane_sqs.leases import LeaseKeeper
from runlane_sqs.outcomes import Decide, Disposition, FollowUp
from runlane_sqs.ports import ReceivedWakeup
from runlane_sqs.resuming import resume_one, target_resumption
from runlane_sqs.tasks import Task

if TYPE_CHECKING:
    from runlane_sqs.app import Runlane

log = logging.getLogger("runlane_sqs.worker")

storage_retry = retry(
    retry=retry_if_exception_type(StorageUnavailable),
    stop=stop_after_attempt(5),
    wait=wait_exponential(multiplier=0.2, max=5),
    reraise=True,
)
"""Retry policy of the per-message path's reads and writes when DynamoDB is unavailable."""


def log_malformed(message: ReceivedWakeup, exc: MalformedWakeup, worker_id: str) -> None:
    log.warning(
        "deleting malformed message %s from queue %r: %s",
        message.message_id,
        message.queue,
        exc,
        extra={"message_id": message.message_id, "worker_id": worker_id},
    )


def log_unavailable(wakeup: Wakeup, exc: StorageUnavailable, worker_id: str) -> None:
    log.warning(
        "storage unavailable, leaving wakeup for redelivery: %s",
        exc,
        extra={"run_id": wakeup.run_id, "worker_id": worker_id},
    )


class Executor:
    """Handles wakeups for one worker identity."""

    def __init__(self, app: Runlane, worker_id: str, leases: LeaseKeeper) -> None:
        self.app = app
        self.worker_id = worker_id
        self.leases = leases

    def handle(self, message: ReceivedWakeup) -> Disposition:
        try:
            wakeup = parse_wakeup(message.body)
        except MalformedWakeup as exc:
            log_malformed(message, exc, self.worker_id)
            return Disposition.SKIPPED
        try:
            return self._handle(wakeup)
        except StorageUnavailable as exc:
            log_unavailable(wakeup, exc, self.worker_id)
            return Disposition.DEFERRED

    def _handle(self, wakeup: Wakeup) -> Disposition:
        app = self.app
        if wakeup.environment != app.config.environment:
            return outcomes.log_skip(wakeup, SkipReason.FOREIGN_ENVIRONMENT, self.worker_id)
        run = storage_retry(app.store.get_run)(wakeup.run_id)
        if run is None:
            return outcomes.log_skip(wakeup, SkipReason.UNKNOWN_RUN, self.worker_id)
        task = app.tasks.get(run.task)
        if task is None:
            return outcomes.log_unknown_task(run, self.worker_id)
        decision = outcomes.claim(app, run, task, self.worker_id)
        if isinstance(decision, Skip):
            return outcomes.log_skip(wakeup, decision.reason, self.worker_id, run)
        try:
            claimed = storage_retry(app.store.apply)(decision)
        except ConflictError:
            return outcomes.log_skip(wakeup, SkipReason.CLAIM_LOST, self.worker_id, run)
        self.execute(task, claimed)
        return Disposition.EXECUTED

    def execute(self, task: Task, run: Run) -> Run | None:
        """Run one attempt of a claimed run and record its outcome. Returns the stored run."""
        token = outcomes.lease_token(run)
        services = AttemptRuntime(self.app, self.leases, run, token)
        ctx = outcomes.new_context(run, self.worker_id, services)
        ctx.log.info("attempt %d started", run.attempt)
        self.leases.track(run, ctx)
        decide: Decide
        try:
            result = call_handler(task, ctx, run.payload)
            decide = outcomes.decide_returned(self.app, result, token)
        except BaseException as exc:  # waits, and SystemExit/KeyboardInterrupt from a handler
            decide = outcomes.decide_raised(self.app, task, exc, token)
        finally:
            tracked = self.leases.untrack(run.id)
        latest, lost = tracked if tracked else (run, False)
        if lost:
            ctx.log.warning(
                "attempt %d finished after its lease was lost; outcome discarded", run.attempt
            )
            return None
        stored = self._record(latest, decide, ctx)
        if stored is not None:
            self._after(stored, ctx)
        return stored

    def _record(self, run: Run, decide: Decide, ctx: TaskContext) -> Run | None:
        token = outcomes.lease_token(run)
        current = run
        for _ in range(machine.MAX_REDECISIONS):
            try:
                transition = decide(current)
            except LeaseLost:
                break
            try:
                return storage_retry(self.app.store.apply)(transition)
            except ConflictError as conflict:
                if conflict.current is None or not outcomes.still_leased(conflict.current, token):
                    break
                current = conflict.current
            except StorageError as exc:
                if isinstance(exc, StorageUnavailable):
                    raise
                return self._record_refused(current, token, exc, ctx)
        ctx.log.warning("the lease was lost before the outcome was written; outcome discarded")
        return None

    def _record_refused(
        self, run: Run, token: str, exc: StorageError, ctx: TaskContext
    ) -> Run | None:
        ctx.log.error("storage refused the outcome: %s; failing the run", exc)
        try:
            return self.app.store.apply(outcomes.refused_outcome(self.app, run, token, exc))
        except (ConflictError, StorageError) as again:
            ctx.log.error("could not record the failure either: %s", again)
            return None

    def _after(self, run: Run, ctx: TaskContext) -> None:
        """Log the outcome, schedule the next wakeup, resume what waits for a finished run."""
        app = self.app
        outcomes.log_outcome(run, ctx)
        step = outcomes.follow_up(run)
        if step is FollowUp.FINISHED:
            app.after_finished(run)
        elif step is FollowUp.PUBLISH:
            assert run.due_at is not None
            app.publish(run, delay=run.due_at - app.clock.now())
        elif step is FollowUp.RECHECK:
            recheck_target(app, run)


def recheck_target(app: Runlane, run: Run) -> None:
    """A token decided (or a run finished) just before this run's release was written may
    have resumed waiters without seeing this one: look once more, resume it if so."""
    if run.waiting is None:
        return
    resumption = target_resumption(app, run.waiting)
    if resumption is not None:
        resumed = resume_one(app, run, resumption)
        if resumed is not None:
            app.publish(resumed)


def call_handler(task: Task, ctx: TaskContext, payload: object) -> object:
    """Call the handler; an ``async def`` handler runs to completion on a fresh event loop."""
    if task.is_async:
        return asyncio.run(task.fn(ctx, payload))
    return task.fn(ctx, payload)
