"""What tags cost (docs/performance.md, "Capacity model"; docs/tags.md, "Costs"), checked
against the code: a run with ``n`` tags makes ``n`` tag-index entries, all at its
trigger; no later write of the run touches a tag index's keys or what it projects; and
one tag value on every run of 10,000 runs/s keeps each of its partitions under
DynamoDB's limit of about 1,000 write units per second."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime

from runlane_sqs.adapters.dynamodb.items import TAG_INDEXES, TAG_KEY_ATTRIBUTES, table_definition
from runlane_sqs.adapters.dynamodb.keys import run_tag_keys, shard_count, tag_partitions
from runlane_sqs.adapters.dynamodb.runs import CLAIM_WRITES, run_state_attributes, run_to_wire
from runlane_sqs.core import machine
from runlane_sqs.core.indexes import TAG_SHARDS
from runlane_sqs.core.model import Run
from runlane_sqs.core.tags import MAX_TAGS

NOW = datetime(2030, 1, 1, tzinfo=UTC)
RUNS = 100_000
RUNS_PER_SECOND = 10_000
PARTITION_WRITE_UNITS = 1_000


def run_ids(count: int) -> list[str]:
    rng = random.Random(54)
    return [f"{rng.getrandbits(128):032x}" for _ in range(count)]


def tagged_run(run_id: str, tags: dict[str, str]) -> Run:
    run, _ = machine.new_run(
        run_id=run_id, environment="prod", task="t", queue="default", payload=None, now=NOW
    )
    return run.with_changes(tags=tags)


def test_a_run_with_n_tags_makes_n_tag_index_entries_when_it_is_created() -> None:
    for count in range(MAX_TAGS + 1):
        tags = {f"k{n}": f"v{n}" for n in range(count)}
        run = tagged_run(run_ids(1)[0], tags)
        item = run_to_wire(run, [], "null")
        entries = [name for name in TAG_KEY_ATTRIBUTES if name in item]
        assert entries == list(TAG_KEY_ATTRIBUTES[:count])  # one write unit each (< 1 KB)
        assert ("tags" in item) == bool(count)


def test_no_later_write_touches_a_tag_index() -> None:
    """Every write after the trigger (the claim, heartbeats, outcomes, waits) sets only
    state attributes: none is a tag index's key or projected attribute, so those writes
    cost the tag indexes nothing."""
    indexed = set()
    for index in table_definition("x")["GlobalSecondaryIndexes"]:
        if index["IndexName"] in TAG_INDEXES:
            indexed |= {key["AttributeName"] for key in index["KeySchema"]}
            indexed |= set(index["Projection"]["NonKeyAttributes"])
    assert indexed == {*TAG_KEY_ATTRIBUTES, "created_sk", "tags", "task", "queue"}
    state = set(run_state_attributes(tagged_run(run_ids(1)[0], {"customer": "42"})))
    assert not indexed & state
    assert not indexed & set(CLAIM_WRITES)


def test_one_tag_value_on_every_run_at_ten_thousand_runs_per_second_stays_spread() -> None:
    per_run = RUNS_PER_SECOND / RUNS
    load: Counter[str] = Counter()
    for run_id in run_ids(RUNS):
        run = tagged_run(run_id, {"tenant": "the-big-one"})
        for name, partition in run_tag_keys(run).items():
            load[f"{name}:{partition}"] += per_run  # one unit, once, at the trigger
    assert shard_count("tag") == TAG_SHARDS == 16
    assert len(load) == TAG_SHARDS
    assert set(load) <= {
        f"tag_pk_0:{p}" for _, p in tag_partitions("prod", "tenant", "the-big-one")
    }
    busiest, units = load.most_common(1)[0]
    # 10,000 runs/s / 16 shards = 625 on average; random ids spread within 10%
    assert units < PARTITION_WRITE_UNITS * 0.75, (busiest, units)


def test_a_tag_is_read_from_every_position_and_shard() -> None:
    partitions = tag_partitions("prod", "customer", "a#b=c")
    assert len(partitions) == MAX_TAGS * TAG_SHARDS == 64
    assert partitions[0] == (0, "prod#customer=a#b=c#0")
    run = tagged_run(run_ids(1)[0], {"a": "1", "customer": "a#b=c"})
    [(slot, partition)] = [
        (int(name[-1]), pk) for name, pk in run_tag_keys(run).items() if "customer" in pk
    ]
    assert slot == 1 and (slot, partition) in partitions  # its second tag by key
