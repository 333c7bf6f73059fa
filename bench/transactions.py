"""Transactional triggers: what ``app.transaction()`` costs per run next to a plain
``app.trigger`` and next to the non-atomic write-then-trigger most code does today
(docs/transactions.md).

Each way gets a fresh app (its own table and queues) on a counting session
(bench/counting.py) and a fresh table of the caller's, ``<table>-orders`` (key ``id``,
a string), created with the same session; both are provisioned, described and the
queue URL looked up before counting. 50 runs (smoke: 2) are triggered each way first,
neither counted nor timed (the first requests find the emulator's and the client's code
paths cold: DynamoDB Local is a JVM). Then the ways take turns, run by run; each run is
one of:

1. ``plain``: ``app.trigger(task, payload)``;
2. ``put_then_trigger``: the caller's own ``PutItem`` of the order, then
   ``app.trigger`` (two requests, not atomic: the baseline);
3. ``transaction``: ``with app.transaction() as tx: tx.put(orders, order);
   tx.trigger(task, payload)``;
4. ``transaction_key``: the same with ``tx.trigger(..., idempotency_key=...)``.

Counted: the requests those calls send (by operation) and the capacity DynamoDB reports;
timed: the wall time of each unit of work (the trigger call, the put and the trigger,
the ``with`` block). The runs are then drained by the sync worker, not counted, and every
run and order is checked.

Write units are also computed from the requests, by DynamoDB's rules, for backends that
do not report them (moto: none for ``TransactWriteItems``, 1 for any ``PutItem``): a
write costs one unit per KB of the item, rounded up; a transactional write twice that
(the prepare and the commit, as DynamoDB's documentation of transactions says); each
global secondary index the item lands in one unit per KB of its entry (the keys and the
projected attributes), outside a transaction and inside one alike. That documentation
does not say what an index entry written by a transaction costs: the computation charges
the standard rate, while DynamoDB Local reports it doubled too, so on aws-local reported
and computed differ by the index units (docs/performance.md).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import boto3
from boto3.dynamodb.types import TypeSerializer

from bench.backends import MOTO, Backend
from bench.cost import (
    DYNAMODB_READ_USD_PER_MILLION_UNITS,
    DYNAMODB_WRITE_USD_PER_MILLION_UNITS,
    SQS_STANDARD_USD_PER_MILLION_REQUESTS,
    CostResult,
    drainer,
)
from bench.counting import Counts, RequestCounter
from bench.latency import LatencySeries
from runlane_sqs import Runlane, RunStatus, TaskContext
from runlane_sqs.adapters.dynamodb.transactions import item_size

TASK = "bench.transactions"
ORDERS = "orders"
"""The caller's table, after the run table's name."""
WRITE_UNIT_BYTES = 1024
TRANSACTIONAL_WRITE_FACTOR = 2
"""A transactional write of an item costs twice a standard one (prepare, commit)."""
MOTO_TRANSACTION_NOTE = (
    "moto copies every table a TransactWriteItems touches (once per action) before "
    "applying it, so its transactions slow down as the tables fill: use aws-local's "
    "latency"
)
_serializer = TypeSerializer()


def order(n: int) -> dict[str, Any]:
    """The caller's item: an order of 34 bytes, as DynamoDB counts them."""
    return {"id": f"order-{n:06d}", "total": Decimal("42.50"), "customer": f"c-{n % 10}"}


def ship(n: int) -> dict[str, Any]:
    """The run's payload: which order to ship."""
    return {"order": f"order-{n:06d}"}


def _noop(ctx: TaskContext, payload: Any) -> None:
    return None


# computed write units ----------------------------------------------------------------


@dataclass(frozen=True)
class Index:
    """A global secondary index: the attributes its entries are keyed and made of."""

    name: str
    keys: tuple[str, ...]
    projected: tuple[str, ...] | None
    """Non-key attributes it projects; ``None``: all of them."""

    def entry(self, item: dict[str, Any], table_keys: tuple[str, ...]) -> dict[str, Any] | None:
        """The item's entry in the index, or ``None`` if it has not every index key."""
        if not all(key in item for key in self.keys):
            return None
        if self.projected is None:
            return item
        names = {*self.keys, *table_keys, *self.projected}
        return {name: value for name, value in item.items() if name in names}


@dataclass(frozen=True)
class Schema:
    """A table's key attributes and global secondary indexes, from ``DescribeTable``."""

    keys: tuple[str, ...]
    indexes: tuple[Index, ...]

    @classmethod
    def described(cls, client: Any, table: str) -> Schema:
        described = client.describe_table(TableName=table)["Table"]
        indexes = []
        for index in described.get("GlobalSecondaryIndexes", []):
            projection = index.get("Projection", {})
            kind = projection.get("ProjectionType", "ALL")
            projected = None if kind == "ALL" else tuple(projection.get("NonKeyAttributes", []))
            keys = tuple(k["AttributeName"] for k in index["KeySchema"])
            indexes.append(Index(index["IndexName"], keys, projected))
        keys = tuple(k["AttributeName"] for k in described["KeySchema"])
        return cls(keys, tuple(indexes))


