"""Rate records in DynamoDB: one item per scope (``RATE#{env}#{scope}``, ``RATE``) with
its TAT (``tat``, µs since the epoch) and the limit that last moved it. A claim takes a
start with one conditional update and no read (:func:`runlane_sqs.core.rates.next_start`)."""

from __future__ import annotations

from typing import Any

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.cursors import Query, agenda_key, every_page
from runlane_sqs.adapters.dynamodb.errors import Refused, Send
from runlane_sqs.adapters.dynamodb.expressions import Expressions
from runlane_sqs.adapters.dynamodb.keys import agenda_partitions, named_agenda_pk
from runlane_sqs.adapters.dynamodb.requests import Request, query_agenda
from runlane_sqs.core.errors import StorageUnavailable
from runlane_sqs.core.indexes import NEVER_MS, AgendaKind
from runlane_sqs.core.rates import Rate, RateRecord, start_after


class DynamoRateStore:
    """The rate records of one environment, read through its run store's client."""

    def __init__(self, send: Send, query: Query, table: str, environment: str) -> None:
        self._send = send
        self._query = query
        self.table = table
        self.environment = environment
        self._seen: dict[str, int] = {}
        """The latest TAT this worker saw of each scope. A scope's TAT never moves back,
        so one seen at or after a start means the scope is busy then (a reset by a new
        limit aside: the guess it leads to then costs one refused request)."""

    def reserve(self, rate: Rate, *, cost: int, not_before_us: int) -> int:
        increment = cost * rate.interval_us
        x = Expressions()
        x.require(x.either(x.absent("tat"), x.compare("tat", "<", not_before_us)))
        idle = self._move(rate, x, not_before_us + increment, listed=True)
        x = Expressions()
        x.require(x.compare("tat", ">=", not_before_us))
        busy = self._move(rate, x, x.plus("tat", increment), ReturnValues="UPDATED_NEW")
        # busy for certain when a TAT seen here is still ahead (one request under a
        # backlog); else most likely idle, unless another worker reserved since
        busy_first = self._seen.get(rate.scope, -1) >= not_before_us
        for _ in range(RESERVE_ATTEMPTS):
            for was_busy in (busy_first, not busy_first):
                sent = self._send.conditional("update_item", busy if was_busy else idle)
                if isinstance(sent, Refused):
                    continue
                if not was_busy:
                    self._saw(rate.scope, not_before_us + increment)
                    return not_before_us
                tat = int(sent["Attributes"]["tat"]["N"])
                self._saw(rate.scope, tat)
                return start_after(rate, tat, now_us=not_before_us, cost=cost)
        raise StorageUnavailable(f"the reservations of {rate.scope} kept changing; try again")

    def reserve_at(self, rate: Rate, *, cost: int, at_us: int) -> int | None:
        increment = cost * rate.interval_us
        x = Expressions()
        x.require(x.either(x.absent("tat"), x.compare("tat", "<", at_us)))
        request = self._move(
            rate, x, at_us + increment, listed=True, ReturnValuesOnConditionCheckFailure="ALL_OLD"
        )
        for _ in range(RESERVE_ATTEMPTS):
            sent = self._send.conditional("update_item", request)
            if not isinstance(sent, Refused):
                return None
            tat = int((sent.item or {})["tat"]["N"])
            if tat - rate.tolerance_us > at_us:
                return tat - rate.tolerance_us
            # within the scope's tolerance: move on from the TAT just seen, if it holds
            x = Expressions()
            x.require(x.compare("tat", "=", tat))
            request = self._move(
                rate, x, tat + increment, ReturnValuesOnConditionCheckFailure="ALL_OLD"
            )
        raise StorageUnavailable(f"the reservations of {rate.scope} kept changing; try again")

    def read(self, scope: str) -> RateRecord | None:
        x = Expressions()
        x.project("tat", "interval_us", "tolerance_us")
        request = x.request(
            {"TableName": self.table, "Key": keys.rate_key(self.environment, scope)}
        )
        item = self._send("get_item", request).get("Item")
        if not item or "tat" not in item:
            return None
        numbers = [int(item[name]["N"]) for name in ("tat", "interval_us", "tolerance_us")]
        return RateRecord(scope, *numbers)

    def reset(self, scope: str, now_us: int) -> bool:
        x = Expressions()
        now = x.value(now_us)
        x.set("tat", now)
        x.require(x.compare("tat", ">", now))
        request = x.request(
            {"TableName": self.table, "Key": keys.rate_key(self.environment, scope)}
        )
        return not isinstance(self._send.conditional("update_item", request), Refused)

    def scopes(self) -> list[str]:
        found: list[str] = []
        prefix = keys.rate_key(self.environment, "")["pk"]["S"]
        for partition in agenda_partitions(self.environment, AgendaKind.RATE.value):
            request = query_agenda(self.table, partition, NEVER_MS, SCOPES_PAGE)
            for page in every_page(self._query, request, agenda_key(partition)):
                found += [item["pk"]["S"].removeprefix(prefix) for item in page.items]
        return sorted(found)

    def _move(
        self, rate: Rate, x: Expressions, tat: Any, *, listed: bool = False, **options: str
    ) -> Request:
        """The ``UpdateItem`` that sets ``rate``'s TAT to ``tat`` (a number or an
        operand), and the limit that moved it, if the conditions of ``x`` hold. With
        ``listed`` (the updates that may be a record's first: an idle scope's) it also
        lists the record on the agenda, where no scan finds it but a deploy's sweep does
        (``if_not_exists``: the index is written once per record); a busy scope's update
        leaves the listing alone."""
        x.set("tat", tat)
        x.set("interval_us", rate.interval_us)
        x.set("tolerance_us", rate.tolerance_us)
        x.set("scope", rate.scope)
        if listed:
            listing = named_agenda_pk(self.environment, AgendaKind.RATE, rate.scope)
            x.set("agenda_pk", x.if_not_exists("agenda_pk", listing))
            x.set("agenda_at", x.if_not_exists("agenda_at", NEVER_MS))
        request = {"TableName": self.table, "Key": keys.rate_key(self.environment, rate.scope)}
        return x.request({**request, **options})

    def _saw(self, scope: str, tat: int) -> None:
        if len(self._seen) >= SCOPES_REMEMBERED and scope not in self._seen:
            self._seen.clear()
        self._seen[scope] = max(tat, self._seen.get(scope, tat))


RESERVE_ATTEMPTS = 3
"""Tries of the idle and the busy update: each fails only when the other just held."""
SCOPES_PAGE = 500
"""Rate records read per query of a deploy's sweep."""
SCOPES_REMEMBERED = 10_000
"""Scopes whose TAT a worker remembers; past this it forgets them all."""
