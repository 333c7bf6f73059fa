"""The context's ``*_async`` methods for ``async def`` handlers: the same durable steps and
waits, with their storage calls off the event loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from runlane_sqs import RetryPolicy, Runlane, RunStatus, TaskContext
from runlane_sqs.aio import AsyncWorker
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Run
from runlane_sqs.core.tokens import TokenNotFound
from runlane_sqs.testing import InMemoryRunStore, InMemoryTransport, ManualClock

WAIT_SECONDS = 10.0


class SlowSteps(InMemoryRunStore):
    """Holds every step write until ``release`` is set, noting it began."""

    def __init__(self, environment: str) -> None:
        super().__init__(environment)
        self.writing = threading.Event()
        self.release = threading.Event()

    def apply(self, transition: Transition) -> Run:
        if transition.after.steps != transition.before.steps:
            self.writing.set()
            assert self.release.wait(WAIT_SECONDS), "the step write was never let go"
        return super().apply(transition)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store() -> SlowSteps:
    store = SlowSteps("test")
    store.release.set()
    return store


@pytest.fixture
def app(clock: ManualClock, store: SlowSteps) -> Runlane:
    return Runlane(environment="test", clock=clock, store=store, transport=InMemoryTransport(clock))


def drain(app: Runlane, **options: Any) -> int:
    return asyncio.run(AsyncWorker(app, **options).drain())


def test_an_async_step_runs_once_and_later_attempts_get_its_recorded_value(
    app: Runlane,
) -> None:
    charges: list[int] = []

    async def charge() -> dict[str, int]:
        await asyncio.sleep(0)
        charges.append(1)
        return {"charged": len(charges)}

    @app.task(name="order", retry=RetryPolicy(max_attempts=2, backoff="fixed", delay=0))
    async def order(ctx: TaskContext, payload: Any) -> Any:
        receipt = await ctx.step_async("charge", charge)
        plain = await ctx.step_async("label", lambda: "label-1")  # a plain callable too
        if ctx.attempt == 1:
            raise RuntimeError("shipping failed after the charge")
        return {"receipt": receipt, "label": plain}

    run = app.trigger("order")
    assert drain(app) == 2

    done = app.runs.get(run.id)
    assert (done.status, done.attempt) == (RunStatus.SUCCEEDED, 2)
    assert done.result == {"receipt": {"charged": 1}, "label": "label-1"}
    assert charges == [1]


def test_a_slow_step_write_does_not_hold_up_other_attempts_on_the_loop(
    app: Runlane, store: SlowSteps
) -> None:
    store.release.clear()
    quick_done = threading.Event()

    @app.task(name="slow")
    async def slow(ctx: TaskContext, payload: Any) -> Any:
        return await ctx.step_async("write", lambda: 1)

    @app.task(name="quick")
    async def quick(ctx: TaskContext, payload: Any) -> Any:
        assert store.writing.wait(WAIT_SECONDS)  # blocks only a thread of the test
        quick_done.set()
        store.release.set()
        return "quick"

    slow_run = app.trigger("slow")
    app.trigger("quick")

    assert drain(app, concurrency=2) == 2
    assert quick_done.is_set()
    assert app.runs.get(slow_run.id).result == 1  # its write waited for the other attempt


def test_token_and_run_waits_release_the_run_and_return_the_decision(app: Runlane) -> None:
    token = app.tokens.create()
    seen: list[Any] = []

    @app.task(name="child")
    async def child(ctx: TaskContext, payload: Any) -> Any:
        return "child done"

    @app.task(name="parent")
    async def parent(ctx: TaskContext, payload: Any) -> Any:
        decision = await ctx.wait_for_token_async(token.id)
        outcome = await ctx.wait_for_run_async(payload["child"])
        seen.append((decision.value, outcome.result))
        return "parent done"

    kid = app.trigger("child")
    run = app.trigger("parent", {"child": kid.id})
    drain(app)
    assert app.runs.get(run.id).status is RunStatus.RELEASED  # waiting for the token

    app.tokens.complete(token.id, {"approved": True})
    drain(app)

    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED
    assert seen == [({"approved": True}, "child done")]


def test_waiting_for_an_unknown_token_fails_the_attempt_clearly(app: Runlane) -> None:
    @app.task(name="parent", retry=RetryPolicy(max_attempts=1))
    async def parent(ctx: TaskContext, payload: Any) -> Any:
        return await ctx.wait_for_token_async("0" * 32)

    run = app.trigger("parent")
    drain(app)

    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.type.endswith(TokenNotFound.__name__)


def test_a_wait_raised_inside_a_task_group_still_releases_the_run(app: Runlane) -> None:
    @app.task(name="grouped")
    async def grouped(ctx: TaskContext, payload: Any) -> Any:
        async def pause() -> None:
            await asyncio.sleep(0)
            ctx.release(delay=3600)

        async with asyncio.TaskGroup() as group:
            group.create_task(pause())
        return "not reached"

    run = app.trigger("grouped")
    drain(app)

    released = app.runs.get(run.id)
    assert (released.status, released.failures) == (RunStatus.RELEASED, 0)
