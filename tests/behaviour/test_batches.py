"""Batches with time moved by hand (docs/batches.md): triggers of a key add their items
to one run, which starts when it holds ``size`` items or ``max_age`` after its first,
and receives the list; every trigger learns which run carries its item and where; a
run that started takes no more items; bad input is refused before anything is written."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import (
    Batch,
    ConfigurationError,
    ConflictError,
    Debounce,
    EventType,
    InvalidKeyError,
    PayloadTooLarge,
    Runlane,
    RunStatus,
    TaskContext,
)
from runlane_sqs.codecs import Gzip
from runlane_sqs.core import machine
from runlane_sqs.core.batches import Append
from runlane_sqs.core.debounce import TASK_WIDE_KEY
from tests.backends import ONLY_AWS, ONLY_MEMORY, Backend
from tests.emulators import count_requests
from tests.workers import WorkerKind

SEND = "mail.send_batch"
"""Batches of 3 per tenant, at most 10 s old."""
INDEX = "search.index_batch"
"""One task-wide batch of up to 100 items or 60 bytes, at most a minute old."""
BUCKET = "runlane-batch-values"


def register(app: Runlane) -> None:
    @app.task(name=SEND, batch=Batch(size=3, max_age=10, key=lambda p: p["tenant"]))
    def send(ctx: TaskContext, items: list[Any]) -> Any:
        return [item["n"] for item in items]

    @app.task(name=INDEX, batch=Batch(size=100, max_age=60, max_bytes=60))
    def index(ctx: TaskContext, items: list[Any]) -> Any:
        return len(items)


@pytest.fixture
def app(backend: Backend) -> Runlane:
    return backend.app(register=register)


def item(tenant: str, n: int) -> dict[str, Any]:
    return {"tenant": tenant, "n": n}


def test_items_gather_in_one_run_in_the_order_they_were_added(
    backend: Backend, app: Runlane
) -> None:
    t0 = backend.clock.now()
    runs = [app.trigger(SEND, item("acme", n)) for n in range(2)]
    other = app.trigger(SEND, item("globex", 0))

    assert runs[0].id == runs[1].id != other.id
    assert [r.created for r in runs] == [True, False] and other.created
    assert [r.item for r in runs] == [0, 1] and other.item == 0
    stored = app.runs.get(runs[0].id)
    assert stored.payload == [item("acme", 0), item("acme", 1)]
    assert (stored.batch_key, stored.collapsed, stored.status) == ("acme", 1, RunStatus.QUEUED)
    assert stored.due_at == t0 + timedelta(seconds=10)  # not full: due at its age
    events = app.runs.events(stored.id)
    assert [e.type for e in events] == [EventType.TRIGGERED]  # an item appends no event
    assert events[0].data["batch_key"] == "acme"


def test_a_full_batch_is_due_at_once_and_the_next_item_starts_another(
    backend: Backend, app: Runlane
) -> None:
    t0 = backend.clock.now()
    runs = [app.trigger(SEND, item("acme", n)) for n in range(7)]

    ids = [r.id for r in runs]
    assert ids[0:3] == [ids[0]] * 3 and ids[3:6] == [ids[3]] * 3 and ids[6] not in ids[:6]
    assert [r.item for r in runs] == [0, 1, 2, 0, 1, 2, 0]
    full, second, last = (app.runs.get(ids[i]) for i in (0, 3, 6))
    assert full.payload == [item("acme", n) for n in range(3)] and full.due_at == t0
    assert second.due_at == t0 and len(second.payload) == 3
    assert last.payload == [item("acme", 6)] and last.due_at == t0 + timedelta(seconds=10)


def test_a_task_wide_batch_closes_when_its_bytes_are_used(backend: Backend, app: Runlane) -> None:
    """60 bytes: two items of 25 bytes fit, the third starts a new batch and the full
    one is due at once."""
    t0 = backend.clock.now()
    runs = [app.trigger(INDEX, {"doc": f"document-{n:05d}"}) for n in range(3)]
    assert runs[0].id == runs[1].id != runs[2].id
    first = app.runs.get(runs[0].id)
    assert (first.batch_key, len(first.payload), first.due_at) == (TASK_WIDE_KEY, 2, t0)


@ONLY_MEMORY
def test_each_batch_runs_once_with_its_items_and_each_trigger_sees_how_it_ended(
    backend: Backend, app: Runlane, worker_kind: WorkerKind
) -> None:
    """In memory, where SQS's delays follow the test's clock: the full batch runs at
    once, the partial one at its age."""
    runs = [app.trigger(SEND, item("acme", n)) for n in range(4)]

    assert worker_kind.drain(app) == 1  # the full batch; the other is 10 s from due
    backend.clock.advance(10)
    assert worker_kind.drain(app) == 1
    assert worker_kind.drain(app) == 0

    outcomes = [app.runs.get(r.id) for r in runs]
    assert [(o.status, o.attempt) for o in outcomes] == [(RunStatus.SUCCEEDED, 1)] * 4
    assert [o.result[r.item] for o, r in zip(outcomes, runs, strict=True)] == [0, 1, 2, 3]


@ONLY_MEMORY
def test_a_run_that_started_takes_no_more_items(
    backend: Backend, app: Runlane, worker_kind: WorkerKind
) -> None:
    first = app.trigger(SEND, item("acme", 0))
    backend.clock.advance(10)
    assert worker_kind.drain(app) == 1
    second = app.trigger(SEND, item("acme", 1))
    assert second.created and second.id != first.id and second.item == 0
    assert app.runs.get(first.id).result == [0]


def test_a_cancelled_batch_hands_its_key_to_a_new_run(backend: Backend, app: Runlane) -> None:
    first = app.trigger(SEND, item("acme", 0))
    app.runs.cancel(first.id)
    second = app.trigger(SEND, item("acme", 1))
    assert second.created and second.id != first.id
    assert app.runs.get(first.id).payload == [item("acme", 0)]


def test_a_claim_decided_on_a_read_is_refused_after_an_item_is_added(
    backend: Backend, app: Runlane
) -> None:
    run = app.trigger(SEND, item("acme", 0))
    backend.clock.advance(10)
    store = app.engine.store
    read = store.get_run(run.id)
    assert read is not None
    store.append_item(
        Append(run.id, "acme", '{"n":1,"tenant":"acme"}', 3, 1024, backend.clock.now())
    )
    claim = machine.claim_lease(
        read, now=backend.clock.now(), owner="w", token="t", duration=timedelta(minutes=1)
    )
    assert isinstance(claim, machine.Transition)
    with pytest.raises(ConflictError):
        store.apply(claim)
    assert len(app.runs.get(run.id).payload) == 2


@ONLY_MEMORY
def test_items_under_a_codec_are_opened_for_the_handler(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    app = backend.app(register=register, codec=Gzip())
    runs = [app.trigger(SEND, item("acme", n)) for n in range(3)]
    assert worker_kind.drain(app) == 1
    done = app.runs.get(runs[0].id)
    assert (done.result, done.payload) == ([0, 1, 2], [item("acme", n) for n in range(3)])


@ONLY_MEMORY
@pytest.mark.parametrize("codec", [None, Gzip()], ids=["plain", "gzip"])
def test_a_rerun_of_a_batch_runs_its_items_again(
    backend: Backend, worker_kind: WorkerKind, codec: Any
) -> None:
    app = backend.app(register=register, codec=codec)
    first, *_ = [app.trigger(SEND, item("acme", n)) for n in range(3)]
    assert worker_kind.drain(app) == 1
    again = app.runs.rerun(first.id)
    assert worker_kind.drain(app) == 1
    rerun = app.runs.get(again.id)
    assert (rerun.status, rerun.result, rerun.batch_key) == (RunStatus.SUCCEEDED, [0, 1, 2], None)


@pytest.mark.parametrize(
    ("trigger", "message"),
    [
        (lambda app: app.trigger(SEND, item("a", 0), delay=5), "cannot also have delay"),
        (
            lambda app: app.trigger(SEND, item("a", 0), singleton_key="s"),
            "cannot also have singleton_key",
        ),
        (lambda app: app.trigger(SEND, {"n": 0}), "raised KeyError"),
        (lambda app: app.trigger(SEND, item("a\x1b[2J", 0)), "U\\+001B"),
        (lambda app: app.trigger(SEND, item("a", 0), batch_key=""), "must not be empty"),
        (lambda app: app.trigger(INDEX, {"doc": "x" * 80}), "max_bytes bounds its items"),
    ],
)
def test_bad_triggers_are_refused_before_anything_is_written(
    backend: Backend, app: Runlane, trigger: Any, message: str
) -> None:
    with pytest.raises((InvalidKeyError, PayloadTooLarge), match=message):
        trigger(app)
    assert app.runs.list().runs == []


def test_a_batch_key_on_a_task_without_a_batch_is_refused(backend: Backend) -> None:
    app = backend.app()
    app.task(name="plain.task")(lambda ctx, p: p)
    with pytest.raises(InvalidKeyError, match="has no batch"):
        app.trigger("plain.task", {}, batch_key="k")


def test_a_transaction_refuses_a_batched_trigger(backend: Backend, app: Runlane) -> None:
    with pytest.raises(InvalidKeyError, match="not a transaction"):
        app.transaction().trigger(SEND, item("acme", 0))


def test_an_item_for_the_bucket_is_refused(backend: Backend) -> None:
    app = backend.app(register=register, payload_bucket=BUCKET, inline_limit=1024)
    with pytest.raises(PayloadTooLarge, match="stays in the run's item"):
        app.trigger(SEND, {"tenant": "a", "n": 0, "text": "x" * 2000})
    assert app.runs.list().runs == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"batch": Batch(size=1, max_age=5)}, "size is a whole number from 2"),
        ({"batch": Batch(size=1001, max_age=5)}, "size is a whole number from 2"),
        ({"batch": Batch(size=10, max_age=0.5)}, "max_age is from 1 second"),
        ({"batch": Batch(size=10, max_age=5, max_bytes=0)}, "max_bytes is from 1"),
        ({"batch": Batch(size=10, max_age=5, key="tenant")}, "batch key is not callable"),  # type: ignore[arg-type]
        ({"batch": 10}, "is a Batch"),
        (
            {"batch": Batch(size=10, max_age=5), "debounce": Debounce(quiet=1)},
            "debounced or batched, not both",
        ),
    ],
)
def test_bad_batch_settings_are_refused_at_registration(
    backend: Backend, options: dict[str, Any], message: str
) -> None:
    app = backend.app()
    with pytest.raises(ConfigurationError, match=message):
        app.task(name="bad.batch", **options)(lambda ctx, p: p)


@ONLY_AWS
def test_an_item_costs_a_read_of_the_key_and_one_write(backend: Backend, app: Runlane) -> None:
    """What docs/batches.md says an item costs, counted on the emulators: the one that
    fills the batch makes it due and sends its wakeup too."""
    app.trigger(SEND, item("warm-up", 0))  # the queue's URL, looked up once
    dynamodb, sqs = count_requests(app.client("dynamodb")), count_requests(app.client("sqs"))
    app.trigger(SEND, item("acme", 0))
    assert (dict(dynamodb), dict(sqs)) == (
        {"GetItem": 1, "TransactWriteItems": 1},
        {"SendMessage": 1},
    )
    dynamodb.clear()
    sqs.clear()
    app.trigger(SEND, item("acme", 1))
    assert (dict(dynamodb), dict(sqs)) == ({"GetItem": 1, "UpdateItem": 1}, {})
    dynamodb.clear()
    app.trigger(SEND, item("acme", 2))  # fills it
    assert (dict(dynamodb), dict(sqs)) == (
        {"GetItem": 1, "UpdateItem": 2},
        {"SendMessage": 1},
    )
