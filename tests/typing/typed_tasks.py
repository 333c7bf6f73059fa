"""What the type checker makes of typed tasks (docs/typed-tasks.md). ``make lint`` runs
mypy on this file: each ``assert_type`` must hold, and each line marked with an expected
error must fail to type-check (an ignore that is no longer needed is itself an error, so a
wrong payload that type-checks fails the lint). It is never run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypedDict, assert_type

from pydantic import BaseModel

from runlane_sqs import ChildOutcome, GroupResults, Run, Runlane, TaskContext
from runlane_sqs.engine.tasks import Task

app = Runlane()


class Order(BaseModel):
    id: int
    customer: str


@dataclass
class Receipt:
    order_id: int


class Note(TypedDict):
    text: str


@app.task
def ship(ctx: TaskContext, order: Order) -> Receipt:
    return Receipt(order.id)


@app.task(queue="notes")
async def note(ctx: TaskContext, note: Note) -> None:
    return None


@app.task
def untyped(ctx, payload):  # type: ignore[no-untyped-def]
    return payload


assert_type(ship, Task[Order, Receipt])
assert_type(note, Task[Note, None])

run = app.trigger(ship, Order(id=7, customer="acme"))
assert_type(run, Run)
assert_type(ship.result_of(app.runs.wait(run.id)), Receipt)

app.trigger(note, Note(text="hello"))  # a TypedDict's payload is built as one
app.trigger(untyped, {"anything": ["goes"]})
app.trigger("by.name", {"anything": "goes"})
app.trigger_many(ship, [Order(id=1, customer="a"), Order(id=2, customer="b")])

app.trigger(ship, {"wrong": 1})  # type: ignore[misc]
app.trigger(note, {"text": 3})  # type: ignore[misc]
app.trigger(note, Note(text=3))  # type: ignore[typeddict-item]
app.trigger_many(ship, [{"id": 1}])  # type: ignore[misc]
receipt: Order = ship.result_of(run)  # type: ignore[assignment]
app.trigger(ship, Order(id=7, customer="acme"), idempotncy_key="x")  # type: ignore[call-overload]


def any_task(task: Task) -> Any:
    return task.result_of(run)


@app.task
def ship_all(ctx: TaskContext, customers: list[str]) -> int:
    """A map over a typed task gives its result type; other groups, the stored JSON."""
    orders = [Order(id=n, customer=c) for n, c in enumerate(customers)]
    shipped = ctx.map(ship, orders, max_in_flight=5)
    assert_type(shipped, GroupResults[Receipt])
    assert_type(shipped.results(), Iterator[Receipt | None])
    assert_type(next(shipped.outcomes()), ChildOutcome[Receipt])
    assert_type(next(shipped.outcomes()).result, Receipt | None)
    assert_type(ctx.map(untyped, [{"anything": 1}]), GroupResults[Any])
    assert_type(ctx.map("orders.ship", [{"id": 1}]), GroupResults[Any])
    assert_type(ctx.group([(ship, orders[0]), ("orders.ship", {"id": 1})]), GroupResults[Any])

    ctx.map(ship, [{"wrong": 1}])  # type: ignore[misc]
    ctx.map(ship, [Receipt(1)])  # type: ignore[misc]
    ctx.map(ship, orders, max_inflight=5)  # type: ignore[call-overload]
    return sum(receipt.order_id for receipt in shipped.results() if receipt is not None)


@app.task
async def note_all(ctx: TaskContext, texts: list[str]) -> None:
    noted = await ctx.map_async(note, [Note(text=t) for t in texts])
    assert_type(noted, GroupResults[None])
    await ctx.map_async(note, [1, 2])  # type: ignore[misc]


app.chain((ship, Order(id=7, customer="acme")), ship_all, "orders.notify")
app.chain(("orders.ship", {"anything": "goes"}), "orders.notify")
app.chain((ship, {"wrong": 1}), "orders.notify")  # type: ignore[misc]
app.chain((ship, Receipt(7)))  # type: ignore[misc]
