"""Concurrency limits on every backend, with time moved by hand: a claim takes a slot of
its queue's (and its key's) limit in the same write as the lease; a run that finds none
free waits without an attempt counted and is woken, oldest first, by the write that
frees one; maintenance returns a dead worker's slot with its lease and repairs a holder
that lost its lease; a zombie attempt can neither free nor keep a slot."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import (
    ConfigurationError,
    ConflictError,
    EventType,
    InvalidKeyError,
    Runlane,
    RunStatus,
)
from runlane_sqs.core import machine
from runlane_sqs.core.model import Run, Slot
from runlane_sqs.core.slots import key_scope, queue_scope, slot_holder
from runlane_sqs.engine.reports import JOB_EXPIRED, JOB_SLOTS
from tests.backends import Backend
from tests.behaviour.worker_support import claim_elsewhere, drain, event_types, second_app
from tests.workers import WorkerKind

TASK = "billing.sync"
KEYED = "invoices.sync"


def _done(ctx: Any, payload: Any) -> Any:
    return payload


def limited(limit: int, key_limit: int | None = None) -> Callable[[Runlane], None]:
    """Register a task on queue ``billing`` limited to ``limit`` runs, and a keyed task on
    an unlimited queue with ``key_limit`` runs per customer."""

    def register(app: Runlane) -> None:
        billing = app.queue("billing", concurrency_limit=limit)
        app.task(_done, name=TASK, queue=billing)
        app.task(
            _done,
            name=KEYED,
            queue="invoices",
            concurrency_key=lambda p: p["customer"],
            key_limit=key_limit or 1,
        )

    return register


def succeed(app: Runlane, run: Run) -> Run:
    assert run.lease is not None
    decision = machine.record_success(run, token=run.lease.token, result=None, now=app.clock.now())
    return app.store.apply(decision)


def holders(app: Runlane, scope: str) -> set[str]:
    state = app.store.slots.get_slot(scope)
    return set(state.holders) if state else set()


BILLING = queue_scope("billing")


def triggered_apart(app: Runlane, backend: Backend, n: int) -> Run:
    """A run created a millisecond after the last (runs of one millisecond are woken in
    id order)."""
    backend.clock.advance(timedelta(milliseconds=1))
    return app.trigger(TASK, n)


def test_runs_beyond_the_limit_wait_without_an_attempt_and_run_oldest_first(
    backend: Backend,
) -> None:
    app = backend.app(register=limited(1), queues=["billing", "invoices"])
    first, second, third = (triggered_apart(app, backend, n) for n in range(3))
    held = claim_elsewhere(app, first.id)
    assert holders(app, BILLING) == {slot_holder(held.lease.token, first.id)}  # type: ignore[union-attr]
    assert drain(app, queues=["billing"]) == 0  # both find the slot held
    for run in (second, third):
        waiting = app.runs.get(run.id)
        assert waiting.status is RunStatus.QUEUED and waiting.attempt == 0
        assert waiting.slot_wait == BILLING and waiting.due_at is None
        assert event_types(app, run.id) == [EventType.TRIGGERED, EventType.WAITING_FOR_SLOT]
    assert app.store.slots.slot_waiters(BILLING, 10) == [second.id, third.id]
    succeed(app, held)  # another worker's attempt ends: its write frees the slot
    assert holders(app, BILLING) == set()
    assert app.engine.slot_waker.wake([BILLING]) == 1  # what that worker does next
    assert app.runs.get(third.id).slot_wait == BILLING  # only the oldest is woken
    assert drain(app, queues=["billing"]) == 2  # the second runs, and its end wakes the third
    for run in (second, third):
        done = app.runs.get(run.id)
        assert done.status is RunStatus.SUCCEEDED and done.attempt == 1
        assert event_types(app, run.id) == [
            EventType.TRIGGERED,
            EventType.WAITING_FOR_SLOT,
            EventType.SLOT_FREED,
            EventType.STARTED,
            EventType.SUCCEEDED,
        ]
    started = {
        run.id: next(e.at for e in app.runs.events(run.id) if e.type is EventType.STARTED)
        for run in (second, third)
    }
    assert started[second.id] <= started[third.id]
    assert holders(app, BILLING) == set()
    assert app.store.slots.slot_waiters(BILLING, 10) == []


def test_a_limit_holds_across_worker_threads(backend: Backend) -> None:
    """Eight worker threads, twelve runs, a limit of two: never more than two handlers at
    once, every run succeeds with one attempt."""
    lock = threading.Lock()
    running: list[int] = [0, 0]  # now, most at once

    def slow(ctx: Any, payload: Any) -> Any:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return payload

    def register(app: Runlane) -> None:
        app.task(slow, name=TASK, queue=app.queue("billing", concurrency_limit=2))

    app = backend.app(register=register, queues=["billing"])
    runs = app.trigger_many(TASK, list(range(12)))
    executed = 0
    for _ in range(20):  # woken runs' wakeups arrive while the worker drains
        executed += drain(app, concurrency=8)
        if executed == len(runs):
            break
    assert executed == len(runs)
    assert 1 <= running[1] <= 2  # the integration tests (tests/processes) load it fully
    for run in runs:
        done = app.runs.get(run.id)
        assert done.status is RunStatus.SUCCEEDED and done.attempt == 1


def test_a_key_limit_holds_per_key_and_keys_progress_independently(backend: Backend) -> None:
    app = backend.app(register=limited(5, key_limit=1), queues=["invoices"])
    a = [app.trigger(KEYED, {"customer": "acme", "n": n}) for n in range(3)]
    b = [app.trigger(KEYED, {"customer": "globex", "n": n}) for n in range(3)]
    held = claim_elsewhere(app, a[0].id)
    assert held.slots == (Slot(key_scope(KEYED, "acme"), 1),)
    assert held.concurrency_key == "acme"
    assert drain(app, queues=["invoices"]) == 3  # globex's runs, one after the other
    assert all(app.runs.get(r.id).status is RunStatus.SUCCEEDED for r in b)
    assert [app.runs.get(r.id).slot_wait for r in a[1:]] == [key_scope(KEYED, "acme")] * 2
    succeed(app, held)
    app.engine.slot_waker.wake([key_scope(KEYED, "acme")])
    assert drain(app, queues=["invoices"]) == 2
    assert all(app.runs.get(r.id).status is RunStatus.SUCCEEDED for r in a[1:])


def test_a_trigger_may_give_the_key_itself(backend: Backend) -> None:
    app = backend.app(register=limited(5), queues=["invoices"])
    run = app.trigger(KEYED, {"customer": "acme"}, concurrency_key="tenant-9")
    assert app.runs.get(run.id).concurrency_key == "tenant-9"


def test_a_dead_workers_slot_returns_with_its_lease(backend: Backend) -> None:
    app = backend.app(register=limited(1), queues=["billing"])
    dead, waiting = app.trigger(TASK, 1), app.trigger(TASK, 2)
    claim_elsewhere(app, dead.id, owner="worker-killed")
    assert drain(app, queues=["billing"]) == 0
    assert app.runs.get(waiting.id).slot_wait == BILLING
    backend.clock.advance(app.config.lease_duration + timedelta(seconds=1))
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_EXPIRED].acted == 1
    assert holders(app, BILLING) == set()  # freed by the recovery's own write
    assert app.runs.get(waiting.id).slot_wait is None  # woken in the same pass
    assert drain(app, queues=["billing"]) == 2  # the waiter and the recovered run, in turn
    assert app.runs.get(waiting.id).status is RunStatus.SUCCEEDED
    assert app.runs.get(dead.id).status is RunStatus.SUCCEEDED


def test_maintenance_drops_a_holder_without_a_lease_and_says_so(backend: Backend) -> None:
    """A holder whose attempt ended without freeing it (a write made without the run's
    slots, as a bug would) is dropped by the slot check once the record is due, and the
    waiter it blocked is woken."""
    app = backend.app(register=limited(1), queues=["billing"])
    leaked, waiting = app.trigger(TASK, 1), app.trigger(TASK, 2)
    held = claim_elsewhere(app, leaked.id)
    assert held.lease is not None
    forgetful = machine.record_success(
        held.with_changes(slots=()), token=held.lease.token, result=None, now=app.clock.now()
    )
    app.store.apply(forgetful)  # succeeded, but its slot is still listed
    assert holders(app, BILLING) == {slot_holder(held.lease.token, leaked.id)}
    assert drain(app, queues=["billing"]) == 0
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_SLOTS].repaired == 0  # not due yet: listed at the lease expiry
    backend.clock.advance(app.config.lease_duration)
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_SLOTS].repaired == 1
    assert report.jobs[JOB_SLOTS].acted == 1 and report.jobs[JOB_SLOTS].published == 1
    assert holders(app, BILLING) == set()
    assert drain(app, queues=["billing"]) == 1
    assert app.runs.get(waiting.id).status is RunStatus.SUCCEEDED


def test_a_zombie_attempt_can_neither_free_nor_keep_a_slot(backend: Backend) -> None:
    app = backend.app(register=limited(1), queues=["billing"])
    run = app.trigger(TASK, 1)
    zombie = claim_elsewhere(app, run.id, owner="worker-paused")
    backend.clock.advance(app.config.lease_duration + timedelta(seconds=1))
    app.maintenance.run_pass()  # recovers the lease, freeing the zombie's slot
    live = claim_elsewhere(app, run.id, owner="worker-live")
    assert live.lease is not None and zombie.lease is not None
    with pytest.raises(ConflictError):
        succeed(app, zombie)
    assert holders(app, BILLING) == {slot_holder(live.lease.token, run.id)}
    succeed(app, live)
    assert holders(app, BILLING) == set()


def test_cancelling_a_waiting_run_takes_it_off_the_waiters(backend: Backend) -> None:
    app = backend.app(register=limited(1), queues=["billing"])
    first, second = app.trigger(TASK, 1), app.trigger(TASK, 2)
    claim_elsewhere(app, first.id)
    drain(app, queues=["billing"])
    app.runs.cancel(second.id, reason="not needed")
    assert app.runs.get(second.id).status is RunStatus.CANCELLED
    assert app.store.slots.slot_waiters(BILLING, 10) == []


def test_a_new_deploy_can_raise_the_limit(backend: Backend) -> None:
    app = backend.app(register=limited(1), queues=["billing"])
    runs = [app.trigger(TASK, n) for n in range(3)]
    claim_elsewhere(app, runs[0].id)
    raised = second_app(backend, app, limited(2))
    claim_elsewhere(raised, runs[1].id)
    assert len(holders(app, BILLING)) == 2
    assert app.store.slots.get_slot(BILLING).limit == 2  # type: ignore[union-attr]


def test_runs_without_limits_take_no_slot(backend: Backend) -> None:
    def register(app: Runlane) -> None:
        app.task(_done, name="plain")

    app = backend.app(register=register)
    run = app.trigger("plain", 1)
    assert drain(app) == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED
    assert app.store.slots.get_slot(queue_scope("default")) is None


@pytest.mark.parametrize("limit", [0, -1, 10_001, 1.5, "2", True])
def test_a_bad_limit_is_refused(backend: Backend, limit: Any) -> None:
    app = backend.app()
    with pytest.raises(ConfigurationError, match="concurrency_limit"):
        app.queue("billing", concurrency_limit=limit)
    with pytest.raises(ConfigurationError, match="key_limit"):
        app.task(_done, name="t", concurrency_key=lambda p: "k", key_limit=limit)


def test_bad_key_definitions_are_refused(backend: Backend) -> None:
    app = backend.app()
    with pytest.raises(ConfigurationError, match="needs a key_limit"):
        app.task(_done, name="a", concurrency_key=lambda p: "k")
    with pytest.raises(ConfigurationError, match="function of the payload"):
        app.task(_done, name="b", concurrency_key="customer", key_limit=1)  # type: ignore[arg-type]
    app.queue("billing", concurrency_limit=2)
    with pytest.raises(ConfigurationError, match="already defined"):
        app.queue("billing", concurrency_limit=3)


def _raises(payload: Any) -> str:
    raise KeyError("customer")


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (_raises, "raised KeyError"),
        (lambda p: 7, "returned int, not a string"),
        (lambda p: "", "must not be empty"),
        (lambda p: "x" * 201, "201 characters; the limit is 200"),
        (lambda p: "bad\x00key", "U\\+0000"),
        (lambda p: "\ud800", "U\\+D800"),
    ],
)
def test_a_key_function_failure_fails_the_trigger_and_writes_nothing(
    backend: Backend, key: Callable[[Any], Any], message: str
) -> None:
    def register(app: Runlane) -> None:
        app.task(_done, name=KEYED, concurrency_key=key, key_limit=1)

    app = backend.app(register=register)
    with pytest.raises(InvalidKeyError, match=message):
        app.trigger(KEYED, {"customer": "acme"})
    assert app.runs.list().runs == []


def test_a_key_given_at_trigger_time_is_checked(backend: Backend) -> None:
    app = backend.app(register=limited(5), queues=["billing", "invoices"])
    with pytest.raises(InvalidKeyError, match="has no key_limit"):
        app.trigger(TASK, 1, concurrency_key="acme")
    with pytest.raises(InvalidKeyError, match="U\\+001B"):
        app.trigger(KEYED, {"customer": "acme"}, concurrency_key="\x1b[31m")
    with pytest.raises(InvalidKeyError, match="must be a string"):
        app.trigger(KEYED, {"customer": "acme"}, concurrency_key=7)  # type: ignore[arg-type]
    assert app.runs.list().runs == []


def test_operators_read_each_limits_occupancy(backend: Backend) -> None:
    app = backend.app(register=limited(1, key_limit=2), queues=["billing", "invoices"])
    first, second = app.trigger(TASK, 1), app.trigger(TASK, 2)
    keyed = app.trigger(KEYED, {"customer": "acme"})
    claim_elsewhere(app, first.id)
    claim_elsewhere(app, keyed.id)
    drain(app, queues=["billing"])
    assert app.runs.get(second.id).slot_wait == BILLING
    listed = {o.scope: o.to_json() for o in app.queues.list()}
    assert listed == {
        "key#invoices.sync#acme": {
            "scope": "key#invoices.sync#acme",
            "kind": "key",
            "name": "invoices.sync#acme",
            "limit": 2,
            "stored_limit": 2,
            "holding": 1,
            "waiting": 0,
        },
        BILLING: {
            "scope": BILLING,
            "kind": "queue",
            "name": "billing",
            "limit": 1,
            "stored_limit": 1,
            "holding": 1,
            "waiting": 1,
        },
        "queue#invoices": {
            "scope": "queue#invoices",
            "kind": "queue",
            "name": "invoices",
            "limit": None,
            "stored_limit": None,
            "holding": 0,
            "waiting": 0,
        },
    }
    operator = backend.app() if backend.real else None  # no code: the active scopes only
    if operator is not None:
        assert {o.scope for o in operator.queues.list()} == {BILLING, "key#invoices.sync#acme"}


def test_both_workers_take_wait_for_and_free_slots(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    app = backend.app(register=limited(1), queues=["billing"])
    first, second, third = (triggered_apart(app, backend, n) for n in range(3))
    held = claim_elsewhere(app, first.id)
    assert worker_kind.drain(app, queues=["billing"]) == 0
    assert app.store.slots.slot_waiters(BILLING, 10) == [second.id, third.id]
    succeed(app, held)
    app.engine.slot_waker.wake([BILLING])
    assert worker_kind.drain(app, queues=["billing"]) == 2  # the end of one wakes the next
    assert {app.runs.get(r.id).status for r in (second, third)} == {RunStatus.SUCCEEDED}
    assert holders(app, BILLING) == set()


def test_waiters_are_woken_when_a_deploy_removes_the_limit(backend: Backend) -> None:
    """The holder is still running (its heartbeat renewed the lease) when maintenance
    checks the slot record: under the old limit no waiter could go; the new code has no
    limit, so every waiter is woken."""
    app = backend.app(register=limited(1), queues=["billing"])
    first, *waiting = (triggered_apart(app, backend, n) for n in range(3))
    held = claim_elsewhere(app, first.id)
    assert drain(app, queues=["billing"]) == 0
    assert app.store.slots.count_slot_waiters(BILLING, 10) == 2

    def unlimited(new: Runlane) -> None:
        new.task(_done, name=TASK, queue="billing")

    deployed = second_app(backend, app, unlimited)
    lease = app.config.lease_duration
    backend.clock.advance(lease - timedelta(seconds=1))
    assert held.lease is not None
    app.store.renew_lease(held, replace(held.lease, expires_at=backend.clock.now() + lease))
    backend.clock.advance(timedelta(seconds=1))  # the slot record's first check is due
    report = deployed.maintenance.run_pass()
    assert report.jobs[JOB_EXPIRED].acted == 0 and holders(app, BILLING) != set()
    assert report.jobs[JOB_SLOTS].acted == 2
    assert drain(deployed, queues=["billing"]) == 2
    assert {app.runs.get(r.id).status for r in waiting} == {RunStatus.SUCCEEDED}


BOTH = "shared.sync"
SHARED = queue_scope("shared")


def two_limits(app: Runlane) -> None:
    """A task under two limits: its queue's (2) and one per customer."""
    shared = app.queue("shared", concurrency_limit=2)
    app.task(_done, name=BOTH, queue=shared, concurrency_key=lambda p: p["customer"], key_limit=1)


