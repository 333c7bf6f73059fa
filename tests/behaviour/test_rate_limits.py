"""Rate limits with time moved by hand (docs/rate-limits.md): a claim early for
its limits keeps its place and sleeps until its start, with no attempt or retry used;
runs start in the order their claims reserved, spaced by the limit, the first a lead
after it was claimed; a per-key limit counts each key apart."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from runlane_sqs import (
    EventType,
    InvalidKeyError,
    RateLimit,
    Run,
    Runlane,
    RunStatus,
    TaskContext,
)
from runlane_sqs.core import machine
from runlane_sqs.core.rates import CLAIM_LEAD, key_rate_scope, queue_rate_scope, to_epoch_us
from runlane_sqs.core.slots import queue_scope
from runlane_sqs.engine.reports import JOB_RATES
from tests.backends import ONLY_MEMORY, Backend
from tests.behaviour.worker_support import claim_elsewhere, drain, second_app
from tests.workers import WorkerKind

TASK = "partner.call"
KEYED = "tenant.call"
STEP = timedelta(milliseconds=525)
"""2 a second: spaced (1 s + 50 ms grace) / 2 apart (docs/rate-limits.md, "How exact")."""
FAST = "partner.ping"
FASTEST = "partner.poll"


def register(app: Runlane) -> None:
    @app.task(name=TASK, rate_limits=[RateLimit(2, per=1)])
    def call(ctx: TaskContext, payload: Any) -> Any:
        return payload

    @app.task(name=FAST, rate_limits=[RateLimit(10, per=1)])
    def ping(ctx: TaskContext, payload: Any) -> Any:
        return payload

    @app.task(name=FASTEST, rate_limits=[RateLimit(1000, per=1)])
    def poll(ctx: TaskContext, payload: Any) -> Any:
        return payload

    @app.task(
        name=KEYED,
        concurrency_key=lambda p: p["tenant"],
        rate_limits=[RateLimit(1, per=1, per_key=True)],
    )
    def keyed(ctx: TaskContext, payload: Any) -> Any:
        return payload


@ONLY_MEMORY
def test_runs_beyond_the_rate_sleep_until_their_reserved_start_in_order(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    """In memory, where SQS's delays and the worker's short waits follow the test's
    clock: the drain starts one run, the others reserve their starts, and each starts at
    its reserved start (its wakeup comes at the whole second before it, the worker holds it until
    then). Every start is reserved a lead ahead, room for the claim's write."""
    app = backend.app(register=register)
    t0 = backend.clock.now()
    runs = [app.trigger(TASK, n) for n in range(4)]

    assert worker_kind.drain(app) == 4

    done = [app.runs.get(r.id) for r in runs]
    assert all((r.status, r.attempt, r.failures) == (RunStatus.SUCCEEDED, 1, 0) for r in done)
    started = sorted(
        next(e.at for e in app.runs.events(r.id) if e.type is EventType.STARTED) for r in runs
    )
    assert [at - t0 - CLAIM_LEAD for at in started] == [timedelta(0), STEP, 2 * STEP, 3 * STEP]
    waited = [r for r in runs if EventType.WAITING_FOR_RATE in _types(app, r.id)]
    assert len(waited) == 3  # refused once each, none twice


