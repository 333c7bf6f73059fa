"""Ordered runs on every backend, with time moved by hand: runs with the same ordering key
execute one at a time in trigger order; a run triggered behind unfinished ones waits for
its turn (not due, nothing published); the run holding the turn keeps it through retries,
releases and a dead worker's lease, and hands it on when it finishes; cancelling a waiting
run takes it out of the line; maintenance hands on a turn whose writer died first."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import EventType, InvalidKeyError, RetryPolicy, Runlane, RunStatus
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.core import machine
from runlane_sqs.core.model import Run
from runlane_sqs.core.ordering import TURN_CHECK_AFTER, OrderHead, order_scope
from runlane_sqs.engine.reports import JOB_EXPIRED, JOB_SLOTS
from tests.backends import ONLY_MEMORY, Backend
from tests.behaviour.worker_support import claim_elsewhere, drain, event_types
from tests.workers import WorkerKind

TASK = "ledger.post"
RETRY_SECONDS = 1000
"""Past SQS's longest delay: the retry's wakeup is maintenance's to publish when due."""


class Ledger:
    """A task that records the order its payloads ran in; payloads in ``failing`` fail
    their first attempt (and every attempt when ``fail_always``)."""

    def __init__(self, failing: set[int] | None = None, fail_always: bool = False) -> None:
        self.ran: list[tuple[str, int]] = []
        self.failing = failing or set()
        self.fail_always = fail_always
        self._lock = threading.Lock()

    def post(self, ctx: Any, payload: Any) -> Any:
        with self._lock:
            self.ran.append((payload["account"], payload["n"]))
        if payload["n"] in self.failing and (self.fail_always or ctx.attempt == 1):
            raise RuntimeError(f"posting {payload['n']} failed")
        return payload["n"]

    def register(self, app: Runlane) -> None:
        app.task(self.post, name=TASK, retry=RetryPolicy(max_attempts=2, delay=RETRY_SECONDS))

    def order(self, account: str) -> list[int]:
        return [n for a, n in self.ran if a == account]


def trigger(app: Runlane, account: str, n: int) -> Run:
    return app.trigger(TASK, {"account": account, "n": n}, ordering_key=account)


def test_runs_of_a_key_run_one_at_a_time_in_trigger_order(backend: Backend) -> None:
    ledger = Ledger()
    app = backend.app(register=ledger.register)
    runs = [trigger(app, "acct-1", n) for n in range(5)]
    assert [r.place for r in runs] == [0, 1, 2, 3, 4]
    assert runs[0].due_at is not None and not runs[0].turn_wait
    for run in runs[1:]:  # behind an unfinished run: not due, no wakeup sent
        stored = app.runs.get(run.id)
        assert stored.turn_wait and stored.due_at is None and stored.status is RunStatus.QUEUED
    assert backend.depth(app) == 1
    assert drain(app, concurrency=4) == 5  # each run's end wakes the next
    assert ledger.order("acct-1") == [0, 1, 2, 3, 4]
    assert all(app.runs.get(r.id).status is RunStatus.SUCCEEDED for r in runs)
    assert event_types(app, runs[1].id) == [
        EventType.TRIGGERED,
        EventType.TURN_REACHED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]
    first_event = app.runs.events(runs[3].id)[0]
    assert first_event.data["ordering_key"] == "acct-1" and first_event.data["place"] == 3
    assert first_event.data["behind"] == 3
    assert app.store.orders.first_place("acct-1") is None  # the line is empty


def test_both_workers_hand_the_turn_on(backend: Backend, worker_kind: WorkerKind) -> None:
    ledger = Ledger()
    app = backend.app(register=ledger.register)
    runs = [trigger(app, "acct-1", n) for n in range(3)]
    assert worker_kind.drain(app, concurrency=4) == 3
    assert ledger.order("acct-1") == [0, 1, 2]
    assert all(app.runs.get(r.id).status is RunStatus.SUCCEEDED for r in runs)


def test_a_retried_run_holds_its_keys_later_runs_until_it_finishes(backend: Backend) -> None:
    ledger = Ledger(failing={1})
    app = backend.app(register=ledger.register)
    runs = [trigger(app, "acct-1", n) for n in range(4)]
    other = trigger(app, "acct-2", 0)
    assert drain(app, concurrency=4) == 3  # 0 succeeds, 1 fails once, acct-2 runs
    retrying = app.runs.get(runs[1].id)
    assert retrying.status is RunStatus.RETRYING and not retrying.turn_wait
    assert [app.runs.get(r.id).turn_wait for r in runs[2:]] == [True, True]
    assert app.runs.get(other.id).status is RunStatus.SUCCEEDED
    backend.clock.advance(timedelta(seconds=RETRY_SECONDS + 1))
    app.maintenance.run_pass()  # publishes the retry's wakeup, nothing for 2 and 3
    assert drain(app, concurrency=4) == 3
    assert ledger.order("acct-1") == [0, 1, 1, 2, 3]
    assert [app.runs.get(r.id).status for r in runs] == [RunStatus.SUCCEEDED] * 4


