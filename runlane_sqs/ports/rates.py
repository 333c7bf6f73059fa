"""The rate store port: each rate limit's scope and its theoretical arrival time (TAT),
beside the runs (:mod:`runlane_sqs.core.rates`). Adapters:
:mod:`runlane_sqs.adapters.dynamodb.rates` (DynamoDB, or the in-memory DynamoDB of
:mod:`runlane_sqs.testing`).
"""

from __future__ import annotations

from typing import Protocol

from runlane_sqs.core.rates import Rate, RateRecord


class RateStore(Protocol):
    """Rate records of one environment."""

    def reserve(self, rate: Rate, *, cost: int, not_before_us: int) -> int:
        """Reserve the next start in ``rate``'s scope for a run of ``cost`` that may start at
        ``not_before_us`` (µs since the epoch) at the earliest, and return the turn's
        start (:func:`runlane_sqs.core.rates.next_start`): one atomic update, no read, never a
        conflict with another claim."""
        ...

    def reserve_at(self, rate: Rate, *, cost: int, at_us: int) -> int | None:
        """Reserve a start in ``rate``'s scope starting exactly at ``at_us`` if the scope allows
        a start then, and return ``None``; else change nothing and return the earliest
        start it allows (:func:`runlane_sqs.core.rates.take_at`)."""
        ...

    def read(self, scope: str) -> RateRecord | None:
        """The record of ``scope`` (``None``: no run reserved a start there yet)."""
        ...

    def reset(self, scope: str, now_us: int) -> bool:
        """Drop the starts reserved after ``now_us`` in ``scope`` (its TAT back to now, a
        deploy relaxed its limit); whether there were any."""
        ...

    def scopes(self) -> list[str]:
        """Every scope with a record (a deploy's sweep: it reads them all)."""
        ...
