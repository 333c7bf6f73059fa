"""Worker app of the typed task process tests (tests/processes/test_typed_processes.py):
``--app tests.apps.typed_worker:app``. ``orders.ship`` takes an ``Order`` (a pydantic
model) and returns a ``Receipt`` (a dataclass); ``TYPED_ORDER=coupon`` deploys the order
with a new required field, ``TYPED_ORDER=optional`` with that field optional."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel

from runlane_sqs import Runlane, TaskContext

SHIP = "orders.ship"
ORDER_ENV = "TYPED_ORDER"


class Order(BaseModel):
    id: int
    customer: str
    placed_at: datetime


class OrderWithCoupon(Order):
    coupon: str


class OrderWithOptionalCoupon(Order):
    coupon: str | None = None


@dataclass
class Receipt:
    order_id: int
    customer: str
    handled_as: str


DEPLOYS: dict[str, type[Order]] = {
    "": Order,
    "coupon": OrderWithCoupon,
    "optional": OrderWithOptionalCoupon,
}


def register(app: Runlane, order: type[Order] = Order) -> Runlane:
    def ship(ctx: TaskContext, order: Order) -> Receipt:
        return Receipt(order.id, order.customer, type(order).__name__)

    app.task(ship, name=SHIP, payload_type=order)
    return app


app = register(Runlane.from_env(), DEPLOYS[os.environ.get(ORDER_ENV, "")])