def _units(size: int) -> int:
    return max(1, math.ceil(size / WRITE_UNIT_BYTES))


@dataclass
class Computed:
    """Write units computed from the requests sent (a new item each: no item replaced)."""

    table_units: float = 0.0
    index_units: float = 0.0
    uncomputed: int = 0
    """Write actions whose item the request does not hold (updates, deletes)."""

    @property
    def write_units(self) -> float:
        return self.table_units + self.index_units


class UnitMeter:
    """Computes the write units of every ``PutItem`` and ``TransactWriteItems`` the
    session's DynamoDB clients send, from the items in the requests."""

    def __init__(self, session: boto3.Session) -> None:
        self._lock = threading.Lock()
        self._computed = Computed()
        self.schemas: dict[str, Schema] = {}
        events = session.events
        events.register("provide-client-params.dynamodb.PutItem", self._put_item)
        events.register("provide-client-params.dynamodb.TransactWriteItems", self._transact)
        for op in ("UpdateItem", "DeleteItem", "BatchWriteItem"):
            events.register(f"provide-client-params.dynamodb.{op}", self._uncomputed)

    def _put(self, table: str, item: dict[str, Any], factor: int) -> None:
        schema = self.schemas[table]
        index_units = sum(
            _units(item_size(entry))
            for entry in (index.entry(item, schema.keys) for index in schema.indexes)
            if entry is not None
        )
        with self._lock:
            self._computed.table_units += factor * _units(item_size(item))
            self._computed.index_units += index_units

    def _put_item(self, params: dict[str, Any], **_: Any) -> None:
        self._put(params["TableName"], params["Item"], 1)

    def _transact(self, params: dict[str, Any], **_: Any) -> None:
        for action in params["TransactItems"]:
            [(kind, body)] = action.items()
            if kind == "Put":
                self._put(body["TableName"], body["Item"], TRANSACTIONAL_WRITE_FACTOR)
            else:
                self._uncomputed()

    def _uncomputed(self, **_: Any) -> None:
        with self._lock:
            self._computed.uncomputed += 1

    def snapshot(self) -> Computed:
        with self._lock:
            c = self._computed
            return Computed(c.table_units, c.index_units, c.uncomputed)

    def reset(self) -> None:
        with self._lock:
            self._computed = Computed()


# the ways to trigger -----------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """What a way to trigger works with: the app, the caller's client and table."""

    app: Runlane
    client: Any
    orders: str


def _plain(caller: Caller, n: int) -> str:
    return caller.app.trigger(TASK, ship(n)).id


def _put_then_trigger(caller: Caller, n: int) -> str:
    item = {name: _serializer.serialize(value) for name, value in order(n).items()}
    caller.client.put_item(TableName=caller.orders, Item=item)
    return caller.app.trigger(TASK, ship(n)).id


def _transaction(caller: Caller, n: int) -> str:
    with caller.app.transaction() as tx:
        tx.put(caller.orders, order(n))
        run = tx.trigger(TASK, ship(n))
    return run.id


def _transaction_key(caller: Caller, n: int) -> str:
    with caller.app.transaction() as tx:
        tx.put(caller.orders, order(n))
        run = tx.trigger(TASK, ship(n), idempotency_key=f"ship-order-{n:06d}")
    return run.id


@dataclass(frozen=True)
class Way:
    name: str
    description: str
    trigger: Callable[[Caller, int], str]
    """Triggers run ``n`` (and writes its order, if it does); returns the run's id."""
    writes_orders: bool


WAYS = (
    Way("plain", "app.trigger", _plain, writes_orders=False),
    Way(
        "put_then_trigger",
        "PutItem of the order, then app.trigger",
        _put_then_trigger,
        writes_orders=True,
    ),
    Way(
        "transaction",
        "with app.transaction(): tx.put + tx.trigger",
        _transaction,
        writes_orders=True,
    ),
    Way(
        "transaction_key",
        "the same, tx.trigger with an idempotency_key",
        _transaction_key,
        writes_orders=True,
    ),
)


