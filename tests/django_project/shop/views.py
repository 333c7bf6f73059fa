"""Place an order (the row and its receipt task in one ``transaction.atomic()``), read it,
read a task's result."""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from tests.django_project.shop.models import Order
from tests.django_project.shop.tasks import send_receipt

try:  # Django 6
    from django.tasks import task_backends
    from django.tasks.exceptions import TaskResultDoesNotExist
except ImportError:
    from django_tasks import task_backends
    from django_tasks.exceptions import TaskResultDoesNotExist


@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    """``{"email": ..., "backend": "default", "rollback": false}``: the order and the
    enqueue in one atomic block, rolled back at its end when asked."""
    body = json.loads(request.body)
    with transaction.atomic():
        order = Order.objects.create(email=body["email"])
        result = send_receipt.using(backend=body.get("backend", "default")).enqueue(order.pk)
        if body.get("rollback"):
            transaction.set_rollback(True)
    return JsonResponse({"order": order.pk, "result_id": result.id}, status=201)


@require_GET
def order(request: HttpRequest, order_id: int) -> JsonResponse:
    found = Order.objects.filter(pk=order_id).first()
    if found is None:
        return JsonResponse({"error": "no such order"}, status=404)
    return JsonResponse({"order": found.pk, "receipt_sent": found.receipt_sent})


@require_GET
def result(request: HttpRequest, alias: str, result_id: str) -> JsonResponse:
    try:
        found = task_backends[alias].get_result(result_id)
    except TaskResultDoesNotExist:
        return JsonResponse({"error": "no such result"}, status=404)
    shown: dict[str, Any] = {
        "id": found.id,
        "task": found.task.module_path,
        "status": str(found.status),
        "attempts": found.attempts,
        "errors": [
            {"exception": e.exception_class_path, "traceback": e.traceback} for e in found.errors
        ],
        "enqueued_at": found.enqueued_at.isoformat() if found.enqueued_at else None,
        "finished_at": found.finished_at.isoformat() if found.finished_at else None,
    }
    if found.status == "SUCCESSFUL":
        shown["return_value"] = found.return_value
    return JsonResponse(shown)
