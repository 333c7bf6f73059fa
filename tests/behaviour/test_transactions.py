"""Triggers that commit with the caller's own writes (docs/transactions.md), on the moto
server and on DynamoDB Local: the run exists if and only if the caller's writes commit;
a failed condition, a held key or an exception in the block leaves neither; DynamoDB's
limits are checked before anything is sent; the caller is told why in words.

Every test needs a table of the caller's own next to the run table, so they run on the
emulators only (the in-memory store refuses transactions, tested last)."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest

from runlane_sqs import (
    InvalidKeyError,
    InvalidTransaction,
    MissingResourceError,
    Runlane,
    RunStatus,
    TaskContext,
    TransactionCancelled,
    UnknownTaskError,
)
from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.core.model import KeyKind, new_run_id
from runlane_sqs.testing import InMemoryRunStore, in_memory_app
from tests.backends import ONLY_AWS, Backend
from tests.workers import WorkerKind

SHIP = "orders.ship"


def register(app: Runlane) -> None:
    @app.task(name=SHIP)
    def ship(ctx: TaskContext, payload: Any) -> Any:
        if payload.get("fail"):
            raise RuntimeError("the carrier refused")
        return {"shipped": payload["order"]}


@pytest.fixture
def app(backend: Backend) -> Runlane:
    return backend.app(register=register)


def order(backend: Backend, table: str, order_id: str) -> dict[str, Any] | None:
    dynamodb = backend.request.getfixturevalue("dynamodb")
    found = dynamodb.get_item(TableName=table, Key={"id": {"S": order_id}}, ConsistentRead=True)
    item: dict[str, Any] | None = found.get("Item")
    return item


@ONLY_AWS
def test_a_commit_writes_the_order_and_the_run_whose_wakeup_follows(
    backend: Backend, app: Runlane, orders: str, worker_kind: WorkerKind
) -> None:
    with app.transaction() as tx:
        tx.put(orders, {"id": "o-1", "total": Decimal("42.5"), "lines": ["a", "b"]})
        run = tx.trigger(SHIP, {"order": "o-1"})

    assert order(backend, orders, "o-1") == {
        "id": {"S": "o-1"},
        "total": {"N": "42.5"},
        "lines": {"L": [{"S": "a"}, {"S": "b"}]},
    }
    assert app.runs.get(run.id).status is RunStatus.QUEUED
    assert backend.depth(app) == 1  # published after the commit
    assert worker_kind.drain(app) == 1
    assert app.runs.get(run.id).result == {"shipped": "o-1"}


@ONLY_AWS
def test_a_failed_condition_of_the_callers_cancels_the_run_too(
    backend: Backend, app: Runlane, orders: str
) -> None:
    with app.transaction() as tx:
        tx.put(orders, {"id": "o-2", "state": "new"})

    tx = app.transaction()
    tx.update(
        orders,
        {"id": "o-2"},
        "SET #s = :paid",
        condition="#s = :unpaid",
        names={"#s": "state"},
        values={":paid": "paid", ":unpaid": "unpaid"},
    )
    tx.trigger(SHIP, {"order": "o-2"})
    with pytest.raises(TransactionCancelled) as raised:
        tx.commit()

    assert raised.value.reasons == (
        f"action 0, Update on an item of {orders!r}: its condition failed",
    )
    assert raised.value.codes[0] == "ConditionalCheckFailed"
    assert set(raised.value.codes[1:]) == {"None"}
    assert app.runs.list().runs == []
    assert backend.depth(app) == 0
    assert order(backend, orders, "o-2") == {"id": {"S": "o-2"}, "state": {"S": "new"}}


@ONLY_AWS
def test_an_exception_in_the_block_sends_nothing(
    backend: Backend, app: Runlane, orders: str
) -> None:
    with pytest.raises(RuntimeError, match="changed my mind"), app.transaction() as tx:
        tx.put(orders, {"id": "o-3"})
        tx.trigger(SHIP, {"order": "o-3"})
        raise RuntimeError("changed my mind")

    assert order(backend, orders, "o-3") is None
    assert app.runs.list().runs == []
    assert backend.depth(app) == 0


@ONLY_AWS
def test_an_idempotency_key_held_cancels_and_names_its_run_a_released_one_is_taken(
    backend: Backend, app: Runlane, orders: str, worker_kind: WorkerKind
) -> None:
    with app.transaction() as tx:
        tx.put(orders, {"id": "o-4"})
        first = tx.trigger(SHIP, {"order": "o-4", "fail": True}, idempotency_key="ship-o-4")

    again = app.transaction()
    again.put(orders, {"id": "o-4b"})
    again.trigger(SHIP, {"order": "o-4"}, idempotency_key="ship-o-4")
    with pytest.raises(TransactionCancelled) as raised:
        again.commit()
    assert raised.value.held_by == first.id
    assert raised.value.reasons == (
        f"the idempotency key 'ship-o-4' of task {SHIP!r} is held by run {first.id}",
    )
    assert order(backend, orders, "o-4b") is None

    assert worker_kind.drain(app) == 1  # fails: the key is released
    assert app.runs.get(first.id).status is RunStatus.FAILED
    with app.transaction() as tx:
        tx.put(orders, {"id": "o-4c"})
        taken = tx.trigger(SHIP, {"order": "o-4"}, idempotency_key="ship-o-4")
    assert taken.id != first.id and order(backend, orders, "o-4c") is not None
    assert worker_kind.drain(app) == 1
    assert app.runs.get(taken.id).status is RunStatus.SUCCEEDED


@ONLY_AWS
def test_a_commit_sent_again_after_an_unknown_outcome_writes_nothing_twice(
    backend: Backend, app: Runlane, orders: str, worker_kind: WorkerKind
) -> None:
    """``commit`` again (as after ``StorageUnavailable``) sends the same request with
    the same ``ClientRequestToken``: DynamoDB answers as it did, and nothing is written
    twice; the runs are published once."""
    tx = app.transaction()
    tx.update(orders, {"id": "o-5"}, "ADD visits :one", values={":one": 1})
    run = tx.trigger(SHIP, {"order": "o-5"})
    items = tx.items()
    app.engine.store.transactions.commit(items, tx._token)  # landed; the answer was lost

    assert tx.commit() == [run]
    assert order(backend, orders, "o-5") == {"id": {"S": "o-5"}, "visits": {"N": "1"}}
    assert [r.id for r in app.runs.list().runs] == [run.id]
    assert worker_kind.drain(app) == 1


@ONLY_AWS
def test_dynamodbs_limits_are_checked_before_anything_is_sent(
    backend: Backend, app: Runlane, orders: str
) -> None:
    too_many = app.transaction()
    for n in range(100):
        too_many.put(orders, {"id": f"many-{n}"})
    too_many.trigger(SHIP, {"order": "many"})
    with pytest.raises(InvalidTransaction, match="at most 100 actions, this one 101"):
        too_many.commit()

    too_large = app.transaction()
    for n in range(11):
        too_large.put(orders, {"id": f"large-{n}", "blob": b"x" * 390_000})
    with pytest.raises(InvalidTransaction, match="at most 4 MB together"):
        too_large.commit()

    one_item = app.transaction()
    one_item.update(orders, {"id": "same"}, "SET a = :a", values={":a": 1})
    one_item.delete(orders, {"id": "same"})
    with pytest.raises(InvalidTransaction, match="actions 0 and 1 write one item"):
        one_item.commit()

    big_item = app.transaction()
    big_item.put(orders, {"id": "big", "blob": b"x" * 410_000})
    with pytest.raises(InvalidTransaction, match="action 0 puts an item of 4100"):
        big_item.commit()

    assert order(backend, orders, "many-0") is None
    assert order(backend, orders, "large-0") is None
    assert app.runs.list().runs == []


@ONLY_AWS
def test_dynamodbs_own_refusal_of_two_puts_on_one_item_is_said_in_words(
    backend: Backend, app: Runlane, orders: str
) -> None:
    """Two ``Put`` of one key of the caller's table (whose key this library does not
    know) pass the checks; DynamoDB refuses the request and the caller is told."""
    tx = app.transaction()
    tx.put(orders, {"id": "twice", "n": 1})
    tx.put(orders, {"id": "twice", "n": 2})
    tx.trigger(SHIP, {"order": "twice"})
    with pytest.raises(InvalidTransaction, match="DynamoDB refused the transaction"):
        tx.commit()
    assert app.runs.list().runs == [] and order(backend, orders, "twice") is None


@pytest.mark.parametrize(
    ("write", "error", "message"),
    [
        (lambda tx, t: tx.put(t, {"id": "f", "price": 1.5}), InvalidTransaction, "'price'"),
        (lambda tx, t: tx.put("no table!", {"id": "x"}), InvalidTransaction, "a table name"),
        (lambda tx, t: tx.put("a\x00b<c>", {"id": "x"}), InvalidTransaction, "a table name"),
        (lambda tx, t: tx.put(t, ["id"]), InvalidTransaction, "item must be a mapping"),
        (lambda tx, t: tx.add({"Drop": {"TableName": t}}), InvalidTransaction, "'Drop'"),
        (lambda tx, t: tx.trigger("no.such.task", {}), UnknownTaskError, "no.such.task"),
        (
            lambda tx, t: tx.trigger(SHIP, {"order": "x"}, ordering_key="k"),
            InvalidKeyError,
            "ordering_key",
        ),
        (lambda tx, t: tx.trigger(SHIP, {"bad": "\ud800"}), Exception, "surrogate"),
    ],
)
@ONLY_AWS
def test_bad_input_is_refused_clearly_and_writes_nothing(
    backend: Backend, app: Runlane, orders: str, write: Any, error: type, message: str
) -> None:
    tx = app.transaction()
    with pytest.raises(error, match=message):
        write(tx, orders)
        tx.commit()
    assert app.runs.list().runs == []


@ONLY_AWS
def test_the_async_form_commits_on_a_thread(
    backend: Backend, app: Runlane, orders: str, worker_kind: WorkerKind
) -> None:
    async def place() -> str:
        async with app.transaction() as tx:
            tx.put(orders, {"id": "o-6"})
            run = tx.trigger(SHIP, {"order": "o-6"})
        return run.id

    run_id = asyncio.run(place())
    assert order(backend, orders, "o-6") is not None
    assert worker_kind.drain(app) == 1
    assert app.runs.get(run_id).status is RunStatus.SUCCEEDED


def test_an_in_memory_app_commits_runs_and_the_writes_of_its_own_tables() -> None:
    """The in-memory app's DynamoDB (users' tests) answers a transaction as DynamoDB
    does: runs commit, keys included; the caller's writes need their table created in
    it first (``app.store.dynamodb``), as on AWS."""
    app = in_memory_app()
    register(app)
    with app.transaction() as tx:
        run = tx.trigger(SHIP, {"order": "m"}, idempotency_key="ship-m")
        other = tx.trigger(SHIP, {"order": "n"})
    assert app.worker(concurrency=1).drain() == 2
    assert app.runs.get(run.id).result == {"shipped": "m"}
    assert app.runs.get(other.id).status is RunStatus.SUCCEEDED

    again = app.transaction()
    again.trigger(SHIP, {"order": "n2"})
    again.trigger(SHIP, {"order": "m"}, idempotency_key="ship-m")
    with pytest.raises(TransactionCancelled) as raised:
        again.commit()
    assert raised.value.held_by == run.id
    assert len(app.runs.list().runs) == 2  # neither of the two

    writes = app.transaction()
    writes.put("orders", {"id": "m"})
    writes.trigger(SHIP, {"order": "m"})
    with pytest.raises(MissingResourceError):
        writes.commit()  # no table "orders" yet
    assert isinstance(app.store, InMemoryRunStore)
    app.store.dynamodb.create_table(
        TableName="orders",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    with app.transaction() as tx:
        tx.put("orders", {"id": "m"})
        tx.trigger(SHIP, {"order": "m"})
    assert app.store.dynamodb.items("orders") == [{"id": {"S": "m"}}]
    assert len(app.runs.list().runs) == 3


# the run table is not the caller's ------------------------------------------------------


def other_environment(backend: Backend, app: Runlane, name: str) -> Runlane:
    """An app of environment ``name`` on ``app``'s table (in memory: its DynamoDB)."""
    if backend.real:
        return backend.app(environment=name, queue_prefix=None, register=register)
    assert isinstance(app.store, InMemoryRunStore)
    other = Runlane(
        environment=name,
        clock=backend.clock,
        store=InMemoryRunStore(name, table=app.config.table, dynamodb=app.store.dynamodb),
        transport=InMemoryTransport(backend.clock),
    )
    register(other)
    return other