@ONLY_MEMORY
def test_a_start_a_moment_ahead_is_waited_for_without_sleeping(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    """10 a second: each run's reserved start is 105 ms after the one before, within
    ``SHORT_WAIT`` of its claim: the worker claims it at once and waits for the start on
    the attempt's thread instead of writing the run to sleep and publishing a wakeup."""
    app = backend.app(register=register)
    t0 = backend.clock.now()
    runs = [app.trigger(FAST, n) for n in range(3)]

    assert worker_kind.drain(app) == 3

    started = sorted(_started(app, r.id) - t0 - CLAIM_LEAD for r in runs)
    assert started == [timedelta(0), timedelta(milliseconds=105), timedelta(milliseconds=210)]
    assert not any(EventType.WAITING_FOR_RATE in _types(app, r.id) for r in runs)


def _types(app: Runlane, run_id: str) -> list[EventType]:
    return [e.type for e in app.runs.events(run_id)]


@ONLY_MEMORY
def test_a_per_key_limit_counts_each_key_apart(backend: Backend, worker_kind: WorkerKind) -> None:
    """One start a second per tenant: the second run of ``acme`` waits for its reserved start (the
    drain holds its message until then), ``globex``'s starts a lead after it is claimed (the
    drain's one thread claims it once the first run of ``acme`` has started)."""
    app = backend.app(register=register)
    t0 = backend.clock.now()
    acme = [app.trigger(KEYED, {"tenant": "acme", "n": n}) for n in range(2)]
    globex = app.trigger(KEYED, {"tenant": "globex"})

    assert worker_kind.drain(app) == 3

    started = {r.id: _started(app, r.id) - t0 - CLAIM_LEAD for r in [*acme, globex]}
    assert sorted(started[r.id] for r in acme) == [timedelta(0), timedelta(milliseconds=1050)]
    assert started[globex.id] == CLAIM_LEAD
    assert sum(EventType.WAITING_FOR_RATE in _types(app, r.id) for r in acme) == 1
    assert EventType.WAITING_FOR_RATE not in _types(app, globex.id)


def _started(app: Runlane, run_id: str) -> datetime:
    return next(e.at for e in app.runs.events(run_id) if e.type is EventType.STARTED)


SHARED_QUEUE = "shared"
PLAIN = "shared.plain"
RATED = "shared.rated"


def shared_queue(app: Runlane) -> None:
    """A queue of one slot, shared by a task without a rate limit and one with one."""
    shared = app.queue(SHARED_QUEUE, concurrency_limit=1)
    app.task(lambda ctx, payload: payload, name=PLAIN, queue=shared)
    app.task(
        lambda ctx, payload: payload,
        name=RATED,
        queue=shared,
        rate_limits=[RateLimit(1, per=1)],
    )


@ONLY_MEMORY
def test_a_claim_that_sleeps_for_its_rate_limit_passes_free_slots_on(backend: Backend) -> None:
    """The queue's one slot is free and a run of the other task waits for it (the worker
    that freed it stopped before waking anyone); a rated run whose reserved start is a
    second ahead does not take the slot: it wakes that waiter as it goes to sleep, so the
    slot is not left unused while it sleeps."""
    app = backend.app(register=shared_queue, queues=[SHARED_QUEUE])
    busy = claim_elsewhere(app, app.trigger(PLAIN, "busy").id)
    waiter = app.trigger(PLAIN, "waiter")
    assert drain(app, queues=[SHARED_QUEUE]) == 0
    assert app.runs.get(waiter.id).slot_wait == queue_scope(SHARED_QUEUE)
    assert busy.lease is not None
    done = machine.record_success(busy, token=busy.lease.token, result=None, now=app.clock.now())
    app.store.apply(done)  # frees the slot; nobody is woken
    rated = app.trigger(RATED, "rated")
    scope = app.tasks.rates_for(app.runs.get(rated.id))[0]
    now_us = to_epoch_us(backend.clock.now())
    app.engine.store.rates.reserve(scope, cost=1, not_before_us=now_us)  # another's start

    assert drain(app, queues=[SHARED_QUEUE]) == 2  # the waiter, then the rated run

    assert app.runs.get(waiter.id).status is RunStatus.SUCCEEDED
    assert _started(app, waiter.id) < _started(app, rated.id)
    assert EventType.WAITING_FOR_RATE in _types(app, rated.id)


LISTED = "listed.call"
KEYED_LIMIT = RateLimit(2, per=1, per_key=True)


def listed(app: Runlane) -> None:
    """A queue with a rate limit (5 a second, a burst of 1) and a task on it with a
    per-key limit."""
    partner = app.queue("partner", rate_limit=RateLimit(5, per=1, burst=1))
    app.task(
        lambda ctx, payload: payload,
        name=LISTED,
        queue=partner,
        concurrency_key=lambda p: p["tenant"],
        rate_limits=[KEYED_LIMIT],
    )


def test_operators_see_each_rate_limits_next_start_and_reservations(backend: Backend) -> None:
    """``app.queues.rates()``: the app's queue limit, and a per-key one for the keys
    asked for and those with a record; an idle scope may start ``1 + burst`` at once, a
    busy one says when its next start is and how many starts are reserved ahead."""
    app = backend.app(register=listed)
    now = backend.clock.now()
    queue_scope_ = queue_rate_scope("partner")
    idle = {s.scope: s for s in app.queues.rates(keys=["acme"])}
    assert set(idle) == {queue_scope_, key_rate_scope(LISTED, 1_000_000, "acme")}
    assert (idle[queue_scope_].next_start, idle[queue_scope_].available) == (None, 2)

    rate = RateLimit(5, per=1, burst=1).rate_in(queue_scope_)
    for _ in range(4):  # four claims reserve now: two start at once, two wait
        app.engine.store.rates.reserve(rate, cost=1, not_before_us=to_epoch_us(now))

    busy = {s.scope: s for s in app.queues.rates()}
    state = busy[queue_scope_]
    assert (state.available, state.reserved_ahead, state.stored_matches) == (0, 4, True)
    assert state.next_start == now + 3 * timedelta(microseconds=rate.interval_us)
    assert list(busy) == [queue_scope_]  # no key asked for, none with a record yet
    assert state.to_json()["rate"] == 5 and state.to_json()["burst"] == 1

    keyed = RateLimit(1, per=1, per_key=True)
    for tenant in ("globex", "initech"):  # a claim of each reserves in its key's scope
        scope = key_rate_scope(LISTED, 1_000_000, tenant)
        app.engine.store.rates.reserve(keyed.rate_in(scope), cost=1, not_before_us=0)
    listed_now = [s.scope for s in app.queues.rates()]
    assert listed_now == [
        queue_scope_,
        key_rate_scope(LISTED, 1_000_000, "globex"),
        key_rate_scope(LISTED, 1_000_000, "initech"),
    ]  # every key with a record, found without asking


def test_a_bad_key_asked_for_is_refused(backend: Backend) -> None:
    app = backend.app(register=listed)
    with pytest.raises(InvalidKeyError):
        app.queues.rates(keys=["bad\x00key"])


@ONLY_MEMORY
def test_a_reservation_slower_than_the_lead_and_the_grace_is_made_again_ahead(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    """The first reservation takes 200 ms (a loaded store): the start it reserved, a lead
    of 100 ms ahead, is more than the 50 ms grace past when it returns, so the worker's
    lead grows to twice that (400 ms) and its claim reserves again that lead ahead of
    then (that reservation takes 10 ms): the run starts at that second start, on time."""
    app = backend.app(register=register)
    store = app.engine.store.rates
    reserve = store.reserve
    took = [timedelta(milliseconds=200), timedelta(milliseconds=10)]

    def slow(*args: Any, **options: Any) -> int:
        start = reserve(*args, **options)
        backend.clock.advance(took.pop(0))
        return start

    store.reserve = slow  # type: ignore[method-assign]
    t0 = backend.clock.now()
    run = app.trigger(FASTEST, "late")

    assert worker_kind.drain(app) == 1

    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED
    assert _started(app, run.id) - t0 == timedelta(milliseconds=200 + 400)
    assert not took


SLOW = "partner.sync"
"""One start a minute: a run beyond it sleeps past what a worker holds a message for."""


def slow(limit: RateLimit | None) -> Callable[[Runlane], None]:
    def register_slow(app: Runlane) -> None:
        keyed = limit is not None and limit.per_key
        app.task(
            lambda ctx, payload: payload,
            name=SLOW,
            concurrency_key=(lambda p: p["tenant"]) if keyed else None,
            rate_limits=[limit] if limit else [],
        )

    return register_slow


def _sleeping(backend: Backend, limit: RateLimit) -> tuple[Runlane, list[Run]]:
    """Four runs under ``limit`` (about one a minute): one starts, three sleep for their
    reserved starts a minute apart; a maintenance pass has seen the limit."""
    app = backend.app(register=slow(limit))
    runs = [app.trigger(SLOW, {"tenant": "acme", "n": n}) for n in range(4)]
    assert drain(app) == 1
    asleep = [app.runs.get(r.id) for r in runs[1:]]
    assert all(r.rate_start is not None for r in asleep)
    assert app.maintenance.run_pass().jobs[JOB_RATES].acted == 0  # the limits are kept
    return app, asleep


@pytest.mark.parametrize(
    ("limit", "raised"),
    [
        (RateLimit(1, per=60), RateLimit(100, per=1)),
        (RateLimit(1, per=60, per_key=True), RateLimit(100, per=1, per_key=True)),
        (RateLimit(1, per=60), None),
    ],
    ids=["raised", "raised-per-key", "removed"],
)
def test_a_deploy_that_raises_or_removes_a_limit_takes_effect_within_one_pass(
    backend: Backend, limit: RateLimit, raised: RateLimit | None
) -> None:
    app, asleep = _sleeping(backend, limit)

    deployed = second_app(backend, app, slow(raised))
    report = deployed.maintenance.run_pass()

    assert report.jobs[JOB_RATES].acted == 3
    now = backend.clock.now()
    for run in asleep:
        woken = app.runs.get(run.id)
        assert (woken.rate_start, woken.due_at, woken.attempt) == (None, now, 0)
        assert _types(app, run.id)[-1] is EventType.RATE_LIMIT_CHANGED
    assert drain(deployed) == 3
    starts = [_started(app, r.id) for r in asleep]
    assert max(starts) - now < timedelta(seconds=1)  # not a minute apart any more
    assert deployed.maintenance.run_pass().jobs[JOB_RATES].acted == 0


def test_a_deploy_that_lowers_a_limit_leaves_reserved_starts_alone(backend: Backend) -> None:
    """Two starts every two minutes become one: the starts reserved stand (a new limit
    with another ``per`` is another limit: the old one is removed)."""
    app, asleep = _sleeping(backend, RateLimit(2, per=120))
    deployed = second_app(backend, app, slow(RateLimit(1, per=120)))
    assert deployed.maintenance.run_pass().jobs[JOB_RATES].acted == 0
    assert [app.runs.get(r.id).rate_start for r in asleep] == [r.rate_start for r in asleep]


def test_an_app_that_does_not_register_the_task_changes_nothing(backend: Backend) -> None:
    """A second app in the environment (another service's maintenance) says nothing about
    a limit of a task it does not register: the limit stays as the first app set it."""
    app, asleep = _sleeping(backend, RateLimit(1, per=60))
    other = second_app(backend, app, lambda new: new.task(lambda ctx, p: p, name="other.task"))
    assert other.maintenance.run_pass().jobs[JOB_RATES].acted == 0
    assert all(app.runs.get(r.id).rate_start == r.rate_start for r in asleep)
    assert app.maintenance.run_pass().jobs[JOB_RATES].acted == 0
