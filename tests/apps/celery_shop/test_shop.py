"""The shop's tests, as a Celery user writes them: they call the shop's services and
tasks and read the results; which app runs them is the conftest's business."""

import pytest

from tests.apps.celery_shop import services
from tests.apps.celery_shop.tasks import (
    GatewayTimeout,
    PaymentDeclined,
    WarehouseBusy,
    price_order,
    reserve_stock,
)

ITEMS = [
    {"sku": "mug", "quantity": 2, "unit_cents": 1250},
    {"sku": "tea", "quantity": 1, "unit_cents": 800},
]
WAIT = services.WAIT_SECONDS


def test_checkout_prices_reserves_charges_and_confirms():
    order = services.checkout("o-1", ITEMS, "visa", "ana@example.com")

    assert order["total_cents"] == 3300
    assert order["reserved"] == [
        {"sku": "mug", "reserved": 2, "tries": 1},
        {"sku": "tea", "reserved": 1, "tries": 1},
    ]
    assert order["charge"] == {"order_id": "o-1", "charged_cents": 3300, "tries": 1}
    confirmation = order["confirmation"]
    assert confirmation.get(timeout=WAIT) == {
        "order_id": "o-1",
        "sent_to": "ana@example.com",
        "lines": 2,
    }
    assert confirmation.ready() and confirmation.successful() and not confirmation.failed()
    assert confirmation.state == confirmation.status == "SUCCESS"
    assert confirmation.result["sent_to"] == "ana@example.com"
    assert confirmation.traceback is None


def test_a_busy_warehouse_is_tried_again_by_self_retry():
    order = services.checkout("o-2", ITEMS[:1], "visa", "ana@example.com", busy_for=2)

    assert order["reserved"] == [{"sku": "mug", "reserved": 2, "tries": 3}]


def test_a_warehouse_busy_past_max_retries_fails_with_the_retry_exception():
    result = reserve_stock.delay("mug", 1, busy_for=10)

    error = result.get(timeout=WAIT, propagate=False)

    assert isinstance(error, WarehouseBusy)
    assert str(error) == "warehouse busy for mug"
    assert result.state == "FAILURE" and result.failed()


def test_a_slow_gateway_is_tried_again_by_autoretry_for():
    result = services.charge("o-3", "slow", 500)

    assert result.get(timeout=WAIT) == {"order_id": "o-3", "charged_cents": 500, "tries": 2}


def test_a_declined_card_fails_at_once_with_its_exception():
    result = services.charge("o-4", "declined", 500)

    with pytest.raises(PaymentDeclined, match="card declined for order o-4"):
        result.get(timeout=WAIT)
    assert result.ready() and result.failed() and not result.successful()
    assert result.state == "FAILURE"
    assert isinstance(result.result, PaymentDeclined)
    assert "PaymentDeclined" in result.traceback


def test_an_offline_gateway_fails_once_the_retries_are_used_up():
    result = services.charge("o-5", "offline", 500)

    with pytest.raises(GatewayTimeout, match="gateway timed out charging order o-5"):
        result.get(timeout=WAIT)


def test_a_task_called_directly_runs_here_and_now():
    assert price_order(ITEMS) == {"total_cents": 3300, "lines": 2}
    assert reserve_stock("tea", 3) == {"sku": "tea", "reserved": 3, "tries": 1}
