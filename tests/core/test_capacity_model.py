"""The capacity model of docs/performance.md, checked against the code: the index writes
a plain run makes (from the codec's own index attributes at each of its three writes),
and the spread of 100,000 runs' entries over the index partitions at 10,000 runs/s,
against DynamoDB's limit of about 1,000 write units per second per partition."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from runlane_sqs.adapters.dynamodb.keys import agenda_pk, shard_count, status_pk
from runlane_sqs.adapters.dynamodb.runs import CLAIM_WRITES, run_state_attributes
from runlane_sqs.core import machine
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.indexes import FINISHED_SHARDS, SHARDS, AgendaKind
from runlane_sqs.core.machine import HintedClaim, Transition
from runlane_sqs.core.model import Run, RunStatus
from runlane_sqs.core.wakeup import ClaimHint

NOW = datetime(2030, 1, 1, tzinfo=UTC)
CONFIG = RunlaneConfig()
RUNS = 100_000
RUNS_PER_SECOND = 10_000
PARTITION_WRITE_UNITS = 1_000
"""DynamoDB's write limit per partition of a table or an index, per second."""
INDEXES = {"agenda": ("agenda_pk", "agenda_at"), "by_status": ("status_pk",)}
"""Each index's key attributes (``by_status``'s sort key, ``created_sk``, never changes)."""


def run_ids(count: int) -> list[str]:
    rng = random.Random(14)
    return [f"{rng.getrandbits(128):032x}" for _ in range(count)]


def plain_run_states(run_id: str) -> list[dict[str, Any]]:
    """The stored state attributes of a plain run after its trigger, its claim on the
    wakeup's hint and its success (a claim writes only ``CLAIM_WRITES``, plus its agenda
    entry unless it keeps the run's listing)."""
    run, _ = machine.new_run(
        run_id=run_id,
        environment="prod",
        task="t",
        queue="default",
        payload=None,
        now=NOW,
        republish=CONFIG.republish,
    )
    run = replace(run, created=False)
    hint = ClaimHint.of(run)
    assert hint is not None
    claim = HintedClaim(
        "prod",
        run_id,
        "default",
        hint,
        "w",
        "tok",
        NOW + timedelta(seconds=1),
        CONFIG.lease_duration,
    )
    claimed = claim.blind()
    triggered = run_state_attributes(run)
    written = run_state_attributes(claimed.after)
    kept = CLAIM_WRITES if claim.keeps_listing() else tuple(written)
    after_claim = {**triggered, **{name: written[name] for name in kept}}
    running: Run = replace(claimed.after, review_at=run.review_at)
    success = machine.record_success(
        running, token="tok", result=None, now=NOW + timedelta(seconds=2)
    )
    assert isinstance(success, Transition)
    return [triggered, after_claim, run_state_attributes(success.after)]


def index_writes(states: list[dict[str, Any]]) -> dict[str, Counter[str]]:
    """Write units per index partition over the states (entries under 1 KB): a new entry
    1, a removed one 1, a moved one 2 (its old and its new partition); projected
    attributes never change here (both projections hold only unchanging ones)."""
    writes: dict[str, Counter[str]] = {index: Counter() for index in INDEXES}
    before: dict[str, Any] = {}
    for state in states:
        for index, key in INDEXES.items():
            old = tuple(before.get(name) for name in key)
            new = tuple(state.get(name) for name in key)
            if old == new:
                continue
            if old[0] is not None:
                writes[index][old[0]] += 1
            if new[0] is not None:
                writes[index][new[0]] += 1
        before = state
    return writes


def test_a_plain_run_writes_five_index_units_and_three_to_the_table() -> None:
    writes = index_writes(plain_run_states(run_ids(1)[0]))
    assert sum(writes["agenda"].values()) == 2  # listed at trigger, removed at the end
    assert sum(writes["by_status"].values()) == 3  # active at trigger, then succeeded
    # with the table's 3 units: 8 write units per plain run (docs/design/storage.md)


def test_each_run_writes_to_its_own_shard_of_each_partition_group() -> None:
    for run_id in run_ids(200):
        writes = index_writes(plain_run_states(run_id))
        for partition in (p for counter in writes.values() for p in counter):
            group, shard = partition.rsplit("#", 1)
            count = shard_count(group.split("#", 1)[1])
            assert int(shard) == int(run_id[:4], 16) % count, partition


def test_ten_thousand_runs_per_second_keep_every_partition_under_its_limit() -> None:
    # one run's write units per partition group, e.g. {"agenda:prod#run": 2, ...}
    pattern: Counter[str] = Counter()
    for index, writes in index_writes(plain_run_states(run_ids(1)[0])).items():
        for partition, units in writes.items():
            pattern[f"{index}:{partition.rsplit('#', 1)[0]}"] += units
    assert set(pattern) == {"agenda:prod#run", "by_status:prod#active", "by_status:prod#succeeded"}
    per_run = RUNS_PER_SECOND / RUNS  # runs/s each synthetic run stands for
    load: Counter[str] = Counter()
    for run_id in run_ids(RUNS):
        partitions = {
            "agenda:prod#run": agenda_pk("prod", AgendaKind.RUN, run_id),
            "by_status:prod#active": status_pk("prod", RunStatus.QUEUED, run_id),
            "by_status:prod#succeeded": status_pk("prod", RunStatus.SUCCEEDED, run_id),
        }
        for group, units in pattern.items():
            load[f"{group.split(':')[0]}:{partitions[group]}"] += units * per_run
    assert len(load) == 2 * SHARDS + FINISHED_SHARDS
    busiest, units = load.most_common(1)[0]
    # 10,000 runs/s * 2 units / 32 shards = 625 on average (1 unit / 16 shards for the
    # succeeded group: 625 too); random ids spread within 10%
    assert units < PARTITION_WRITE_UNITS * 0.75, (busiest, units)
