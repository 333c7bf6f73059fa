"""What the type checker makes of typed tasks (docs/typed-tasks.md). ``make lint`` runs
mypy on this file: each ``assert_type`` must hold, and each line marked with an expected
error must fail to type-check (an ignore that is no longer needed is itself an error, so a
wrong payload that type-checks fails the lint). It is never run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict, assert_type

from pydantic import BaseModel

from runlane_sqs import Run, Runlane, TaskContext
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
