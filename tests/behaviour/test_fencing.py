"""Fencing on DynamoDB: a worker that lost its lease cannot record anything.

Worker A claims a run; its lease expires (the clock moves, no sleeping); the expiry is
applied as maintenance would; worker B claims attempt 2. Every write A then tries,
success, failure or heartbeat, is refused by the conditional write in DynamoDB.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import (
    ConflictError,
    EventType,
    Failure,
    LeaseLost,
    ManualClock,
    Run,
    Runlane,
    RunStatus,
    TaskContext,
)
from runlane_sqs.core import machine
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import new_lease_token
from runlane_sqs.core.recovery import expire_lease
from runlane_sqs.core.retry import RetryDecision

TASK = "fenced.work"
LEASE = timedelta(minutes=5)
"""Long in real time too: worker heartbeats (every third of it) never fire during a test."""


def _claim(app: Runlane, run: Run, owner: str) -> Run:
    decision = machine.claim_lease(
        run, now=app.clock.now(), owner=owner, token=new_lease_token(), duration=LEASE
    )
    assert isinstance(decision, Transition), decision
    return app.store.apply(decision)


def _expire(app: Runlane, run_id: str) -> Run:
    stored = app.store.get_run(run_id)
    assert stored is not None
    decision = expire_lease(stored, now=app.clock.now())
    assert isinstance(decision, Transition), decision
    return app.store.apply(decision)


def _token(run: Run) -> str:
    assert run.lease is not None
    return run.lease.token


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def app(make_app: Callable[..., Runlane], clock: ManualClock) -> Runlane:
    app = make_app(clock=clock, lease_duration=LEASE)
    app.task(lambda ctx, payload: payload, name=TASK)
    app.provision()
    return app


@pytest.fixture
def zombie_and_successor(app: Runlane, clock: ManualClock) -> tuple[Run, Run]:
    """A's view of its attempt 1 (lease since expired) and B's claimed attempt 2."""
    run = app.trigger(TASK, {"n": 1})
    a_view = _claim(app, run, "worker-a")
    clock.advance(LEASE + timedelta(seconds=1))
    _expire(app, run.id)
    b_view = _claim(app, app.runs.get(run.id), "worker-b")
    assert (b_view.attempt, b_view.lease and b_view.lease.owner) == (2, "worker-b")
    return a_view, b_view


def test_a_worker_that_lost_its_lease_cannot_record_anything(
    app: Runlane, clock: ManualClock, zombie_and_successor: tuple[Run, Run]
) -> None:
    a_view, b_view = zombie_and_successor
    a_token, b_token = _token(a_view), _token(b_view)

    success = machine.record_success(a_view, token=a_token, result="A", now=clock.now())
    with pytest.raises(ConflictError) as refused:
        app.store.apply(success)
    assert refused.value.current is not None
    assert _token(refused.value.current) == b_token

    failure = machine.record_failure(
        a_view,
        token=a_token,
        failure=Failure(type="builtins.RuntimeError", message="A failed late"),
        decision=RetryDecision(retry_at=None),
        now=clock.now(),
    )
    with pytest.raises(ConflictError):
        app.store.apply(failure)

    lease = machine.renew_lease(a_view, token=a_token, now=clock.now(), duration=LEASE)
    with pytest.raises(LeaseLost):
        app.store.renew_lease(a_view, lease)

    stored = app.runs.get(a_view.id)
    assert (stored.status, stored.attempt, _token(stored)) == (RunStatus.RUNNING, 2, b_token)
    assert stored.lease == b_view.lease

    app.store.apply(machine.record_success(b_view, token=b_token, result="B", now=clock.now()))
    with pytest.raises(LeaseLost):
        app.store.renew_lease(a_view, lease)

    final = app.runs.get(a_view.id)
    assert (final.status, final.result, final.attempt) == (RunStatus.SUCCEEDED, "B", 2)
    events = app.runs.events(a_view.id)
    assert [e.type for e in events] == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.LEASE_EXPIRED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    assert [e.data.get("worker") for e in events if e.type is EventType.STARTED] == [
        "worker-a",
        "worker-b",
    ]
    assert [e.attempt for e in events if e.type is EventType.SUCCEEDED] == [2]


def test_the_lease_token_alone_refuses_a_write_made_on_the_current_sequence(
    app: Runlane, clock: ManualClock, zombie_and_successor: tuple[Run, Run]
) -> None:
    """Even a zombie that re-read the run (so its sequence matches) is fenced out."""
    a_view, b_view = zombie_and_successor
    a_token = _token(a_view)
    current = app.runs.get(a_view.id)
    assert current.seq == b_view.seq
    forged = current.with_changes(lease=a_view.lease)
    with pytest.raises(ConflictError):
        app.store.apply(machine.record_success(forged, token=a_token, result="A", now=clock.now()))
    stored = app.runs.get(a_view.id)
    assert (stored.status, stored.seq, _token(stored)) == (
        RunStatus.RUNNING,
        b_view.seq,
        _token(b_view),
    )


def test_a_heartbeat_keeps_a_live_lease_and_appends_no_event(
    app: Runlane, clock: ManualClock
) -> None:
    run = app.trigger(TASK, None)
    claimed = _claim(app, run, "worker-a")
    clock.advance(LEASE * 2 / 3)
    lease = machine.renew_lease(claimed, token=_token(claimed), now=clock.now(), duration=LEASE)
    renewed = app.store.renew_lease(claimed, lease)
    assert renewed.lease is not None
    assert renewed.lease.expires_at == clock.now() + LEASE
    clock.advance(LEASE * 2 / 3)  # past the first expiry, within the renewed one
    assert isinstance(expire_lease(app.runs.get(run.id), now=clock.now()), machine.Skip)
    assert [e.type for e in app.runs.events(run.id)] == [EventType.TRIGGERED, EventType.STARTED]


def test_worker_whose_lease_expired_mid_attempt_does_not_overwrite_the_successor(
    make_app: Callable[..., Runlane], clock: ManualClock
) -> None:
    """Two in-process workers: A's handler blocks while its lease expires, maintenance
    makes the run runnable again and B runs attempt 2 to success; when A's handler
    finally returns, its result is discarded."""
    a_started, a_may_return = threading.Event(), threading.Event()

    def handler(ctx: TaskContext, payload: Any) -> dict[str, Any]:
        if ctx.attempt == 1:
            a_started.set()
            assert a_may_return.wait(timeout=30)
        return {"worker": ctx.worker_id, "attempt": ctx.attempt}

    app_a = make_app(clock=clock, lease_duration=LEASE)
    app_b = make_app(clock=clock, lease_duration=LEASE)
    for app in (app_a, app_b):
        app.task(handler, name=TASK)
    app_a.provision()
    run = app_a.trigger(TASK, None)

    worker_a = app_a.worker(worker_id="worker-a", concurrency=1)
    results: list[int] = []
    thread = threading.Thread(target=lambda: results.append(worker_a.drain()))
    thread.start()
    try:
        assert a_started.wait(timeout=30), "worker A never started the attempt"
        clock.advance(LEASE + timedelta(seconds=1))
        report = app_b.maintenance.run_pass()
        assert report.jobs["expired_leases"].published == 1
        assert app_b.worker(worker_id="worker-b").drain() == 1
    finally:
        a_may_return.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert results == [1]

    final = app_a.runs.get(run.id)
    assert final.status is RunStatus.SUCCEEDED
    assert final.result == {"worker": "worker-b", "attempt": 2}
    events = app_a.runs.events(run.id)
    assert [e.type for e in events] == [
        EventType.TRIGGERED,
        EventType.STARTED,
        EventType.LEASE_EXPIRED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]
