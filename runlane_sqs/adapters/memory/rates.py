"""Rate records in memory, for tests: the same rules as DynamoDB's conditional updates
(:func:`runlane_sqs.core.rates.next_start`, :func:`~runlane_sqs.core.rates.start_at`), under
the run store's lock."""

from __future__ import annotations

import threading

from runlane_sqs.core.rates import Rate, RateRecord, next_start, start_at


class InMemoryRateStore:
    """Each scope's TAT in a dict, guarded by the run store's lock."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._tats: dict[str, int] = {}
        self._limits: dict[str, tuple[int, int]] = {}
        """Each scope's interval and tolerance, of the claim that last moved it."""

    def reserve(self, rate: Rate, *, cost: int, not_before_us: int) -> int:
        with self._lock:
            tat, start = next_start(
                rate, self._tats.get(rate.scope), cost=cost, not_before_us=not_before_us
            )
            self._tats[rate.scope] = tat
            self._limits[rate.scope] = (rate.interval_us, rate.tolerance_us)
            return start

    def reserve_at(self, rate: Rate, *, cost: int, at_us: int) -> int | None:
        with self._lock:
            tat, later = start_at(rate, self._tats.get(rate.scope), cost=cost, at_us=at_us)
            self._tats[rate.scope] = tat
            self._limits[rate.scope] = (rate.interval_us, rate.tolerance_us)
            return later

    def read(self, scope: str) -> RateRecord | None:
        with self._lock:
            if scope not in self._tats:
                return None
            return RateRecord(scope, self._tats[scope], *self._limits[scope])

    def reset(self, scope: str, now_us: int) -> bool:
        with self._lock:
            tat = self._tats.get(scope)
            if tat is None or tat <= now_us:
                return False
            self._tats[scope] = now_us
            return True

    def scopes(self) -> list[str]:
        with self._lock:
            return sorted(self._tats)
