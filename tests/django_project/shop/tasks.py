"""The shop's tasks: the worker imports this module (the backends' ``TASK_MODULES``)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.django_project.shop.models import Order

try:  # Django 6
    from django.tasks import TaskContext, task
except ImportError:
    from django_tasks import TaskContext, task


@task
def send_receipt(order_id: int) -> dict[str, Any]:
    """Reads the order the view wrote: the run must not start before its commit."""
    order = Order.objects.get(pk=order_id)
    order.receipt_sent = True
    order.save(update_fields=["receipt_sent"])
    return {"order": order.pk, "sent_to": order.email}


@task(queue_name="emails")
def shout(text: str, *, times: int = 1) -> str:
    return " ".join([text.upper()] * times)


@task
def refuse(reason: str) -> None:
    raise ValueError(reason)


@task
async def add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task(takes_context=True)
def introspect(context: TaskContext, label: str) -> dict[str, Any]:
    return {
        "label": label,
        "attempt": context.attempt,
        "result_id": context.task_result.id,
        "status": str(context.task_result.status),
    }


@task
def pair(left: Any, right: Any) -> tuple[Any, Any]:
    return (left, right)


@task
def relay(text: str) -> str:
    """Enqueues from the worker's thread (where Django builds backends of its own)."""
    return shout.enqueue(text).id


@task
def count_orders() -> dict[str, Any]:
    """Says whether the thread's database connection was open when the attempt began
    (one an earlier attempt left open), then uses it."""
    from django.db import connection  # noqa: PLC0415

    left_open = connection.connection is not None
    return {"left_open": left_open, "orders": Order.objects.count()}
