"""The asyncio worker over the in-memory store and transport, and the pieces it shares
with the sync worker: pacing decisions, configuration checks, the awaitable
cancellation and the handler threads. Time moves only by hand (``ManualClock``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from runlane_sqs import ConfigurationError, EventType, RetryPolicy, Runlane, RunStatus, TaskContext
from runlane_sqs.aio import AsyncWorker
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.engine.context import Cancellation
from runlane_sqs.runtime.aio.threads import DaemonThreads
from runlane_sqs.runtime.worker import (
    ACK_LINGER_SECONDS,
    LoopAction,
    WorkerConfig,
    acks_due,
    next_action,
)
from runlane_sqs.testing import InMemoryTransport, ManualClock, in_memory_app
from tests.workers import KINDS, Drain, WorkerKind

WAIT_SECONDS = 10.0
"""Upper bound for events that should happen at once (a failing test, not a slow one)."""


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def app(clock: ManualClock) -> Runlane:
    return in_memory_app(clock=clock)


def transport(app: Runlane) -> InMemoryTransport:
    assert isinstance(app.transport, InMemoryTransport)
    return app.transport


def drain(app: Runlane, max_runs: int | None = None, **options: Any) -> int:
    return asyncio.run(AsyncWorker(app, **options).drain(max_runs=max_runs))


# --- drain ------------------------------------------------------------------------------


def test_drain_runs_sync_and_async_handlers_and_counts_them(app: Runlane) -> None:
    threads: dict[str, str] = {}

    @app.task(name="plain")
    def plain(ctx: TaskContext, payload: Any) -> Any:
        threads[ctx.run_id] = threading.current_thread().name
        return {"plain": payload}

    @app.task(name="coroutine")
    async def coroutine(ctx: TaskContext, payload: Any) -> Any:
        await asyncio.sleep(0)
        threads[ctx.run_id] = threading.current_thread().name
        return {"coroutine": payload}

    runs = [app.trigger("plain", 1), app.trigger("coroutine", 2), app.trigger("plain", 3)]

    assert drain(app, concurrency=2) == 3

    results = [app.runs.get(run.id).result for run in runs]
    assert results == [{"plain": 1}, {"coroutine": 2}, {"plain": 3}]
    assert threads[runs[0].id].startswith("runlane-handler")
    assert threads[runs[1].id] == threading.current_thread().name  # the worker's loop
    assert transport(app).depth("default") == 0
    assert drain(app) == 0


def test_drain_counts_only_executed_runs_and_stops_at_max_runs(app: Runlane) -> None:
    app.task(lambda ctx, payload: payload, name="echo")
    first = app.trigger("echo", 1)
    for body in ("not a wakeup", "[]", Wakeup.for_run(first, app.clock.now()).to_json()):
        transport(app).send_raw("default", body)  # malformed, and a duplicate
    runs = [first, *app.trigger_many("echo", [2, 3, 4])]

    assert drain(app, max_runs=3) == 3
    assert sorted(app.runs.get(run.id).status.value for run in runs) == [
        "queued",
        "succeeded",
        "succeeded",
        "succeeded",
    ]
    assert drain(app) == 1
    assert {app.runs.get(run.id).status for run in runs} == {RunStatus.SUCCEEDED}
    assert transport(app).depth("default") == 0


def test_a_failure_is_retried_and_a_release_waits_for_its_time(
    app: Runlane, clock: ManualClock
) -> None:
    @app.task(name="flaky", retry=RetryPolicy(max_attempts=2, backoff="fixed", delay=0))
    async def flaky(ctx: TaskContext, payload: Any) -> Any:
        if ctx.attempt == 1:
            raise ValueError("first attempt fails")
        if ctx.attempt == 2:
            ctx.release(delay=3600)
        return ctx.attempt

    run = app.trigger("flaky")
    assert drain(app) == 2
    assert app.runs.get(run.id).status is RunStatus.RELEASED
    clock.advance(3600)
    app.maintenance.run_pass()
    assert drain(app) == 1
    done = app.runs.get(run.id)
    assert (done.status, done.result, done.failures) == (RunStatus.SUCCEEDED, 3, 1)
    assert [e.type for e in app.runs.events(run.id)].count(EventType.ATTEMPT_FAILED) == 1


def test_drain_rejects_max_runs_below_one(app: Runlane) -> None:
    with pytest.raises(ConfigurationError, match="max_runs must be at least 1"):
        drain(app, max_runs=0)


class Overlap:
    """Counts handlers running at once. Each waits until ``concurrency`` of them run
    together (or all the runs left have started), so a worker that allowed more at
    once would be seen doing it."""

    def __init__(self, concurrency: int, runs: int) -> None:
        self.concurrency = concurrency
        self.left = runs
        self.active = 0
        self.peak = 0
        self.lock = threading.Lock()
        self.full = threading.Event()

    def enter(self) -> None:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            if self.active >= min(self.concurrency, self.left):
                self.full.set()

    def leave(self) -> None:
        with self.lock:
            self.active -= 1
            self.left -= 1


@pytest.mark.parametrize("style", ["def", "async def"])
def test_no_more_than_concurrency_handlers_run_at_once(app: Runlane, style: str) -> None:
    concurrency, runs = 3, 10
    overlap = Overlap(concurrency, runs)

    def plain(ctx: TaskContext, payload: Any) -> Any:
        overlap.enter()
        try:
            assert overlap.full.wait(WAIT_SECONDS), "the worker never ran 3 at once"
        finally:
            overlap.leave()

    async def coroutine(ctx: TaskContext, payload: Any) -> Any:
        overlap.enter()
        try:
            await asyncio.wait_for(asyncio.to_thread(overlap.full.wait), WAIT_SECONDS)
        finally:
            overlap.leave()

    app.task(plain if style == "def" else coroutine, name="overlap")
    created = app.trigger_many("overlap", [{"n": n} for n in range(runs)])

    assert drain(app, concurrency=concurrency) == runs

    assert overlap.peak == concurrency
    assert {app.runs.get(run.id).status for run in created} == {RunStatus.SUCCEEDED}


# --- stop and cancellation ----------------------------------------------------------------


def test_stop_from_another_thread_sets_the_cancellation_and_run_returns(app: Runlane) -> None:
    started = threading.Event()

    @app.task(name="patient")
    async def patient(ctx: TaskContext, payload: Any) -> Any:
        started.set()
        await ctx.until_cancelled()
        return {"cancelled": ctx.cancelled}

    run = app.trigger("patient")
    worker = AsyncWorker(app, wait_seconds=0)
    stopper = threading.Thread(target=lambda: started.wait(WAIT_SECONDS) and worker.stop())
    stopper.start()
    asyncio.run(worker.run())
    stopper.join()

    done = app.runs.get(run.id)
    assert (done.status, done.result) == (RunStatus.SUCCEEDED, {"cancelled": True})


def test_wait_async_resolves_when_set_from_another_thread() -> None:
    cancellation = Cancellation()
    waiting = threading.Event()

    async def main() -> bool:
        waiter = asyncio.ensure_future(cancellation.wait_async())
        await asyncio.sleep(0)  # let the waiter register
        assert not waiter.done()
        waiting.set()
        await asyncio.wait_for(waiter, WAIT_SECONDS)
        return cancellation.is_set()

    setter = threading.Thread(target=lambda: waiting.wait(WAIT_SECONDS) and cancellation.set())
    setter.start()
    assert asyncio.run(main()) is True
    setter.join()


def test_wait_async_returns_at_once_when_already_set() -> None:
    cancellation = Cancellation()
    cancellation.set()

    async def main() -> bool:
        waiter = asyncio.ensure_future(cancellation.wait_async())
        await asyncio.sleep(0)  # one step of the loop is all it needs
        return waiter.done()

    assert asyncio.run(main()) is True


def test_wait_async_can_be_cancelled_and_still_works_as_an_event() -> None:
    cancellation = Cancellation()

    async def main() -> None:
        waiter = asyncio.ensure_future(cancellation.wait_async())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(main())
    cancellation.set()  # no waiter left to resolve on a closed loop
    assert cancellation.wait(0)


def test_until_cancelled_on_the_task_context_resolves_when_the_worker_stops(
    app: Runlane,
) -> None:
    """Two ``async def`` attempts on one loop both wake when ``stop()`` sets them."""
    started = threading.Semaphore(0)

    @app.task(name="patient")
    async def patient(ctx: TaskContext, payload: Any) -> Any:
        started.release()
        await ctx.until_cancelled()
        return "stopped"

    runs = app.trigger_many("patient", [1, 2])
    worker = AsyncWorker(app, concurrency=2, wait_seconds=0)

    def stop_when_both_started() -> None:
        for _ in runs:
            assert started.acquire(timeout=WAIT_SECONDS)
        worker.stop()

    stopper = threading.Thread(target=stop_when_both_started)
    stopper.start()
    asyncio.run(worker.run())
    stopper.join()
    assert [app.runs.get(run.id).result for run in runs] == ["stopped", "stopped"]


# --- pacing and configuration -------------------------------------------------------------


def config(concurrency: int = 4, queues: tuple[str, ...] = ("default",)) -> WorkerConfig:
    return WorkerConfig.build(
        queues, concurrency=concurrency, wait_seconds=10, grace_period=25, worker_id="w"
    )


@pytest.mark.parametrize(
    ("busy", "buffered", "executed", "max_runs", "expected"),
    [
        (0, 0, 0, None, LoopAction.RECEIVE),  # idle
        (0, 3, 0, None, LoopAction.DISPATCH),
        (3, 3, 0, None, LoopAction.DISPATCH),  # one slot left
        (4, 3, 0, None, LoopAction.WAIT),  # every slot busy
        (1, 0, 0, None, LoopAction.RECEIVE),  # three of four slots free
        (2, 0, 0, None, LoopAction.RECEIVE),  # half free
        (3, 0, 0, None, LoopAction.WAIT),  # less than half free: receive later, in one batch
        (1, 2, 1, 2, LoopAction.WAIT),  # max_runs reached counting the one in flight
        (0, 2, 2, 2, LoopAction.STOP),  # max_runs reached, nothing in flight
        (0, 2, 1, 2, LoopAction.DISPATCH),
    ],
)
def test_next_action(
    busy: int, buffered: int, executed: int, max_runs: int | None, expected: LoopAction
) -> None:
    action = next_action(
        config(), busy=busy, buffered=buffered, executed=executed, max_runs=max_runs
    )
    assert action is expected


def test_next_step_with_one_slot_receives_only_when_idle() -> None:
    one = config(concurrency=1)
    assert next_action(one, busy=0, buffered=0, executed=0, max_runs=None) is LoopAction.RECEIVE
    assert next_action(one, busy=1, buffered=0, executed=0, max_runs=None) is LoopAction.WAIT


@pytest.mark.parametrize(
    ("pending", "busy", "age", "force", "due"),
    [
        (0, 0, 99.0, True, False),  # nothing to delete
        (1, 0, 0.0, False, True),  # idle: delete now
        (1, 2, 0.0, False, False),  # busy: wait for a fuller batch
        (9, 2, 0.0, False, False),
        (10, 2, 0.0, False, True),  # a full batch
        (1, 2, ACK_LINGER_SECONDS, False, True),  # waited long enough
        (1, 2, 0.0, True, True),  # shutdown
    ],
)
def test_acks_due(pending: int, busy: int, age: float, force: bool, due: bool) -> None:
    assert acks_due(pending, busy=busy, oldest_age_seconds=age, force=force) is due


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "concurrency must be at least 1"),
        ({"concurrency": -3}, "concurrency must be at least 1"),
        ({"wait_seconds": -1}, "wait_seconds must be between 0 and 20"),
        ({"wait_seconds": 21}, "wait_seconds must be between 0 and 20"),
        ({"grace_period": -1}, "grace_period must not be negative"),
        ({"queues": []}, "a worker needs at least one queue"),
    ],
)
def test_worker_config_rejects_bad_settings_clearly(
    options: dict[str, Any], message: str, app: Runlane
) -> None:
    settings: dict[str, Any] = {
        "queues": ["default"],
        "concurrency": 1,
        "wait_seconds": 10,
        "grace_period": 25,
        "worker_id": None,
    }
    settings.update(options)
    queues = settings.pop("queues")
    with pytest.raises(ConfigurationError, match=message):
        WorkerConfig.build(queues, **settings)
    if queues:  # the async worker checks the same settings when it is built
        with pytest.raises(ConfigurationError, match=message):
            AsyncWorker(app, queues, **settings)


def test_worker_config_defaults_and_derived_values() -> None:
    built = WorkerConfig.build(
        ["a", "b"], concurrency=2, wait_seconds=20, grace_period=5, worker_id=None
    )
    assert built.worker_id.startswith("worker-")
    assert built.queues == ("a", "b")
    assert built.prefetch == 4
    assert config(concurrency=50).prefetch == 10
    assert built.receive_wait(drain=False, busy=0) == 1  # several queues: none starved
    assert config().receive_wait(drain=False, busy=0) == 10
    assert config().receive_wait(drain=True, busy=0) == 1
    assert config().receive_wait(drain=False, busy=1) == 0


# --- handler threads ------------------------------------------------------------------------


class Boom(Exception):
    pass


def test_daemon_threads_pass_results_and_exceptions_back() -> None:
    threads = DaemonThreads(2, name="test-handler")

    def fail() -> None:
        raise Boom("from the thread")

    async def main() -> tuple[Any, ...]:
        ok = await threads.run(lambda: threading.current_thread().name)
        with pytest.raises(Boom, match="from the thread"):
            await threads.run(fail)
        with pytest.raises(KeyboardInterrupt):
            await threads.run(_raise(KeyboardInterrupt()))
        return ok, await threads.run(lambda: 6 * 7)

    try:
        name, answer = asyncio.run(main())
    finally:
        threads.close()
    assert name.startswith("test-handler-")
    assert answer == 42


def _raise(exc: BaseException) -> Callable[[], None]:
    def raiser() -> None:
        raise exc

    return raiser


def test_daemon_threads_are_daemons_and_bounded() -> None:
    threads = DaemonThreads(2, name="test-bounded")
    gate = threading.Event()
    overlap = Overlap(2, 4)

    def job() -> str:
        overlap.enter()
        try:
            gate.wait(WAIT_SECONDS)
            return threading.current_thread().name
        finally:
            overlap.leave()

    async def main() -> list[str]:
        jobs = [asyncio.ensure_future(threads.run(job)) for _ in range(4)]
        await asyncio.to_thread(overlap.full.wait, WAIT_SECONDS)
        gate.set()
        return list(await asyncio.gather(*jobs))

    try:
        names = asyncio.run(main())
    finally:
        threads.close()
    assert overlap.peak == 2
    assert set(names) <= {"test-bounded-0", "test-bounded-1"}
    pool = [t for t in threading.enumerate() if t.name.startswith("test-bounded-")]
    assert all(t.daemon for t in pool)


# --- a worker used again after it abandoned an attempt ------------------------------------

HANG_SECONDS = 3.0
"""How long the known-bug tests below wait for what should happen at once."""


class StuckThenQuick:
    """``stuck`` ignores cancellation until the test lets it go; ``quick`` returns."""

    def __init__(self, app: Runlane) -> None:
        self.stuck_started = threading.Event()
        self.let_go = threading.Event()
        self.quick_ran = threading.Event()
        app.task(self.stuck, name="stuck")
        app.task(self.quick, name="quick")

    def stuck(self, ctx: TaskContext, payload: Any) -> Any:
        self.stuck_started.set()
        self.let_go.wait(WAIT_SECONDS)
        return "late"

    def quick(self, ctx: TaskContext, payload: Any) -> Any:
        self.quick_ran.set()
        return "quick"


@pytest.mark.parametrize("kind_name", KINDS)
def test_the_next_drain_after_an_abandoned_attempt_runs_new_work_at_once(
    app: Runlane, kind_name: str
) -> None:
    kind = WorkerKind(kind_name)
    handlers = StuckThenQuick(app)
    worker = kind.build(app, grace_period=0)
    app.trigger("stuck")
    stopper = threading.Thread(
        target=lambda: handlers.stuck_started.wait(WAIT_SECONDS) and worker.stop()
    )
    stopper.start()
    second = Drain(kind, worker)
    try:
        assert kind.drain_worker(worker) == 0  # stopped; the stuck attempt is abandoned
        quick = app.trigger("quick")
        second.thread.start()
        assert handlers.quick_ran.wait(HANG_SECONDS), "the new run waited for the old one"
        second.thread.join(HANG_SECONDS)
        assert second.join(0) == 1
        assert app.runs.get(quick.id).result == "quick"
    finally:
        handlers.let_go.set()
        stopper.join(WAIT_SECONDS)
        if second.thread.ident is not None:
            second.thread.join(WAIT_SECONDS)


def test_the_async_workers_handler_threads_end_with_its_drain(app: Runlane) -> None:
    used: list[threading.Thread] = []

    @app.task(name="echo")
    def echo(ctx: TaskContext, payload: Any) -> Any:
        used.append(threading.current_thread())
        return payload

    app.trigger_many("echo", [1, 2, 3])

    assert drain(app, concurrency=2) == 3

    assert used and all(t.name.startswith("runlane-handler") for t in used)
    for thread in used:
        thread.join(WAIT_SECONDS)
    assert [t.name for t in used if t.is_alive()] == []


def test_a_stop_from_another_thread_as_the_drain_closes_its_loop_does_not_raise(
    app: Runlane,
) -> None:
    """The loop a stop would wake closes between its first wake-up and the next (the
    drain it woke ended): the stop returns quietly, as the drain is over."""
    worker = AsyncWorker(app, wait_seconds=0)
    loop = asyncio.new_event_loop()
    schedule = loop.call_soon_threadsafe  # raises RuntimeError once the loop is closed
    woken: list[object] = []

    def wake_then_close(callback: Any) -> object:
        if woken:
            return schedule(callback)
        woken.append(callback)
        loop.close()  # the drain woke by the first call ends and closes its loop
        return None

    asyncio.run(worker.drain())  # a session: the worker now knows its loop and events
    worker._loop = loop  # as it stands when the stop is called (the same object, open)
    loop.call_soon_threadsafe = wake_then_close  # type: ignore[method-assign]
    worker.stop()
    assert len(woken) == 1 and loop.is_closed()
