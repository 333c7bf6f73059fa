"""The async worker's per-message path: :class:`~runlane_sqs.executor.Executor` with
awaits. Every decision comes from :mod:`runlane_sqs.outcomes`; ``async def`` handlers run
on the event loop, sync handlers on a bounded pool of threads.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING

from runlane_sqs import outcomes
from runlane_sqs.aio.leases import AsyncLeaseKeeper
from runlane_sqs.aio.ports import AsyncRunStore, AsyncWakeupTransport
from runlane_sqs.aio.threads import DaemonThreads
from runlane_sqs.attempt import AttemptRuntime
from runlane_sqs.context import TaskContext
from runlane_sqs.core import machine
from runlane_sqs.core.machine import Skip, SkipReason
from runlane_sqs.core.model import Run
from runlane_sqs.core.wakeup import MalformedWakeup, Wakeup, parse_wakeup
from runlane_sqs.errors import ConflictError, LeaseLost, StorageError, StorageUnavailable
from runlane_sqs.executor import log_malformed, log_unavailable, recheck_target, storage_retry
from runlane_sqs.outcomes import Decide, Disposition, FollowUp
from runlane_sqs.ports import ReceivedWakeup
from runlane_sqs.tasks import Task

if TYPE_CHECKING:
    from runlane_sqs.app import Runlane


class AsyncExecutor:
    """Handles wakeups for one async worker identity."""

    def __init__(
        self,
        app: Runlane,
        worker_id: str,
        leases: AsyncLeaseKeeper,
        store: AsyncRunStore,
        transport: AsyncWakeupTransport,
        threads: DaemonThreads,
    ) -> None:
        self.app = app
        self.worker_id = worker_id
        self.leases = leases
        self.store = store
        self.transport = transport
        self.threads = threads

    async def handle(self, message: ReceivedWakeup) -> Disposition:
        try:
            wakeup = parse_wakeup(message.body)
        except MalformedWakeup as exc:
            log_malformed(message, exc, self.worker_id)
            return Disposition.SKIPPED
        try:
            return await self._handle(wakeup)
        except StorageUnavailable as exc:
            log_unavailable(wakeup, exc, self.worker_id)
            return Disposition.DEFERRED

    async def _handle(self, wakeup: Wakeup) -> Disposition:
        app = self.app
        if wakeup.environment != app.config.environment:
            return outcomes.log_skip(wakeup, SkipReason.FOREIGN_ENVIRONMENT, self.worker_id)
        run = await storage_retry(self.store.get_run)(wakeup.run_id)
        if run is None:
            return outcomes.log_skip(wakeup, SkipReason.UNKNOWN_RUN, self.worker_id)
        task = app.tasks.get(run.task)
        if task is None:
            return outcomes.log_unknown_task(run, self.worker_id)
        decision = outcomes.claim(app, run, task, self.worker_id)
        if isinstance(decision, Skip):
            return outcomes.log_skip(wakeup, decision.reason, self.worker_id, run)
        try:
            claimed = await storage_retry(self.store.apply)(decision)
        except ConflictError:
            return outcomes.log_skip(wakeup, SkipReason.CLAIM_LOST, self.worker_id, run)
        await self.execute(task, claimed)
        return Disposition.EXECUTED

    async def execute(self, task: Task, run: Run) -> Run | None:
        """Run one attempt of a claimed run and record its outcome. Returns the stored run.

        If the worker cancels the attempt (its grace period ran out), nothing is recorded:
        the lease expires and maintenance makes the run runnable again.
        """
        token = outcomes.lease_token(run)
        services = AttemptRuntime(self.app, self.leases, run, token)
        ctx = outcomes.new_context(run, self.worker_id, services)
        ctx.log.info("attempt %d started", run.attempt)
        self.leases.track(run, ctx)
        decide: Decide
        try:
            result = await self._call(task, ctx, run.payload)
            decide = outcomes.decide_returned(self.app, result, token)
        except asyncio.CancelledError as exc:
            if _cancelled_by_worker():
                ctx.log.warning(
                    "attempt %d abandoned at shutdown; its lease will expire", run.attempt
                )
                self.leases.untrack(run.id)
                raise
            decide = outcomes.decide_raised(self.app, task, exc, token)
        except BaseException as exc:  # waits, and SystemExit/KeyboardInterrupt from a handler
            decide = outcomes.decide_raised(self.app, task, exc, token)
        tracked = self.leases.untrack(run.id)
        latest, lost = tracked if tracked else (run, False)
        if lost:
            ctx.log.warning(
                "attempt %d finished after its lease was lost; outcome discarded", run.attempt
            )
            return None
        stored = await self._record(latest, decide, ctx)
        if stored is not None:
            await self._after(stored, ctx)
        return stored

    async def _call(self, task: Task, ctx: TaskContext, payload: object) -> object:
        if task.is_async:
            return await task.fn(ctx, payload)
        return await self.threads.run(functools.partial(task.fn, ctx, payload))

    async def _record(self, run: Run, decide: Decide, ctx: TaskContext) -> Run | None:
        token = outcomes.lease_token(run)
        current = run
        for _ in range(machine.MAX_REDECISIONS):
            try:
                transition = decide(current)
            except LeaseLost:
                break
            try:
                return await storage_retry(self.store.apply)(transition)
            except ConflictError as conflict:
                if conflict.current is None or not outcomes.still_leased(conflict.current, token):
                    break
                current = conflict.current
            except StorageError as exc:
                if isinstance(exc, StorageUnavailable):
                    raise
                return await self._record_refused(current, token, exc, ctx)
        ctx.log.warning("the lease was lost before the outcome was written; outcome discarded")
        return None

    async def _record_refused(
        self, run: Run, token: str, exc: StorageError, ctx: TaskContext
    ) -> Run | None:
        ctx.log.error("storage refused the outcome: %s; failing the run", exc)
        try:
            return await self.store.apply(outcomes.refused_outcome(self.app, run, token, exc))
        except (ConflictError, StorageError) as again:
            ctx.log.error("could not record the failure either: %s", again)
            return None

    async def _after(self, run: Run, ctx: TaskContext) -> None:
        """As the sync executor: log, publish the next wakeup, free keys, resume waiters
        (the last two, rare, through the app's sync ports on a thread)."""
        app = self.app
        outcomes.log_outcome(run, ctx)
        step = outcomes.follow_up(run)
        if step is FollowUp.FINISHED:
            if outcomes.finishing_needs_storage(run):
                await asyncio.to_thread(app.after_finished, run)
        elif step is FollowUp.PUBLISH:
            assert run.due_at is not None
            wakeups = app.publisher.wakeups([run])
            unsent = await self.transport.publish(wakeups, run.due_at - app.clock.now())
            if unsent:
                await asyncio.to_thread(app.publisher.settle, [run], unsent)
        elif step is FollowUp.RECHECK:
            await asyncio.to_thread(recheck_target, app, run)


def _cancelled_by_worker() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
