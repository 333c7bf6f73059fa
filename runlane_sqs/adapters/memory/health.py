"""Health reads in memory, for tests: the same partitions and bounds as DynamoDB, so a
bounded read stops where the DynamoDB store's would."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from runlane_sqs.adapters.dynamodb.codec import run_state_attributes
from runlane_sqs.core.clock import to_epoch_ms
from runlane_sqs.core.health import Count, GroupTally
from runlane_sqs.core.indexes import shard_of, status_group
from runlane_sqs.core.model import Run
from runlane_sqs.ports.health import PassRecord

MILLISECOND = timedelta(milliseconds=1)


class InMemoryHealthStore:
    """Bounded reads over the run store's runs (under its lock) and the last pass."""

    def __init__(
        self, environment: str, lock: threading.Lock, runs: Callable[[], list[Run]]
    ) -> None:
        self.environment = environment
        self._lock = lock
        self._runs = runs
        self._last: PassRecord | None = None

    def tally(
        self, groups: Sequence[tuple[str, datetime | None]], per_partition: int
    ) -> list[GroupTally]:
        with self._lock:
            runs = self._runs()
        tallies = []
        for group, since in groups:
            partitions: dict[int, list[Run]] = defaultdict(list)
            for run in runs:
                if status_group(run.status) == group and (since is None or run.created_at >= since):
                    partitions[shard_of(run.id, group)].append(run)
            created: list[datetime] = []
            complete_from: datetime | None = None
            for listed in partitions.values():
                listed.sort(key=lambda r: (r.created_at, r.id), reverse=True)
                read = listed[:per_partition]
                created.extend(run.created_at for run in read)
                if len(listed) > per_partition:
                    oldest = read[-1].created_at + MILLISECOND
                    complete_from = max(complete_from or oldest, oldest)
            tallies.append(GroupTally(group, tuple(created), complete_from))
        return tallies

    def overdue(self, until: datetime, per_partition: int) -> Count:
        until_ms = to_epoch_ms(until)
        with self._lock:
            runs = self._runs()
        partitions: dict[str, int] = defaultdict(int)
        for run in runs:
            state = run_state_attributes(run)
            if state.get("agenda_pk") and state["agenda_at"] <= until_ms:
                partitions[state["agenda_pk"]] += 1
        return Count(
            sum(min(n, per_partition) for n in partitions.values()),
            more=any(n > per_partition for n in partitions.values()),
        )

    def save_pass(self, record: PassRecord) -> None:
        with self._lock:
            if self._last is None or self._last.finished_at < record.finished_at:
                self._last = record

    def last_pass(self) -> PassRecord | None:
        with self._lock:
            return self._last