def test_a_run_that_fails_for_good_hands_the_turn_on(backend: Backend) -> None:
    ledger = Ledger(failing={0}, fail_always=True)
    app = backend.app(register=ledger.register)
    runs = [trigger(app, "acct-1", n) for n in range(2)]
    drain(app)
    backend.clock.advance(timedelta(seconds=RETRY_SECONDS + 1))
    app.maintenance.run_pass()
    assert drain(app) == 2  # the last attempt of 0 fails, then 1 runs
    assert app.runs.get(runs[0].id).status is RunStatus.FAILED
    assert app.runs.get(runs[1].id).status is RunStatus.SUCCEEDED
    assert ledger.order("acct-1") == [0, 0, 1]


def test_cancelling_a_waiting_run_takes_it_out_of_the_line(backend: Backend) -> None:
    ledger = Ledger()
    app = backend.app(register=ledger.register)
    runs = [trigger(app, "acct-1", n) for n in range(3)]
    held = claim_elsewhere(app, runs[0].id)
    cancelled = app.runs.cancel(runs[1].id, reason="posted by hand")
    assert cancelled.status is RunStatus.CANCELLED  # at once: it held no lease
    assert app.store.orders.first_place("acct-1") == (0, runs[0].id)
    assert held.lease is not None
    app.store.apply(  # the other worker's attempt succeeds (through its app's finisher)
        machine.record_success(held, token=held.lease.token, result=0, now=app.clock.now())
    )
    app.engine.finisher.after_finished(app.runs.get(runs[0].id))
    assert drain(app) == 1
    assert ledger.order("acct-1") == [2]
    assert app.runs.get(runs[2].id).status is RunStatus.SUCCEEDED


def test_cancelling_the_run_holding_the_turn_wakes_the_next(backend: Backend) -> None:
    def wait(ctx: Any, payload: Any) -> Any:
        if payload["n"] == 0:
            ctx.wait_for_signal("approved")
        return payload["n"]

    app = backend.app(register=lambda a: a.task(wait, name=TASK))
    runs = [trigger(app, "acct-1", n) for n in range(2)]
    assert drain(app) == 1
    assert app.runs.get(runs[0].id).status is RunStatus.RELEASED  # waiting, holding the turn
    assert app.runs.get(runs[1].id).turn_wait
    app.runs.cancel(runs[0].id)
    assert drain(app) == 1
    assert app.runs.get(runs[1].id).status is RunStatus.SUCCEEDED


def test_a_dead_workers_run_keeps_the_turn_through_its_recovery(backend: Backend) -> None:
    ledger = Ledger()
    app = backend.app(register=ledger.register)
    runs = [trigger(app, "acct-1", n) for n in range(2)]
    claim_elsewhere(app, runs[0].id, owner="worker-killed")
    assert drain(app) == 0  # the second waits for its turn, nothing to receive
    backend.clock.advance(app.config.lease_duration + timedelta(seconds=1))
    assert app.maintenance.run_pass().jobs[JOB_EXPIRED].acted == 1
    assert app.runs.get(runs[1].id).turn_wait  # the recovered run still holds the turn
    assert drain(app) == 2
    assert ledger.order("acct-1") == [0, 1]


def test_maintenance_hands_on_a_turn_whose_writer_died(backend: Backend) -> None:
    """A run's end was written but its writer died before waking the next run: the order
    record listed by that write is checked by maintenance once it is due."""
    ledger = Ledger()
    app = backend.app(register=ledger.register)
    runs = [trigger(app, "acct-1", n) for n in range(2)]
    held = claim_elsewhere(app, runs[0].id)
    assert held.lease is not None
    app.store.apply(
        machine.record_success(held, token=held.lease.token, result=0, now=app.clock.now())
    )  # ... and nothing after it
    assert not any(o.scope.startswith("order#") for o in app.queues.list())  # not a limit
    assert app.maintenance.run_pass().jobs[JOB_SLOTS].acted == 0  # not due yet
    assert app.runs.get(runs[1].id).turn_wait
    backend.clock.advance(TURN_CHECK_AFTER)
    report = app.maintenance.run_pass()
    assert report.jobs[JOB_SLOTS].acted == 1
    assert not app.runs.get(runs[1].id).turn_wait
    assert drain(app) == 1
    assert app.runs.get(runs[1].id).status is RunStatus.SUCCEEDED
    assert app.maintenance.run_pass().jobs[JOB_SLOTS].examined == 0  # taken off the agenda


