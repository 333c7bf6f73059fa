"""The async driver of the per-message path (:mod:`runlane_sqs.engine.driver`):
reads and writes go through the async store, ``async def`` handlers run on the event
loop, sync handlers on a bounded pool of threads, and the rare follow-ups (key
releases, resuming waiters) through the engine's sync ports on a thread.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from time import monotonic
from typing import Any, TypeVar

from runlane_sqs.core.clock import ManualClock
from runlane_sqs.core.errors import StorageUnavailable
from runlane_sqs.core.model import JSON, Run
from runlane_sqs.core.progress import AttemptReport
from runlane_sqs.core.values import Holder, ValueField, ValuePlace
from runlane_sqs.engine import driver
from runlane_sqs.engine.context import TaskContext
from runlane_sqs.engine.driver import Disposition
from runlane_sqs.engine.engine import Engine
from runlane_sqs.engine.message import MessagePath
from runlane_sqs.engine.tasks import Task
from runlane_sqs.engine.value_types import PLAIN_TYPES
from runlane_sqs.ports.aio import AsyncRunStore, AsyncWakeupTransport
from runlane_sqs.ports.transport import ReceivedWakeup
from runlane_sqs.runtime.aio.leases import AsyncLeaseKeeper
from runlane_sqs.runtime.aio.threads import DaemonThreads
from runlane_sqs.runtime.budget import call_again_async, default_budget, write_budget
from runlane_sqs.runtime.executor import begin_attempt, retried, run_handler

A = TypeVar("A")
R = TypeVar("R")


async def retried_async(
    request: Callable[[A], Awaitable[R]],
    argument: A,
    budget: Callable[[], timedelta] = default_budget,
) -> R:
    """:func:`~runlane_sqs.runtime.executor.retried` for an async ``request``."""
    started = monotonic()
    try:
        return await request(argument)
    except StorageUnavailable as failure:
        return await call_again_async(request, argument, failure, started, budget())


async def drive_async(handling: driver.Handling, executor: AsyncExecutor) -> Disposition:
    """Run ``handling`` to the end, awaiting each call. An attempt the worker cancels
    (its grace period ran out) closes the path: nothing is recorded, the lease expires
    and maintenance makes the run runnable again."""
    call = driver.next_call(handling, None, None)
    while not isinstance(call, Disposition):
        try:
            reply = await executor.perform(call)
        except asyncio.CancelledError as exc:
            if _cancelled_by_worker():
                handling.close()
                raise
            # the handler's own cancellation: a failure
            call = driver.next_call(handling, None, exc)
        except BaseException as exc:  # the path decides what a failed call means
            call = driver.next_call(handling, None, exc)
        else:
            call = driver.next_call(handling, reply, None)
    return call


async def pause_on_loop(engine: Engine, seconds: float) -> None:
    """Wait ``seconds`` on the loop (time moved by hand moves at once, as
    :attr:`Engine.pause` does)."""
    if isinstance(engine.clock, ManualClock):
        engine.pause(seconds)
    else:
        await asyncio.sleep(seconds)


class AsyncExecutor:
    """Drives ``path`` (one async worker identity's) with async I/O."""

    def __init__(
        self,
        engine: Engine,
        leases: AsyncLeaseKeeper,
        path: MessagePath,
        store: AsyncRunStore,
        transport: AsyncWakeupTransport,
        threads: DaemonThreads,
        hold: Callable[[ReceivedWakeup, datetime], bool] | None = None,
    ) -> None:
        self.engine = engine
        self._hold = hold
        """Where a message waits for its run's reserved start (the session's intake);
        False once that intake is closed."""
        self.leases = leases
        self.path = path
        self.store = store
        self.transport = transport
        self.threads = threads
        self.hooks = engine.hooks
        self._perform = driver.performer_table(self)

    async def handle(self, received: ReceivedWakeup) -> Disposition:
        return await drive_async(self.path.handle(received), self)

    async def perform(self, call: driver.DriverCall | driver.EngineCall) -> Any:
        method: Callable[[Any], Any] = self._perform.get(type(call), self.serve)
        return await method(call)

    async def read(self, call: driver.ReadRun) -> Run | None:
        return await retried_async(self.store.get_run, call.run_id)

    async def claim_hinted(self, call: driver.ClaimHinted) -> Run:
        return await retried_async(self.store.claim_hinted, call.claim)

    async def write(self, call: driver.Write) -> Run:
        transition, clock = call.transition, self.engine.clock
        return await retried_async(
            self.store.apply, transition, lambda: write_budget(transition, clock.now())
        )

    async def begin(self, call: driver.Begin) -> TaskContext:
        return begin_attempt(call, self.engine, self.leases, self.path.worker_id)

    async def call_handler(self, call: driver.CallHandler) -> object:
        """The handler, called with the run's payload (opened, and converted to its task's
        payload type), the app's hooks around it and the conversions (if it has any: on
        the handler's thread, or on the loop for an ``async def`` handler); its result
        (converted from its result type), sealed. A value kept in the payload bucket, or
        encoded by codecs (which may call KMS), is read and written on a thread; a plain
        one on the loop."""
        task, ctx, values = call.task, call.ctx, self.engine.values
        try:
            with call.span.active():  # the thread runs in a copy of this context
                payload = call.payload
                if values.sealed(payload):
                    place = ValuePlace(Holder.RUN, ctx.run_id, ValueField.PAYLOAD)
                    opening = functools.partial(values.open, place=place)
                    payload = await asyncio.to_thread(retried, opening, payload)
                result = await self._handler(task, ctx, payload)
                place = ValuePlace(Holder.RUN, ctx.run_id, ValueField.RESULT)
                if values.codecs:
                    sealing = functools.partial(values.seal, what="handler result", place=place)
                    return (await asyncio.to_thread(retried, sealing, result)).value
                prepared = values.prepare(result, what="handler result", place=place)
                if prepared.offloaded:  # kept again if the bucket's write failed
                    return (await asyncio.to_thread(retried, values.keep, prepared)).value
                return values.keep(prepared).value
        except asyncio.CancelledError:
            if _cancelled_by_worker():
                ctx.log.warning(
                    "attempt %d abandoned at shutdown; its lease will expire", ctx.attempt
                )
                self.leases.untrack(ctx.run_id)
            raise

    async def _handler(self, task: Task, ctx: TaskContext, payload: JSON) -> object:
        """The handler's result as stored: an ``async def`` one awaited on the loop, a sync
        one on a thread of the pool; the conversions of its payload and result and the
        app's hooks around it, where it runs (a task with no declared type in an app with
        no hooks: the handler alone)."""
        hooks, plain = self.hooks, task.types is PLAIN_TYPES
        if task.is_async:
            if hooks.active:
                converted = functools.partial(await_handler, task, ctx, payload)
                return await hooks.call_async(ctx, converted)
            if plain:
                return await task.fn(ctx, payload)
            return await await_handler(task, ctx, payload)
        if hooks.active:  # on the handler's thread, as the handler
            handler = functools.partial(run_handler, task, ctx, payload)
            return await self.threads.run(functools.partial(hooks.call, ctx, handler))
        if plain:
            return await self.threads.run(functools.partial(task.fn, ctx, payload))
        return await self.threads.run(functools.partial(run_handler, task, ctx, payload))

    async def end(self, call: driver.End) -> tuple[Run, bool, AttemptReport | None] | None:
        return self.leases.untrack(call.run_id, call.token)

    async def publish(self, call: driver.Publish) -> None:
        publisher = self.engine.publisher
        wakeups = publisher.wakeups([call.run], delay=call.delay)
        unsent = await self.transport.publish(wakeups, call.delay)
        if unsent:
            await asyncio.to_thread(publisher.settle, [call.run], unsent)

    async def pause(self, call: driver.Pause) -> None:
        await pause_on_loop(self.engine, call.delay.total_seconds())

    async def hold(self, call: driver.Hold) -> bool:
        """Keep the message for its run's reserved start; a stopping worker keeps none
        and makes it visible again at once, for a worker that stays."""
        if self._hold is None:
            return False
        if not self._hold(call.message, call.until):
            await self.transport.release([call.message])
        return True

    async def serve(self, call: driver.EngineCall) -> Any:
        """An engine service's call, on a thread (the engine's services are sync)."""
        return await asyncio.to_thread(self.engine.serve, call)


async def await_handler(task: Task, ctx: TaskContext, payload: JSON) -> object:
    """:func:`~runlane_sqs.runtime.executor.run_handler` for an ``async def`` handler,
    awaited on the running loop: the stored ``payload`` converted to its payload type,
    the result converted to JSON as stored."""
    types = task.types
    if types.payload is not None:
        payload = types.handler_payload(payload)
    result = await task.fn(ctx, payload)
    return result if types.result is None else types.stored_result(result)


def _cancelled_by_worker() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