def forged(backend: Backend, app: Runlane, run_id: str, payload: str) -> dict[str, Any]:
    """A run item of ``app``'s environment copied from ``run_id``'s under a new id, with
    ``payload``: what someone who can write the table would put there."""
    found = backend.table(app).get_item(
        TableName=app.config.table, Key=keys.run_key(app.config.environment, run_id)
    )
    item: dict[str, Any] = dict(found["Item"])
    new_id = new_run_id()
    item["pk"] = {"S": keys.run_pk(app.config.environment, new_id)}
    item["run_id"] = {"S": new_id}
    item["payload"] = {"S": payload}
    return item


def test_no_action_of_the_callers_may_touch_the_run_table(
    backend: Backend, app: Runlane, worker_kind: WorkerKind
) -> None:
    """The caller's own credentials may write the run table; ``app.transaction()`` is
    never the way to: a ``Put``, ``Update``, ``Delete`` or ``ConditionCheck`` naming the
    run table (by name or ARN) is refused before anything is sent, so no run is forged
    (in this environment or another sharing the table), rewritten or unkeyed."""
    other = other_environment(backend, app, "other")
    mine = app.trigger(SHIP, {"order": "a-1"})
    theirs = other.trigger(SHIP, {"order": "b-1"}, idempotency_key="b-key")
    table = app.config.table
    arn = f"arn:aws:dynamodb:us-east-1:123456789012:table/{table}"
    theirs_key = keys.run_key("other", theirs.id)
    idempotency = keys.key_item_key(keys.key_pk("other", KeyKind.IDEMPOTENCY, SHIP, "b-key"))
    attacks: dict[str, Any] = {
        "a forged run here": lambda tx: tx.add(
            {"Put": {"TableName": table, "Item": forged(backend, app, mine.id, '{"order":"x"}')}}
        ),
        "a forged run there": lambda tx: tx.add(
            {"Put": {"TableName": arn, "Item": forged(backend, other, theirs.id, '{"order":"y"}')}}
        ),
        "their run rewritten": lambda tx: tx.update(
            table,
            {"pk": theirs_key["pk"]["S"], "sk": "RUN"},
            "SET #s = :s, #r = :r",
            names={"#s": "status", "#r": "result"},
            values={":s": "succeeded", ":r": '{"shipped":"forged"}'},
        ),
        "their key deleted": lambda tx: tx.delete(
            table, {"pk": idempotency["pk"]["S"], "sk": "KEY"}
        ),
        "their run checked": lambda tx: tx.condition_check(
            arn, {"pk": theirs_key["pk"]["S"], "sk": "RUN"}, "attribute_exists(pk)"
        ),
    }
    for attack in attacks.values():
        tx = app.transaction()
        with pytest.raises(InvalidTransaction, match=r"the run table .* refused"):
            attack(tx)
            tx.trigger(SHIP, {"order": "with-it"})
            tx.commit()

    assert [run.id for run in app.runs.list().runs] == [mine.id]
    assert [run.id for run in other.runs.list().runs] == [theirs.id]
    assert other.runs.get(theirs.id).status is RunStatus.QUEUED
    assert other.trigger(SHIP, {"order": "b-1"}, idempotency_key="b-key").id == theirs.id
    assert worker_kind.drain(app) == 1 and worker_kind.drain(other) == 1
    assert other.runs.get(theirs.id).result == {"shipped": "b-1"}
