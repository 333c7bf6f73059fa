"""The sync driver of the per-message path (:mod:`runlane_sqs.engine.message`), for the
sync worker and the Lambda consumer: each request is performed with the engine's sync
ports, the handler is called on the current thread.
"""

from __future__ import annotations

from typing import Any

from runlane_sqs.core.model import Run
from runlane_sqs.engine import message
from runlane_sqs.engine.attempt import AttemptRuntime
from runlane_sqs.engine.context import TaskContext
from runlane_sqs.engine.engine import Engine
from runlane_sqs.engine.leases import LeaseBook
from runlane_sqs.engine.outcomes import Disposition, new_context
from runlane_sqs.ports.transport import ReceivedWakeup
from runlane_sqs.runtime.budget import storage_retry, write_budget


def begin_attempt(
    request: message.Begin, engine: Engine, leases: LeaseBook, worker_id: str
) -> TaskContext:
    """The context of a claimed run's attempt, its lease tracked by ``leases`` (shared by
    both drivers: steps and waits in a context use the engine's sync store)."""
    services = AttemptRuntime(
        engine.store,
        engine.clock,
        engine.config.payload_limit,
        leases,
        request.run,
        request.token,
    )
    ctx = new_context(request.run, worker_id, services)
    leases.track(request.run, ctx)
    return ctx


class Executor:
    """Handles wakeups for one worker identity with sync I/O."""

    def __init__(self, engine: Engine, worker_id: str, leases: LeaseBook) -> None:
        self.engine = engine
        self.worker_id = worker_id
        self.leases = leases
        self.path = message.MessagePath.of(engine, worker_id)
        self._perform = message.performer_table(self)

    def handle(self, received: ReceivedWakeup) -> Disposition:
        return message.drive(self.path.handle(received), self.perform)

    def perform(self, request: message.Request) -> Any:
        return self._perform[type(request)](request)

    def read(self, request: message.ReadRun) -> Run | None:
        return storage_retry()(self.engine.store.get_run)(request.run_id)

    def claim_hinted(self, request: message.ClaimHinted) -> Run:
        return storage_retry()(self.engine.store.claim_hinted)(request.claim)

    def write(self, request: message.Write) -> Run:
        budget = write_budget(request.transition, self.engine.clock.now())
        return storage_retry(budget)(self.engine.store.apply)(request.transition)

    def begin(self, request: message.Begin) -> TaskContext:
        return begin_attempt(request, self.engine, self.leases, self.worker_id)

    def call(self, request: message.CallHandler) -> object:
        """An ``async def`` handler runs to completion on a fresh event loop."""
        with request.span.active():
            if request.task.is_async:
                import asyncio  # noqa: PLC0415 (only for async handlers: a sync app never loads it)

                return asyncio.run(request.task.fn(request.ctx, request.payload))
            return request.task.fn(request.ctx, request.payload)

    def end(self, request: message.End) -> tuple[Run, bool] | None:
        return self.leases.untrack(request.run_id)

    def publish(self, request: message.Publish) -> None:
        self.engine.publisher.publish_many([request.run], delay=request.delay)

    def finish(self, request: message.Finish) -> None:
        self.engine.finisher.after_finished(request.run)

    def recheck(self, request: message.Recheck) -> None:
        self.engine.resumer.recheck(request.run)

    def wake_waiters(self, request: message.WakeWaiters) -> None:
        self.engine.slot_waker.wake(request.scopes)

    def recheck_slot(self, request: message.RecheckSlot) -> None:
        self.engine.slot_waker.recheck(request.run, request.slot)