@dataclass
class TransactionsResult:
    """One way to trigger: its runs' counts, computed units and latency."""

    way: Way
    runs: int
    counts: Counts
    computed: Computed
    latency: LatencySeries
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        c, runs = self.counts, self.runs
        cost = CostResult(self.way.name, self.way.description, runs, c).to_json()
        computed = self.computed
        return {
            "way": self.way.name,
            "description": self.way.description,
            "runs": runs,
            "requests_per_run": {op: n / runs for op, n in sorted(c.requests.items())},
            "per_run": {
                **cost["per_run"],
                "dynamodb_requests": c.dynamodb_requests / runs,
            },
            "reported_write_units_by_operation": {
                op: units / runs for op, units in sorted(c.write_units_by_operation.items())
            },
            "capacity_complete": c.capacity_complete,
            "computed_per_run": {
                "write_units": computed.write_units / runs,
                "table_write_units": computed.table_units / runs,
                "index_write_units": computed.index_units / runs,
            },
            "computed_complete": computed.uncomputed == 0,
            "usd_per_million_runs": cost["usd_per_million_runs"],
            "usd_per_million_runs_computed": (
                computed.write_units * DYNAMODB_WRITE_USD_PER_MILLION_UNITS
                + c.read_units * DYNAMODB_READ_USD_PER_MILLION_UNITS
                + c.sqs_requests * SQS_STANDARD_USD_PER_MILLION_REQUESTS
            )
            / runs,
            "trigger_latency": self.latency.to_json(),
            "notes": self.notes,
        }


# measuring ---------------------------------------------------------------------------


def _set_up(backend: Backend) -> tuple[Caller, RequestCounter, UnitMeter]:
    """A fresh app and orders table on a counting session, provisioned and described
    (reset the counts before counting)."""
    session = boto3.Session()
    counter = RequestCounter(session)
    meter = UnitMeter(session)
    table, prefix = backend.names()
    app = backend.app_for(table, prefix, session)
    app.task(_noop, name=TASK)
    app.provision()
    app.transport.check_queue("default")  # the one-off GetQueueUrl, before counting
    client = session.client("dynamodb")
    orders = f"{table}-{ORDERS}"
    client.create_table(
        TableName=orders,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.get_waiter("table_exists").wait(TableName=orders)
    meter.schemas = {name: Schema.described(client, name) for name in (table, orders)}
    return Caller(app, client, orders), counter, meter


def _check(caller: Caller, way: Way, ids: list[str]) -> None:
    """Every run succeeded, and the orders table holds one order per run (if written)."""
    statuses = {caller.app.runs.get(run_id).status for run_id in ids}
    if statuses != {RunStatus.SUCCEEDED}:
        raise RuntimeError(f"{way.name}: runs ended {sorted(s.value for s in statuses)}")
    stored = _orders_stored(caller)
    expected = len(ids) if way.writes_orders else 0
    if stored != expected:
        raise RuntimeError(f"{way.name}: {stored} orders stored for {expected} written")


def _orders_stored(caller: Caller) -> int:
    pages = caller.client.get_paginator("scan").paginate(TableName=caller.orders, Select="COUNT")
    return sum(int(page["Count"]) for page in pages)


@dataclass
class Measured:
    """One way under measurement: its app and counters, its runs' ids and times."""

    way: Way
    caller: Caller
    counter: RequestCounter
    meter: UnitMeter
    ids: list[str] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def trigger(self, n: int) -> None:
        started = time.perf_counter()
        self.ids.append(self.way.trigger(self.caller, n))
        self.seconds.append(time.perf_counter() - started)

    def warm_up(self, runs: int, first: int) -> None:
        """Trigger ``runs`` runs, numbered from ``first``, neither counted nor timed."""
        self.ids += [self.way.trigger(self.caller, first + n) for n in range(runs)]
        self.counter.reset()
        self.meter.reset()

    def result(self, backend: Backend) -> TransactionsResult:
        """Drain and check the runs; what the timed ones cost."""
        counts, computed = self.counter.snapshot(), self.meter.snapshot()
        drainer()(self.caller.app)
        _check(self.caller, self.way, self.ids)
        series = LatencySeries(f"{self.way.name}: trigger", self.seconds)
        result = TransactionsResult(self.way, len(self.seconds), counts, computed, series)
        result.notes += _notes(backend, counts, computed)
        return result


def _notes(backend: Backend, counts: Counts, computed: Computed) -> list[str]:
    notes = []
    if not counts.capacity_complete:
        notes.append(
            f"{backend.name} reported consumed capacity for {counts.capacity_reported} of "
            f"{counts.dynamodb_requests} DynamoDB requests: reported units are a lower "
            "bound; the computed ones follow DynamoDB's rules"
        )
    if backend.name == MOTO and counts.requests["dynamodb.TransactWriteItems"]:
        notes.append(MOTO_TRANSACTION_NOTE)
    if computed.uncomputed:
        notes.append(
            f"{computed.uncomputed} write actions held no item: computed units leave them out"
        )
    return notes


def measure_transactions(
    backend: Backend, runs: int, warmup: int, progress: Callable[[int], None]
) -> list[TransactionsResult]:
    """Every way to trigger, ``runs`` runs each after ``warmup`` more, the ways taking
    turns run by run (the emulators' warming up and the machine's other work fall on
    all of them alike)."""
    ways = [Measured(way, *_set_up(backend)) for way in WAYS]
    for measured in ways:
        measured.warm_up(warmup, first=runs)
    for n in range(runs):
        for measured in ways:
            measured.trigger(n)
        progress(n + 1)
    return [measured.result(backend) for measured in ways]
