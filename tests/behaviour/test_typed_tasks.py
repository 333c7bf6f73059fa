"""Typed tasks (docs/typed-tasks.md), on every backend and with both workers: a handler
annotated with a pydantic model, a dataclass or a ``TypedDict`` gets its payload
validated at the trigger (a bad one writes nothing and names each wrong field), converted
for the handler, and its result stored as JSON and read back as its type; a stored payload
that no longer validates parks its run until code that reads it is deployed; an option
no entry point knows is refused by name. A map over a typed task gives its children's
results as the task's result type; a group, a map or a chain with a bad payload writes
nothing."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict  # pydantic reads typing.TypedDict from Python 3.12

from runlane_sqs import Batch, GroupResults, Runlane, RunStatus, Schedule, TaskContext
from runlane_sqs.core.parking import PAYLOAD_MISMATCH
from runlane_sqs.errors import (
    ConfigurationError,
    InvalidPayloadError,
    RunNotSucceeded,
)
from runlane_sqs.testing import in_memory_app
from tests.backends import Backend
from tests.behaviour.worker_support import drain, second_app
from tests.workers import WorkerKind

SHIP = "typed.ship"
NOTE = "typed.note"
WRONG = "typed.wrong"
LIMITED = "typed.limited"
MAPPER = "typed.mapper"
"""Maps ``typed.ship`` over ``payload["ids"]`` (``ctx.map``, then ``ctx.group``)."""
MAPPER_ASYNC = "typed.mapper_async"
"""``typed.mapper`` as an ``async def`` handler (``ctx.map_async``, ``ctx.group_async``)."""


class Order(BaseModel):
    id: int
    customer: str
    placed_at: datetime


class OrderWithCoupon(BaseModel):
    """The order as a later deploy reads it: a new required field."""

    id: int
    customer: str
    placed_at: datetime
    coupon: str


class OrderWithOptionalCoupon(BaseModel):
    """A deploy that reads the old payloads again."""

    id: int
    customer: str
    placed_at: datetime
    coupon: str | None = None


@dataclass
class Receipt:
    order_id: int
    customer: str


class Note(TypedDict):
    text: str
    tags: list[str]


PLACED = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
SEEN: list[object] = []


def register(app: Runlane, order: type[BaseModel] = Order) -> None:
    def ship(ctx: TaskContext, payload: Order) -> Receipt:
        SEEN.append(payload)
        return Receipt(order_id=payload.id, customer=payload.customer)

    app.task(ship, name=SHIP, payload_type=order)

    @app.task(name=NOTE)
    async def note(ctx: TaskContext, note: Note) -> list[str]:
        await asyncio.sleep(0)
        return sorted(note["tags"])

    @app.task(name=WRONG)
    def wrong(ctx: TaskContext, order: Order) -> Receipt:
        return {"order_id": "not a number"}  # type: ignore[return-value]

    @app.task(name=LIMITED, key_limit=1, concurrency_key=lambda order: order.customer)
    def limited(ctx: TaskContext, order: Order) -> int:
        return order.id

    def orders(payload: dict[str, Any]) -> list[Order]:
        return [Order(id=n, customer="acme", placed_at=PLACED) for n in payload["ids"]]

    @app.task(name=MAPPER)
    def mapper(ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        mapped = ctx.map(app.tasks.resolve(SHIP), orders(payload))
        grouped = ctx.group([(SHIP, order) for order in orders(payload)])
        return seen_results(mapped, grouped)

    @app.task(name=MAPPER_ASYNC)
    async def mapper_async(ctx: TaskContext, payload: dict[str, Any]) -> dict[str, Any]:
        mapped = await ctx.map_async(SHIP, orders(payload))  # by name: converted as well
        grouped = await ctx.group_async([(SHIP, order) for order in orders(payload)])
        return seen_results(mapped, grouped)


def seen_results(mapped: GroupResults[Any], grouped: GroupResults[Any]) -> dict[str, Any]:
    """What a parent saw of its map's and its group's results: their types and values."""
    return {
        "mapped": [(type(r).__name__, r.order_id) for r in mapped.results()],
        "outcomes": [type(o.result).__name__ for o in mapped.outcomes()],
        "grouped": list(grouped.results()),
    }


@pytest.fixture
def app(backend: Backend) -> Runlane:
    SEEN.clear()
    return backend.app(register=register)


def test_a_model_goes_in_and_comes_back_as_its_type(app: Runlane, worker_kind: WorkerKind) -> None:
    ship = app.tasks.resolve(SHIP)
    run = app.trigger(ship, Order(id=7, customer="acme", placed_at=PLACED))

    assert app.runs.get(run.id).payload == {
        "id": 7,
        "customer": "acme",
        "placed_at": "2026-12-01T09:30:00Z",
    }
    worker_kind.drain_all(app)
    done = app.runs.wait(run.id)

    assert [Order(id=7, customer="acme", placed_at=PLACED)] == SEEN
    assert done.result == {"order_id": 7, "customer": "acme"}
    assert ship.result_of(done) == Receipt(order_id=7, customer="acme")


def test_a_dict_payload_is_validated_into_the_model(app: Runlane) -> None:
    run = app.trigger(SHIP, {"id": "8", "customer": "b", "placed_at": "2026-12-01T09:30:00Z"})

    assert app.runs.get(run.id).payload["id"] == 8
    drain(app)
    assert [Order(id=8, customer="b", placed_at=PLACED)] == SEEN


def test_a_typed_dict_payload_reaches_an_async_handler(
    app: Runlane, worker_kind: WorkerKind
) -> None:
    run = app.trigger(NOTE, Note(text="hi", tags=["b", "a"]))
    worker_kind.drain_all(app)

    assert app.runs.wait(run.id).result == ["a", "b"]


def test_a_bad_payload_names_the_task_and_each_field_and_writes_nothing(
    backend: Backend, app: Runlane
) -> None:
    with pytest.raises(InvalidPayloadError) as raised:
        app.trigger(SHIP, {"id": "seven", "customer": ["x"]})

    message = str(raised.value)
    assert f"payload of task {SHIP!r}" in message
    assert "id: Input should be a valid integer" in message
    assert "customer: Input should be a valid string" in message
    assert "placed_at: Field required" in message
    assert [(e["path"], e["kind"]) for e in raised.value.errors] == [
        ("id", "int_parsing"),
        ("customer", "string_type"),
        ("placed_at", "missing"),
    ]
    with pytest.raises(InvalidPayloadError):
        app.trigger_many(SHIP, [Order(id=1, customer="a", placed_at=PLACED), {"id": 2}])
    with pytest.raises(InvalidPayloadError), app.transaction() as tx:
        tx.trigger(SHIP, {"id": 3})
    assert app.runs.list().runs == []
    assert backend.depth(app) == 0


def test_a_misspelt_option_is_refused_by_name_and_writes_nothing(
    backend: Backend, app: Runlane
) -> None:
    order = Order(id=7, customer="acme", placed_at=PLACED)
    with pytest.raises(
        TypeError, match="unknown option 'idempotncy_key'; did you mean 'idempotency_key'"
    ):
        app.trigger(SHIP, order, idempotncy_key="order-7")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="unknown option 'tenant'"):
        app.trigger(SHIP, order, tenant="acme")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="did you mean 'delay'"):
        app.trigger_many(SHIP, [order], dealy=5)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="did you mean 'max_in_flight'"):
        app.group([(SHIP, order)], max_inflight=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="did you mean 'key_limit'"):
        app.task(lambda ctx, p: p, name="typed.other", keylimit=2)  # type: ignore[call-overload]
    assert app.runs.list().runs == []
    assert backend.depth(app) == 0


def test_a_result_its_type_refuses_fails_the_run_without_retrying(app: Runlane) -> None:
    run = app.trigger(WRONG, Order(id=1, customer="a", placed_at=PLACED))
    drain(app)

    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.type.endswith("InvalidResult")
    assert "order_id: Input should be a valid integer" in failed.failure.message
    with pytest.raises(RunNotSucceeded):
        app.tasks.resolve(WRONG).result_of(failed)


def test_key_functions_see_the_model(app: Runlane) -> None:
    run = app.trigger(LIMITED, {"id": 1, "customer": "acme", "placed_at": PLACED})

    assert app.runs.get(run.id).concurrency_key == "acme"


def test_a_payload_the_new_type_refuses_parks_its_runs_until_a_compatible_deploy(
    backend: Backend, app: Runlane
) -> None:
    """Ten runs triggered under the old type wait while a deploy adds a required field:
    the new workers park them, naming the field, without calling the handler; a deploy
    that reads them again (the field optional) and an unpark finish them."""
    runs = [app.trigger(SHIP, Order(id=n, customer="acme", placed_at=PLACED)) for n in range(10)]
    strict = second_app(backend, app, lambda a: register(a, OrderWithCoupon))
    drain(strict)

    for run in runs:
        parked = strict.runs.get(run.id)
        assert parked.status is RunStatus.PARKED
        assert parked.parked_reason == PAYLOAD_MISMATCH
        event = strict.runs.events(run.id)[-1]
        assert event.data["errors"] == [
            {"path": "coupon", "message": "Field required", "kind": "missing"}
        ]
    assert SEEN == []
    assert strict.maintenance.run_pass() is not None
    assert all(strict.runs.get(r.id).status is RunStatus.PARKED for r in runs)  # not by itself

    fixed = second_app(backend, app, lambda a: register(a, OrderWithOptionalCoupon))
    for run in runs:
        fixed.runs.unpark(run.id)
    drain(fixed)
    assert [fixed.runs.get(r.id).status for r in runs] == [RunStatus.SUCCEEDED] * 10
    assert sorted(order.id for order in SEEN) == list(range(10))  # type: ignore[attr-defined]


def test_a_schedule_s_model_payload_is_validated_and_kept_as_json() -> None:
    app = in_memory_app()
    every_hour = Schedule.every("hourly", 3600, payload=Order(id=1, customer="a", placed_at=PLACED))

    def ship(ctx: TaskContext, order: Order) -> None:
        return None

    task = app.task(ship, name=SHIP, schedules=[every_hour])

    assert task.schedules[0].payload == {
        "id": 1,
        "customer": "a",
        "placed_at": "2026-12-01T09:30:00Z",
    }
    with pytest.raises(ConfigurationError, match=r"schedule 'daily'.*placed_at: Field required"):
        app.task(
            ship,
            name="typed.other",
            schedules=[Schedule.every("daily", 86400, payload={"id": 1, "customer": "a"})],
        )


def test_a_batched_task_validates_each_item() -> None:
    app = in_memory_app()

    @app.task(name="typed.batched", batch=Batch(size=2, max_age=60))
    def batched(ctx: TaskContext, orders: list[Order]) -> int:
        return sum(order.id for order in orders)

    with pytest.raises(InvalidPayloadError, match=r"item of task 'typed\.batched'"):
        app.trigger(batched, {"id": "x"})
    app.trigger(batched, Order(id=1, customer="a", placed_at=PLACED))
    run = app.trigger(batched, {"id": 2, "customer": "b", "placed_at": PLACED})
    drain(app)

    assert app.runs.get(run.id).result == 3


def test_an_annotation_that_cannot_be_resolved_names_the_task() -> None:
    app = in_memory_app()

    def handler(ctx: TaskContext, order: NotDefinedAnywhere) -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    with pytest.raises(ConfigurationError, match=r"task 'typed\.unresolved'.*payload_type="):
        app.task(handler, name="typed.unresolved")
    task = app.task(handler, name="typed.resolved", payload_type=Order, result_type=None)
    assert task.types.payload is not None


def test_plain_annotations_declare_nothing() -> None:
    app = in_memory_app()

    def plain(ctx: TaskContext, payload: dict[str, Any]) -> list[int] | None:
        return None

    def untyped(ctx, payload):  # type: ignore[no-untyped-def]
        return payload

    for handler, name in ((plain, "typed.plain"), (untyped, "typed.untyped")):
        task = app.task(handler, name=name)
        assert task.types.payload is None and task.types.result is None


@pytest.mark.parametrize("parent", [MAPPER, MAPPER_ASYNC])
def test_a_map_over_a_typed_task_gives_its_results_as_the_result_type(
    app: Runlane, worker_kind: WorkerKind, parent: str
) -> None:
    """Each stored result is converted to ``Receipt`` as ``task.result_of`` converts it;
    a group of (task, payload) pairs, whose children may be of any task, keeps the JSON."""
    run = app.trigger(parent, {"ids": [3, 1, 2]})
    worker_kind.drain_all(app)

    done = app.runs.wait(run.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result == {
        "mapped": [["Receipt", 3], ["Receipt", 1], ["Receipt", 2]],
        "outcomes": ["Receipt"] * 3,
        "grouped": [{"order_id": n, "customer": "acme"} for n in (3, 1, 2)],
    }


def test_a_map_with_a_bad_item_fails_its_parent_naming_the_field_and_starts_no_child(
    backend: Backend, app: Runlane
) -> None:
    def bad_parent(ctx: TaskContext, payload: Any) -> Any:
        good = Order(id=1, customer="acme", placed_at=PLACED)
        return ctx.map(app.tasks.resolve(SHIP), [good, {"id": 2, "customer": "acme"}])

    app.task(bad_parent, name="typed.bad_parent")
    run = app.trigger("typed.bad_parent")
    drain(app)

    failed = app.runs.get(run.id)
    assert failed.status is RunStatus.FAILED and failed.failure is not None
    assert failed.failure.type.endswith("InvalidPayloadError")
    assert f"payload of task {SHIP!r} is invalid" in failed.failure.message
    assert "placed_at: Field required" in failed.failure.message
    assert [r.id for r in app.runs.list().runs] == [run.id]
    assert app.runs.groups(run.id) == []
    assert SEEN == []
    assert backend.depth(app) == 0


def test_a_group_or_a_chain_with_a_bad_payload_writes_nothing(
    backend: Backend, app: Runlane
) -> None:
    good = Order(id=1, customer="acme", placed_at=PLACED)
    bad = {"id": "two", "customer": "acme", "placed_at": PLACED}

    with pytest.raises(InvalidPayloadError, match=r"payload of task 'typed\.ship'.*id: Input"):
        app.group([(SHIP, good), (SHIP, bad)])
    with pytest.raises(InvalidPayloadError, match=r"placed_at: Field required"):
        app.group([(SHIP, good)], then=(SHIP, {"id": 3, "customer": "acme"}))
    with pytest.raises(InvalidPayloadError, match=r"payload of task 'typed\.ship'.*id: Input"):
        app.chain((SHIP, bad), LIMITED)

    assert app.runs.list().runs == []
    assert backend.depth(app) == 0
    drain(app)
    assert SEEN == []
