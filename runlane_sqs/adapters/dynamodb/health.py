"""Health reads in DynamoDB: bounded queries of the status and agenda indexes, and the
latest maintenance pass's report (``pk = MAINT#{env}``, ``sk = PASS``; docs/design/
storage.md, "Key formats").

Every read here is one page of each partition it looks at, sent at once, so what a
call costs depends on its bounds and never on how many runs the table holds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.cursors import QueryAll
from runlane_sqs.adapters.dynamodb.errors import Send
from runlane_sqs.adapters.dynamodb.expressions import Expressions
from runlane_sqs.adapters.dynamodb.items import STATUS_INDEX
from runlane_sqs.adapters.dynamodb.keys import agenda_partitions, shard_count
from runlane_sqs.adapters.dynamodb.requests import Request, query_agenda
from runlane_sqs.core.clock import from_epoch_ms, to_epoch_ms
from runlane_sqs.core.health import Count, GroupTally
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.ports.health import PassRecord


def query_created(table: str, partition: str, since_ms: int | None, limit: int) -> Request:
    """The creation positions of one status-index partition's newest runs."""
    x = Expressions()
    x.key(x.compare("status_pk", "=", partition))
    if since_ms is not None:
        x.key(x.compare("created_sk", ">=", f"{since_ms:013d}"))
    x.project("created_sk")
    return x.request(
        {"TableName": table, "IndexName": STATUS_INDEX, "ScanIndexForward": False, "Limit": limit}
    )


def count_agenda(table: str, partition: str, until_ms: int, limit: int) -> Request:
    """How many entries of one agenda partition are at or before ``until_ms``."""
    return {**query_agenda(table, partition, until_ms, limit), "Select": "COUNT"}


def _created_ms(position: str) -> int:
    return int(position[:13])


def _moment(ms: int | None) -> datetime | None:
    return None if ms is None else from_epoch_ms(ms)


class DynamoHealthStore:
    """Bounded reads of one environment's indexes and its last pass's report."""

    def __init__(self, send: Send, query_all: QueryAll, table: str, environment: str) -> None:
        self._send = send
        self._query_all = query_all
        self.table = table
        self.environment = environment

    def _partitions(self, group: str) -> list[str]:
        return [f"{self.environment}#{group}#{shard}" for shard in range(shard_count(group))]

    def tally(
        self, groups: Sequence[tuple[str, datetime | None]], per_partition: int
    ) -> list[GroupTally]:
        sent: list[Request] = []
        owners: list[int] = []
        for index, (group, since) in enumerate(groups):
            since_ms = None if since is None else to_epoch_ms(since)
            for partition in self._partitions(group):
                sent.append(query_created(self.table, partition, since_ms, per_partition))
                owners.append(index)
        created: list[list[datetime]] = [[] for _ in groups]
        complete_from: list[int | None] = [None for _ in groups]
        for owner, page in zip(owners, self._query_all(sent), strict=True):
            read = [_created_ms(item["created_sk"]["S"]) for item in page.items]
            created[owner].extend(from_epoch_ms(ms) for ms in read)
            if page.last_key and read:
                # older runs of this partition were not read: from one millisecond past
                # the oldest one read (others of that millisecond may be unread), all were
                oldest = min(read) + 1
                complete_from[owner] = max(complete_from[owner] or oldest, oldest)
        return [
            GroupTally(group, tuple(created[index]), _moment(complete_from[index]))
            for index, (group, _) in enumerate(groups)
        ]

    def overdue(self, until: datetime, per_partition: int) -> Count:
        partitions = agenda_partitions(self.environment, AgendaKind.RUN.value)
        sent = [
            count_agenda(self.table, partition, to_epoch_ms(until), per_partition)
            for partition in partitions
        ]
        pages = self._query_all(sent)
        return Count(sum(page.count for page in pages), more=any(page.last_key for page in pages))

    def save_pass(self, record: PassRecord) -> None:
        at_ms = to_epoch_ms(record.finished_at)
        x = Expressions()
        x.require(x.either(x.absent("finished_at"), x.compare("finished_at", "<", at_ms)))
        item = {
            "pk": {"S": keys.maintenance_pk(self.environment)},
            "sk": {"S": keys.PASS_SK},
            "pass_id": {"S": record.pass_id},
            "finished_at": {"N": str(at_ms)},
            "counts": {"S": json.dumps(record.counts, separators=(",", ":"))},
            "report": {"S": json.dumps(record.report, separators=(",", ":"))},
        }
        request = x.request({"TableName": self.table, "Item": item})
        self._send.conditional("put_item", request)  # refused: a later pass's is kept

    def last_pass(self) -> PassRecord | None:
        request = {
            "TableName": self.table,
            "Key": {
                "pk": {"S": keys.maintenance_pk(self.environment)},
                "sk": {"S": keys.PASS_SK},
            },
        }
        item = self._send("get_item", request).get("Item")
        if item is None:
            return None
        return PassRecord(
            pass_id=item["pass_id"]["S"],
            finished_at=from_epoch_ms(int(item["finished_at"]["N"])),
            counts=json.loads(item["counts"]["S"]),
            report=json.loads(item["report"]["S"]),
        )