@ONLY_MEMORY
def test_an_order_record_taken_off_the_agenda_after_its_listing_was_read_is_passed_over(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another maintenance pass handed the turn on (and took the record off the agenda)
    between this pass's read of the agenda and its read of the record: the pass moves on,
    where it stopped on an assertion (the simulation, `make simulate SEED=24 ARGS="--runs
    300"`: two maintenance processes at once)."""
    ledger = Ledger()
    app = backend.app(register=ledger.register)
    trigger(app, "acct-1", 0)
    assert drain(app) == 1  # its end lists the order record for maintenance's check
    backend.clock.advance(TURN_CHECK_AFTER)
    client = app.store.dynamodb  # type: ignore[attr-defined]
    read = client.batch_get_item
    record = keys.slot_key(app.config.environment, order_scope("acct-1"))

    def read_after_another_pass(**request: Any) -> Any:
        if record in next(iter(request["RequestItems"].values()))["Keys"]:
            client.update_item(
                TableName=app.config.table,
                Key=record,
                UpdateExpression="REMOVE agenda_at, agenda_pk",
            )
        return read(**request)

    monkeypatch.setattr(client, "batch_get_item", read_after_another_pass)
    report = app.maintenance.run_pass()
    assert (report.jobs[JOB_SLOTS].examined, report.jobs[JOB_SLOTS].skipped) == (1, 1)


def test_a_rerun_joins_the_end_of_its_keys_line(backend: Backend) -> None:
    ledger = Ledger()
    app = backend.app(register=ledger.register)
    first = trigger(app, "acct-1", 0)
    drain(app)
    later = trigger(app, "acct-1", 1)
    held = claim_elsewhere(app, later.id)
    rerun = app.runs.rerun(first.id)
    stored = app.runs.get(rerun.id)
    assert stored.ordering_key == "acct-1" and stored.place == 2 and stored.turn_wait
    assert held.lease is not None
    app.store.apply(
        machine.record_success(held, token=held.lease.token, result=1, now=app.clock.now())
    )
    app.engine.finisher.after_finished(app.runs.get(later.id))
    assert drain(app) == 1
    assert app.runs.get(rerun.id).status is RunStatus.SUCCEEDED


def test_concurrent_triggers_of_one_key_take_distinct_places(backend: Backend) -> None:
    ledger = Ledger()
    app = backend.app(register=ledger.register)
    placed: list[int] = []
    lock = threading.Lock()

    def triggers(start: int) -> None:
        for n in range(start, start + 5):
            run = trigger(app, "acct-1", n)
            with lock:
                placed.append(run.place)  # type: ignore[arg-type]

    threads = [threading.Thread(target=triggers, args=(i * 5,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(placed) == list(range(20))
    assert drain(app, concurrency=8) == 20
    by_place = sorted(app.runs.list(limit=50).runs, key=lambda run: run.place or 0)
    assert ledger.order("acct-1") == [run.payload["n"] for run in by_place]


def test_a_duplicate_trigger_returns_the_run_and_takes_no_place(backend: Backend) -> None:
    app = backend.app(register=Ledger().register)
    payload = {"account": "acct-1", "n": 0}
    first = app.trigger(TASK, payload, ordering_key="acct-1", idempotency_key="entry-0")
    again = app.trigger(TASK, payload, ordering_key="acct-1", idempotency_key="entry-0")
    assert not again.created and again.id == first.id
    assert app.store.orders.order_head("acct-1") == OrderHead(next_place=1, unfinished=1)
    assert trigger(app, "acct-1", 1).place == 1


def test_environments_have_lines_of_their_own(backend: Backend) -> None:
    ledger = Ledger()
    prod = backend.app(register=ledger.register, environment="prod")
    staging = backend.app(register=ledger.register, environment="staging")
    claim_elsewhere(prod, trigger(prod, "acct-1", 0).id)
    run = trigger(staging, "acct-1", 1)
    assert run.place == 0 and not run.turn_wait
    assert prod.store.orders.order_head("acct-1").unfinished == 1


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("a" * 201, "200"),
        ("acct\x00-1", "control"),
        ("acct\u202e-1", "format"),
        (17, "string"),
    ],
)
def test_a_bad_ordering_key_is_refused_and_nothing_is_written(
    backend: Backend, key: Any, message: str
) -> None:
    ledger = Ledger()
    app = backend.app(register=ledger.register)
    with pytest.raises(InvalidKeyError, match=message):
        app.trigger(TASK, {"account": "a", "n": 0}, ordering_key=key)
    assert app.runs.list().runs == []


def test_an_ordered_run_cannot_have_a_delay(backend: Backend) -> None:
    app = backend.app(register=Ledger().register)
    with pytest.raises(InvalidKeyError, match="delay"):
        app.trigger(TASK, {"account": "a", "n": 0}, ordering_key="a", delay=30)
    assert app.runs.list().runs == []
    assert order_scope("a") == "order#a"
