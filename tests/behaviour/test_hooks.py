"""Worker hooks (``app.hooks``, docs/hooks.md): called before and after each attempt and on
its failure, by both workers, on the thread that runs a sync handler; a hook that raises
is logged with the run's id and the run goes on as if it had not. A typed task's
payload and result conversions are part of the hooked attempt: ``on_failure`` sees a
stored payload that no longer validates and a result its type refuses."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from pydantic import BaseModel

from runlane_sqs import (
    AttemptOutcome,
    ConfigurationError,
    RetryPolicy,
    Runlane,
    RunStatus,
    TaskContext,
)
from runlane_sqs.core.parking import PAYLOAD_MISMATCH
from runlane_sqs.errors import InvalidResult, PayloadMismatch
from runlane_sqs.testing import ManualClock
from tests.backends import ONLY_MEMORY, Backend
from tests.behaviour.worker_support import second_app
from tests.workers import WorkerKind


class Declined(Exception):
    """The failure the first attempt raises."""


def record_hooks(app: Runlane) -> list[tuple[Any, ...]]:
    """Hooks that note each call: ``(hook, run id, task, attempt, ...)``."""
    seen: list[tuple[Any, ...]] = []

    @app.hooks.before_attempt
    def before(ctx: TaskContext) -> None:
        seen.append(("before", ctx.run_id, ctx.task, ctx.attempt))

    @app.hooks.on_failure
    def failed(ctx: TaskContext, exc: BaseException) -> None:
        seen.append(("failure", ctx.run_id, ctx.task, ctx.attempt, repr(exc)))

    @app.hooks.after_attempt
    def after(ctx: TaskContext, outcome: AttemptOutcome) -> None:
        kind = "released" if outcome.released else "failed" if outcome.failed else "returned"
        seen.append(("after", ctx.run_id, ctx.task, ctx.attempt, kind, outcome.result))

    return seen


def register(app: Runlane) -> None:
    """``hooked.flaky``: fails, then releases for a moment, then returns; sync or async."""

    def flaky(ctx: TaskContext, payload: Any) -> Any:
        if ctx.attempt == 1:
            raise Declined("card declined")
        if ctx.attempt == 2:
            ctx.release(delay=5)
        return {"paid": payload["order"]}

    async def flaky_async(ctx: TaskContext, payload: Any) -> Any:
        return flaky(ctx, payload)

    retry = RetryPolicy(max_attempts=3, backoff="fixed", delay=1)
    app.task(flaky, name="hooked.flaky", retry=retry)
    app.task(flaky_async, name="hooked.flaky_async", retry=retry)


@ONLY_MEMORY
@pytest.mark.parametrize("task", ["hooked.flaky", "hooked.flaky_async"])
def test_hooks_see_each_attempt_its_failure_and_its_outcome(
    backend: Backend, worker_kind: WorkerKind, clock: ManualClock, task: str
) -> None:
    """In memory only: the retry's and the release's wakeups are delayed, and SQS delays
    follow the manual clock only there (the other tests here run on both)."""
    app = backend.app(register=register)
    seen = record_hooks(app)
    run = app.trigger(task, {"order": 7})

    worker_kind.drain(app)
    clock.advance(1)
    worker_kind.drain(app)
    clock.advance(5)
    worker_kind.drain(app)

    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED
    assert seen == [
        ("before", run.id, task, 1),
        ("failure", run.id, task, 1, "Declined('card declined')"),
        ("after", run.id, task, 1, "failed", None),
        ("before", run.id, task, 2),
        ("after", run.id, task, 2, "released", None),
        ("before", run.id, task, 3),
        ("after", run.id, task, 3, "returned", {"paid": 7}),
    ]


def test_hooks_run_on_the_thread_of_a_sync_handler(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    """What a per-thread resource (a database connection) needs from them."""
    app = backend.app()
    threads: dict[str, int] = {}
    app.hooks.before_attempt(lambda ctx: threads.setdefault("before", threading.get_ident()))
    app.hooks.after_attempt(lambda ctx, _: threads.setdefault("after", threading.get_ident()))

    @app.task(name="hooked.where")
    def where(ctx: TaskContext, payload: Any) -> None:
        threads["handler"] = threading.get_ident()

    app.trigger(where)
    assert worker_kind.drain(app) == 1
    assert threads["before"] == threads["handler"] == threads["after"]


def test_a_hook_that_raises_is_logged_with_the_run_id_and_the_run_goes_on(
    backend: Backend, worker_kind: WorkerKind, caplog: pytest.LogCaptureFixture
) -> None:
    app = backend.app()
    ran: list[str] = []

    def broken(*args: object) -> None:
        raise RuntimeError("the error tracker is down")

    app.hooks.before_attempt(broken)
    app.hooks.on_failure(broken)
    app.hooks.after_attempt(broken)
    app.hooks.after_attempt(lambda ctx, outcome: ran.append("after"))

    @app.task(name="hooked.fails")
    def fails(ctx: TaskContext, payload: Any) -> None:
        raise Declined("no stock")

    @app.task(name="hooked.works")
    def works(ctx: TaskContext, payload: Any) -> str:
        return "done"

    failing, working = app.trigger(fails), app.trigger(works)
    with caplog.at_level(logging.ERROR, logger="runlane_sqs.task"):
        assert worker_kind.drain(app) == 2

    assert app.runs.get(working.id).result == "done"
    failed = app.runs.get(failing.id)
    assert failed.status is RunStatus.FAILED and failed.failure is not None
    assert failed.failure.type.endswith("Declined")  # the handler's, not the hook's
    assert ran == ["after", "after"]  # the hooks after a broken one still run
    hook_lines = [r for r in caplog.records if "hook" in r.getMessage()]
    assert sorted((r.getMessage().split()[0], r.run_id) for r in hook_lines) == sorted(
        [
            ("before_attempt", failing.id),
            ("on_failure", failing.id),
            ("after_attempt", failing.id),
            ("before_attempt", working.id),
            ("after_attempt", working.id),
        ]
    )
    assert all("the error tracker is down" in (r.exc_text or "") for r in hook_lines)


def test_an_async_or_uncallable_hook_is_refused_by_name(backend: Backend) -> None:
    app = backend.app()

    async def report(ctx: TaskContext, exc: BaseException) -> None:
        """Would never be awaited."""

    with pytest.raises(ConfigurationError, match=r"on_failure hook .*report is async def"):
        app.hooks.on_failure(report)
    with pytest.raises(ConfigurationError, match="before_attempt hook must be a function"):
        app.hooks.before_attempt("close_connections")  # type: ignore[arg-type]
    assert not app.hooks.active


def test_an_app_without_hooks_has_none_active(backend: Backend) -> None:
    app = backend.app()
    assert not app.hooks.active
    app.hooks.after_attempt(lambda ctx, outcome: None)
    assert app.hooks.active


class Order(BaseModel):
    id: int


class OrderWithCoupon(BaseModel):
    """The order as a later deploy reads it: a new required field."""

    id: int
    coupon: str


def register_typed(app: Runlane, order: type[BaseModel], calls: list[int], is_async: bool) -> None:
    """``hooked.ship`` takes ``order`` and returns it; ``hooked.wrong`` returns what its
    result type refuses. Sync or ``async def`` handlers."""

    def ship(ctx: TaskContext, payload: Any) -> Order:
        calls.append(payload.id)
        return Order(id=payload.id)

    def wrong(ctx: TaskContext, payload: Any) -> Order:
        return {"id": "not a number"}  # type: ignore[return-value]

    async def ship_async(ctx: TaskContext, payload: Any) -> Order:
        return ship(ctx, payload)

    async def wrong_async(ctx: TaskContext, payload: Any) -> Order:
        return wrong(ctx, payload)

    app.task(ship_async if is_async else ship, name="hooked.ship", payload_type=order)
    app.task(wrong_async if is_async else wrong, name="hooked.wrong", payload_type=order)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync-handler", "async-handler"])
def test_on_failure_sees_a_payload_that_no_longer_validates_and_a_result_its_type_refuses(
    backend: Backend, worker_kind: WorkerKind, is_async: bool
) -> None:
    """Runs triggered under ``Order`` meet a deploy whose ``Order`` needs a coupon: the
    hooks of the new deploy see the mismatch (the handler is not called, the run parks)
    and the refused result (the run fails), as they see a handler's own exception."""
    calls: list[int] = []
    old = backend.app(register=lambda a: register_typed(a, Order, calls, is_async))
    parked = old.trigger("hooked.ship", Order(id=1))
    app = second_app(backend, old, lambda a: register_typed(a, OrderWithCoupon, calls, is_async))
    refused = app.trigger("hooked.wrong", OrderWithCoupon(id=2, coupon="spring"))
    failures: dict[str, BaseException] = {}
    outcomes: dict[str, tuple[bool, object]] = {}
    app.hooks.on_failure(lambda ctx, exc: failures.setdefault(ctx.run_id, exc))
    app.hooks.after_attempt(
        lambda ctx, outcome: outcomes.setdefault(ctx.run_id, (outcome.failed, outcome.error))
    )

    assert worker_kind.drain(app) == 2

    mismatch = failures[parked.id]
    assert isinstance(mismatch, PayloadMismatch)
    assert "coupon: Field required" in str(mismatch)
    assert outcomes[parked.id] == (True, mismatch)
    assert calls == []
    assert app.runs.get(parked.id).parked_reason == PAYLOAD_MISMATCH
    invalid = failures[refused.id]
    assert isinstance(invalid, InvalidResult)
    assert "id: Input should be a valid integer" in str(invalid)
    assert outcomes[refused.id] == (True, invalid)
    assert app.runs.get(refused.id).status is RunStatus.FAILED
