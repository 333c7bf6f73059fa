"""How attempts run with sync I/O, in the sync worker and the Lambda consumer: the driver
of the per-message path (:mod:`runlane_sqs.engine.driver`), which performs each call
with the engine's sync ports and calls the handler on the current thread, and the
heartbeat thread that keeps the leases of in-flight attempts alive.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from time import monotonic
from typing import Any, TypeVar

from runlane_sqs.core.clock import Clock
from runlane_sqs.core.errors import RunlaneError, StorageUnavailable
from runlane_sqs.core.model import Lease, Run
from runlane_sqs.engine import driver
from runlane_sqs.engine.attempt import AttemptRuntime
from runlane_sqs.engine.context import TaskContext
from runlane_sqs.engine.driver import Disposition
from runlane_sqs.engine.engine import Engine
from runlane_sqs.engine.leases import LeaseBook, TrackedAttempt
from runlane_sqs.engine.message import MessagePath
from runlane_sqs.ports.store import RunStore
from runlane_sqs.ports.transport import ReceivedWakeup
from runlane_sqs.runtime.budget import call_again, default_budget, write_budget

log = logging.getLogger("runlane_sqs.worker")
A = TypeVar("A")
R = TypeVar("R")


def retried(
    request: Callable[[A], R], argument: A, budget: Callable[[], timedelta] = default_budget
) -> R:
    """``request(argument)``, called again on :class:`StorageUnavailable` while the
    request's retry budget lasts (:mod:`runlane_sqs.runtime.budget`, entered only after a
    failure: ``budget`` is asked then)."""
    started = monotonic()
    try:
        return request(argument)
    except StorageUnavailable as failure:
        return call_again(request, argument, failure, started, budget())


def begin_attempt(
    call: driver.Begin, engine: Engine, leases: LeaseBook, worker_id: str
) -> TaskContext:
    """The context of a claimed run's attempt, its lease tracked by ``leases`` (shared by
    both drivers: steps and waits in a context use the engine's sync store)."""
    services = AttemptRuntime(
        engine.store,
        engine.groups,
        engine.clock,
        engine.values,
        leases,
        call.run,
        call.token,
    )
    ctx = TaskContext.for_attempt(call.run, worker_id, services)
    leases.track(call.run, ctx)
    return ctx


class Executor:
    """Drives ``path`` (one worker identity's) with sync I/O."""

    def __init__(
        self,
        engine: Engine,
        leases: LeaseBook,
        path: MessagePath,
        hold: Callable[[ReceivedWakeup, datetime], None] | None = None,
    ) -> None:
        self.engine = engine
        self.leases = leases
        self.path = path
        self._hold = hold
        """Where a message waits for its run's reserved start (the worker's intake), if anywhere."""
        self._perform = driver.performer_table(self)

    def handle(self, received: ReceivedWakeup) -> Disposition:
        return driver.drive(self.path.handle(received), self.perform)

    def perform(self, call: driver.DriverCall | driver.EngineCall) -> Any:
        method: Callable[[Any], Any] = self._perform.get(type(call), self.serve)
        return method(call)

    def read(self, call: driver.ReadRun) -> Run | None:
        return retried(self.engine.store.get_run, call.run_id)

    def claim_hinted(self, call: driver.ClaimHinted) -> Run:
        return retried(self.engine.store.claim_hinted, call.claim)

    def write(self, call: driver.Write) -> Run:
        transition, clock = call.transition, self.engine.clock
        return retried(
            self.engine.store.apply, transition, lambda: write_budget(transition, clock.now())
        )

    def begin(self, call: driver.Begin) -> TaskContext:
        return begin_attempt(call, self.engine, self.leases, self.path.worker_id)

    def call_handler(self, call: driver.CallHandler) -> object:
        """The handler, called with the run's payload (opened); its result, sealed. An
        ``async def`` handler runs to completion on a fresh event loop."""
        values = self.engine.values
        with call.span.active():
            payload = values.open(call.payload, what="payload", owner=f"run {call.ctx.run_id}")
            if call.task.is_async:
                import asyncio  # noqa: PLC0415 (only for async handlers: a sync app never loads it)

                result = asyncio.run(call.task.fn(call.ctx, payload))
            else:
                result = call.task.fn(call.ctx, payload)
            return values.seal(result, what="handler result").value

    def end(self, call: driver.End) -> tuple[Run, bool] | None:
        return self.leases.untrack(call.run_id)

    def pause(self, call: driver.Pause) -> None:
        self.engine.pause(call.delay.total_seconds())

    def hold(self, call: driver.Hold) -> bool:
        if self._hold is None:
            return False
        self._hold(call.message, call.until)
        return True

    def publish(self, call: driver.Publish) -> None:
        self.engine.publisher.publish_many([call.run], delay=call.delay)

    def serve(self, call: driver.EngineCall) -> Any:
        return self.engine.serve(call)


class LeaseKeeper(LeaseBook):
    """Renews every tracked lease on :meth:`beat`; a background thread beats every
    third of the lease duration."""

    def __init__(self, store: RunStore, clock: Clock, duration: timedelta) -> None:
        super().__init__(clock, duration)
        self._store = store
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        """Renew every tracked lease once. Several renewals go out at once, each on a
        thread of its own, so one held up by the AWS SDK's retries while DynamoDB fails
        does not delay the others' (the async keeper sends them concurrently too)."""
        due = self.renewals()
        if len(due) == 1:
            self._renew(*due[0])
            return
        threads = [
            threading.Thread(
                target=self._renew, args=pair, name="runlane-heartbeat-renewal", daemon=True
            )
            for pair in due
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _renew(self, attempt: TrackedAttempt, lease: Lease) -> None:
        if not self.tracks(attempt):
            return  # it finished since the snapshot; its outcome write ended the lease
        renewal: Run | RunlaneError
        try:
            renewal = self._store.renew_lease(attempt.run, lease)
        except RunlaneError as exc:
            renewal = exc
        except Exception:  # a renewal thread must not end with an unlogged error
            log.exception("heartbeat failed")
            return
        self.settle(attempt, renewal)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="runlane-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_seconds):
            try:
                self.beat()
            except Exception:  # the heartbeat thread must outlive any one failure
                log.exception("heartbeat failed")
