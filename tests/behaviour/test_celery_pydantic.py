"""Celery's ``pydantic=True`` on the compatibility layer (docs/from-celery.md,
"pydantic=True"), on the in-memory app: arguments annotated with a pydantic model reach
the function as that model, a returned model is stored as its JSON dump, a model given to
``delay`` travels as its JSON, and an argument that does not validate fails the run
naming the argument and its fields, without a retry."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from runlane_sqs import ManualClock, Runlane, RunStatus
from runlane_sqs.compat.celery import Celery
from runlane_sqs.testing import in_memory_app

SEEN: list[object] = []


class Order(BaseModel):
    id: int
    placed_at: datetime


class Receipt(BaseModel):
    order_id: int
    placed_at: datetime


@pytest.fixture
def runlane() -> Runlane:
    return in_memory_app(clock=ManualClock())


@pytest.fixture
def app(runlane: Runlane) -> Celery:
    SEEN.clear()
    celery = Celery("shop", runlane=runlane)

    @celery.task(name="shop.ship", pydantic=True, max_retries=3)
    def ship(order: Order, note: str = "") -> Receipt:
        SEEN.append(order)
        return Receipt(order_id=order.id, placed_at=order.placed_at)

    @celery.task(name="shop.ship_bound", pydantic=True, bind=True)
    def ship_bound(self: Any, order: Order) -> int:
        SEEN.append(order)
        return order.id

    @celery.task(name="shop.plain")
    def plain(order: Order) -> Any:
        SEEN.append(order)
        return order

    return celery


PLACED = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


def test_arguments_become_models_and_a_returned_model_its_json(
    app: Celery, runlane: Runlane
) -> None:
    by_dict = app.tasks["shop.ship"].delay({"id": 7, "placed_at": "2026-12-01T09:30:00Z"})
    by_model = app.tasks["shop.ship"].delay(Order(id=8, placed_at=PLACED), note="gift")
    bound = app.tasks["shop.ship_bound"].delay(order={"id": 9, "placed_at": PLACED.isoformat()})

    assert runlane.runs.get(by_model.id).payload["args"] == [
        {"id": 8, "placed_at": "2026-12-01T09:30:00Z"}
    ]
    runlane.worker().drain()

    assert [
        Order(id=7, placed_at=PLACED),
        Order(id=8, placed_at=PLACED),
        Order(id=9, placed_at=PLACED),
    ] == SEEN
    assert by_dict.get() == {"order_id": 7, "placed_at": "2026-12-01T09:30:00Z"}
    assert bound.get() == 9


def test_without_pydantic_the_function_gets_the_dict(app: Celery, runlane: Runlane) -> None:
    result = app.tasks["shop.plain"].delay({"id": 1, "placed_at": "2026-12-01T09:30:00Z"})
    runlane.worker().drain()

    assert SEEN == [{"id": 1, "placed_at": "2026-12-01T09:30:00Z"}]
    assert result.get() == {"id": 1, "placed_at": "2026-12-01T09:30:00Z"}


def test_an_argument_that_does_not_validate_fails_the_run_naming_it(
    app: Celery, runlane: Runlane
) -> None:
    result = app.tasks["shop.ship"].delay({"id": "seven"})
    runlane.worker().drain()

    failed = runlane.runs.get(result.id)
    assert failed.status is RunStatus.FAILED and failed.attempt == 1  # not retried
    assert failed.failure is not None
    assert "argument 'order' is not a valid Order" in failed.failure.message
    assert "id: Input should be a valid integer" in failed.failure.message
    assert "placed_at: Field required" in failed.failure.message
    assert SEEN == []
