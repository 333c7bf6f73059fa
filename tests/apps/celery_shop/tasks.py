"""The shop's tasks, as a Celery user writes them."""

from tests.apps.celery_shop.celery_app import app


class WarehouseBusy(Exception):
    """The warehouse asks to call again."""


class GatewayTimeout(Exception):
    """The payment gateway did not answer in time."""


class PaymentDeclined(Exception):
    """The card was refused: retrying cannot help."""


@app.task
def price_order(items):
    """The order's total in cents."""
    total = sum(item["quantity"] * item["unit_cents"] for item in items)
    return {"total_cents": total, "lines": len(items)}


@app.task(bind=True, max_retries=2, default_retry_delay=1)
def reserve_stock(self, sku, quantity, busy_for=0):
    """Reserve ``quantity`` of ``sku``; the warehouse is busy for the first ``busy_for``
    tries."""
    if self.request.retries < busy_for:
        raise self.retry(exc=WarehouseBusy(f"warehouse busy for {sku}"), countdown=1)
    return {"sku": sku, "reserved": quantity, "tries": self.request.retries + 1}


@app.task(
    bind=True,
    autoretry_for=(GatewayTimeout,),
    retry_kwargs={"max_retries": 2, "countdown": 1},
    throws=(PaymentDeclined,),
    acks_late=True,
)
def charge_card(self, order_id, card, amount_cents):
    """Charge ``card``; the gateway times out once for a ``slow`` card and always for an
    ``offline`` one; a ``declined`` card is refused."""
    if card == "declined":
        raise PaymentDeclined(f"card declined for order {order_id}")
    if card == "offline" or (card == "slow" and self.request.retries == 0):
        raise GatewayTimeout(f"gateway timed out charging order {order_id}")
    return {"order_id": order_id, "charged_cents": amount_cents, "tries": self.request.retries + 1}


@app.task(ignore_result=False)
def send_confirmation(order_id, email, lines):
    """Send the order's confirmation mail."""
    return {"order_id": order_id, "sent_to": email, "lines": lines}