def test_a_free_slot_skips_a_waiter_whose_other_limit_is_full(backend: Backend) -> None:
    """The queue's freed slot goes to the oldest waiter that can take both its slots:
    the older waiter's customer slot is held (by a worker that died), so it waits for
    that one instead, and the queue's slot is not left unused until maintenance."""
    app = backend.app(register=two_limits, queues=["shared"])
    held_key = claim_elsewhere(app, app.trigger(BOTH, {"customer": "acme"}).id, owner="dead")
    busy = claim_elsewhere(app, app.trigger(BOTH, {"customer": "globex"}).id)
    backend.clock.advance(timedelta(milliseconds=1))
    blocked = app.trigger(BOTH, {"customer": "acme"})
    backend.clock.advance(timedelta(milliseconds=1))
    free_to_go = app.trigger(BOTH, {"customer": "initech"})
    assert drain(app, queues=["shared"]) == 0  # the queue is full: both wait for it
    assert [app.runs.get(r.id).slot_wait for r in (blocked, free_to_go)] == [SHARED] * 2

    succeed(app, busy)  # frees a slot of the queue
    assert app.engine.slot_waker.wake([SHARED]) == 1

    assert app.runs.get(blocked.id).slot_wait == key_scope(BOTH, "acme")
    assert app.runs.get(free_to_go.id).slot_wait is None
    assert drain(app, queues=["shared"]) == 1
    assert app.runs.get(free_to_go.id).status is RunStatus.SUCCEEDED
    assert app.runs.get(blocked.id).status is RunStatus.QUEUED
    assert held_key.lease is not None  # still held: the blocked run waits for it


def test_a_claim_that_cannot_use_a_free_slot_passes_it_on(backend: Backend) -> None:
    """A run whose claim finds its customer's slot held, while its queue has a free slot
    that a waiter needs (the worker that freed it stopped before waking anyone), wakes
    that waiter as it begins to wait."""
    app = backend.app(register=two_limits, queues=["shared"])
    claim_elsewhere(app, app.trigger(BOTH, {"customer": "acme"}).id, owner="dead")
    busy = claim_elsewhere(app, app.trigger(BOTH, {"customer": "globex"}).id)
    backend.clock.advance(timedelta(milliseconds=1))
    waiter = app.trigger(BOTH, {"customer": "initech"})
    assert drain(app, queues=["shared"]) == 0
    assert app.runs.get(waiter.id).slot_wait == SHARED
    succeed(app, busy)  # frees a queue slot; nobody is woken

    backend.clock.advance(timedelta(milliseconds=1))
    blocked = app.trigger(BOTH, {"customer": "acme"})
    assert drain(app, queues=["shared"]) == 1  # its claim waits, and passes the slot on

    assert app.runs.get(blocked.id).slot_wait == key_scope(BOTH, "acme")
    assert app.runs.get(waiter.id).status is RunStatus.SUCCEEDED
