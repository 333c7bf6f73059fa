"""The shop's code that calls its tasks, as a web handler would."""

from tests.apps.celery_shop.tasks import (
    charge_card,
    price_order,
    reserve_stock,
    send_confirmation,
)

WAIT_SECONDS = 60


def checkout(order_id, items, card, email, busy_for=0):
    """Price, reserve, charge, then confirm an order a second later; wait for each."""
    priced = price_order.delay(items).get(timeout=WAIT_SECONDS)
    reservations = [
        reserve_stock.apply_async(
            args=(item["sku"], item["quantity"]), kwargs={"busy_for": busy_for}
        )
        for item in items
    ]
    reserved = [result.get(timeout=WAIT_SECONDS) for result in reservations]
    charge = charge_card.apply_async(
        args=(order_id, card, priced["total_cents"]), queue="payments"
    ).get(timeout=WAIT_SECONDS)
    confirmation = send_confirmation.apply_async(
        kwargs={"order_id": order_id, "email": email, "lines": priced["lines"]}, countdown=1
    )
    return {
        "total_cents": priced["total_cents"],
        "reserved": reserved,
        "charge": charge,
        "confirmation": confirmation,
    }


def charge(order_id, card, amount_cents):
    """Start a charge and return its result handle."""
    return charge_card.delay(order_id, card, amount_cents)
