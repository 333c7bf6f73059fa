"""The order store port: ordering keys' order records and place entries, beside the runs.

A trigger takes a place and the write that finishes an ordered run leaves the line inside
the run store's own writes (:meth:`RunStore.create_run <runlane_sqs.ports.store.RunStore.
create_run>`, :meth:`RunStore.apply <runlane_sqs.ports.store.RunStore.apply>`); this port
reads what handing the turn on needs. Adapter: :mod:`runlane_sqs.adapters.dynamodb.
ordering` (DynamoDB, or the in-memory DynamoDB of :mod:`runlane_sqs.testing`). Each run
store hands out its order store as ``store.orders``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from runlane_sqs.core.ordering import OrderHead


class OrderStore(Protocol):
    """Ordering keys of one environment (:mod:`runlane_sqs.core.ordering`)."""

    def order_head(self, key: str) -> OrderHead:
        """The key's order record (a consistent read); an empty head if none."""
        ...

    def first_place(self, key: str) -> tuple[int, str] | None:
        """The lowest place still in the key's line and its run id (consistent), ``None``
        when every run of the key finished."""
        ...

    def unlist_order(self, key: str, listed_at: datetime) -> None:
        """Take the key's record off the agenda, unless a later finish listed it again
        (it is no longer listed at ``listed_at``)."""
        ...
