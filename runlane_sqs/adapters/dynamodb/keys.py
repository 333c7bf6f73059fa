"""Every DynamoDB key format, in one place: each item's key, and the partitions of the
agenda and status indexes (how many partitions each kind spreads over is
:mod:`runlane_sqs.core.indexes`'s; where a run is listed, :func:`run_listing`).

Environment names, task names and run ids cannot contain ``#`` (see
:mod:`runlane_sqs.core.names`), so each key below splits unambiguously even though
idempotency and singleton keys may contain any printable character.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

from runlane_sqs.core.indexes import (
    ACTIVE,
    FEW_SHARDS,
    FINISHED_SHARDS,
    SHARDS,
    TAG_SHARDS,
    AgendaKind,
)
from runlane_sqs.core.machine import agenda_listing
from runlane_sqs.core.model import KeyKind, Run, RunStatus
from runlane_sqs.core.tags import MAX_TAGS

RUN_PREFIX = "RUN#"
RUN_SK = "RUN"
IDEMPOTENCY_PREFIX = "IDEM#"
SINGLETON_PREFIX = "SINGLETON#"
DEBOUNCE_PREFIX = "DEBOUNCE#"
BATCH_PREFIX = "BATCH#"
KEY_SK = "KEY"


def run_pk(environment: str, run_id: str) -> str:
    return f"{RUN_PREFIX}{environment}#{run_id}"


def run_key(environment: str, run_id: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": run_pk(environment, run_id)}, "sk": {"S": RUN_SK}}


def idempotency_pk(environment: str, task: str, key: str) -> str:
    return f"{IDEMPOTENCY_PREFIX}{environment}#{task}#{key}"


def singleton_pk(environment: str, task: str, key: str) -> str:
    return f"{SINGLETON_PREFIX}{environment}#{task}#{key}"


def key_pk(environment: str, kind: KeyKind, task: str, key: str) -> str:
    """The partition key of a claim on an idempotency, singleton, debounce or batch key."""
    if kind is KeyKind.IDEMPOTENCY:
        return idempotency_pk(environment, task, key)
    if kind is KeyKind.DEBOUNCE:
        return f"{DEBOUNCE_PREFIX}{environment}#{task}#{key}"
    if kind is KeyKind.BATCH:
        return f"{BATCH_PREFIX}{environment}#{task}#{key}"
    return singleton_pk(environment, task, key)


def key_item_key(pk: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": pk}, "sk": {"S": KEY_SK}}


TOKEN_PREFIX = "TOKEN#"
TOKEN_SK = "TOKEN"


def token_key(environment: str, token_id: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": f"{TOKEN_PREFIX}{environment}#{token_id}"}, "sk": {"S": TOKEN_SK}}


def token_pk(environment: str, token_id: str) -> str:
    return f"{TOKEN_PREFIX}{environment}#{token_id}"


def wait_pk(environment: str, kind: str, target: str) -> str:
    """The waits-index partition of runs waiting for ``target`` (a key, token or run id)."""
    return f"{environment}#{kind}#{target}"


GROUP_PREFIX = "GROUP#"
GROUP_SK = "GROUP"
CHUNK_SK_PREFIX = "ITEMS#"


def group_pk(environment: str, group_id: str) -> str:
    """The partition of a group's record and its item chunks."""
    return f"{GROUP_PREFIX}{environment}#{group_id}"


def group_key(environment: str, group_id: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": group_pk(environment, group_id)}, "sk": {"S": GROUP_SK}}


def chunk_key(
    environment: str, group_id: str, items_key: str, chunk: int
) -> dict[str, dict[str, str]]:
    """One chunk of the items an opening of the group wrote (``Group.items_key``)."""
    return {
        "pk": {"S": group_pk(environment, group_id)},
        "sk": {"S": f"{CHUNK_SK_PREFIX}{items_key}#{chunk:05d}"},
    }


OBJECT_PREFIX = "OBJECT#"
OBJECT_SK = "OBJECT"


def object_pk(environment: str, sha256: str) -> str:
    """The object record of the payload bucket's object whose bytes hash to ``sha256``."""
    return f"{OBJECT_PREFIX}{environment}#{sha256}"


def object_record_key(environment: str, sha256: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": object_pk(environment, sha256)}, "sk": {"S": OBJECT_SK}}


SLOT_WAIT = "slot"
"""The waits-index kind of runs waiting for a concurrency slot (target: the scope)."""
SLOT_PREFIX = "SLOT#"
SLOT_SK = "SLOT"


def slot_pk(environment: str, scope: str) -> str:
    return f"{SLOT_PREFIX}{environment}#{scope}"


def slot_key(environment: str, scope: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": slot_pk(environment, scope)}, "sk": {"S": SLOT_SK}}


RATE_PREFIX = "RATE#"
RATE_SK = "RATE"


def rate_key(environment: str, scope: str) -> dict[str, dict[str, str]]:
    """The record of a rate limit's scope (its TAT)."""
    return {"pk": {"S": f"{RATE_PREFIX}{environment}#{scope}"}, "sk": {"S": RATE_SK}}


def created_sk(created_at_ms: int, run_id: str) -> str:
    return f"{created_at_ms:013d}#{run_id}"


MAINTENANCE_PREFIX = "MAINT#"
CURSOR_SK_PREFIX = "CURSOR#"
SYNC_SK_PREFIX = "SCHEDULES#"
"""Beside the cursors: the schedule definitions an app's maintenance last synced."""
SCHEDULE_PREFIX = "SCHED#"


def schedule_pk(environment: str) -> str:
    """Every schedule of an environment is one item collection, sorted by id."""
    return f"{SCHEDULE_PREFIX}{environment}"


def schedule_key(environment: str, schedule_id: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": schedule_pk(environment)}, "sk": {"S": schedule_id}}


OPERATION_PREFIX = "BULK#"


def operation_pk(environment: str) -> str:
    """Every bulk operation of an environment is one item collection, sorted by id (which
    begins with the time it was started)."""
    return f"{OPERATION_PREFIX}{environment}"


def operation_key(environment: str, operation_id: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": operation_pk(environment)}, "sk": {"S": operation_id}}


def sync_sk(task_set: str) -> str:
    return f"{SYNC_SK_PREFIX}{task_set}"


def maintenance_pk(environment: str) -> str:
    return f"{MAINTENANCE_PREFIX}{environment}"


def cursor_sk(partition: str) -> str:
    return f"{CURSOR_SK_PREFIX}{partition}"


DRAINED_SK_PREFIX = "DRAINED#"
"""Beside the cursors: when maintenance last saw each queue drained."""


def drained_sk(queue: str) -> str:
    return f"{DRAINED_SK_PREFIX}{queue}"


RATES_SK = "RATE_LIMITS"
"""The rate limits maintenance last saw (docs/rate-limits.md, "Deploying a new limit")."""
PASS_SK = "PASS"
"""Beside the cursors: the report of the latest maintenance pass that finished."""


_COUNTS = {
    "succeeded": FINISHED_SHARDS,
    "failed": FINISHED_SHARDS,
    "cancelled": FINISHED_SHARDS,
    "token": FEW_SHARDS,
    "parked": FEW_SHARDS,
    "schedule": FEW_SHARDS,
    "slot": FEW_SHARDS,
    "group": FEW_SHARDS,
    "object": FEW_SHARDS,
    "rate": FEW_SHARDS,
    "bulk": 1,  # a few operations run at a time: one partition, one Query a pass
    "tag": TAG_SHARDS,
}


def shard_count(kind: str) -> int:
    """Partitions of an agenda kind or a status group, per environment."""
    return _COUNTS.get(kind, SHARDS)


def shard_of(item_id: str, kind: str) -> int:
    """Run and token ids are random hex, so their first digits spread the shards."""
    return int(item_id[:4], 16) % shard_count(kind)


def status_group(status: RunStatus) -> str:
    """Where a run of ``status`` is listed on the status index.

    Terminal and parked runs are listed by their status; every other unfinished run is
    listed as ``active``, so a claim, a retry or a release keeps the run's entry where
    it is (no index write) and only finishing (or parking) moves it."""
    if status.is_terminal or status is RunStatus.PARKED:
        return status.value
    return ACTIVE


def status_groups(statuses: Iterable[RunStatus]) -> list[str]:
    """The groups that hold runs of ``statuses``, each once, in the order first met."""
    return list(dict.fromkeys(status_group(status) for status in statuses))


def agenda_pk(environment: str, kind: str, item_id: str) -> str:
    """Run and token ids are random hex, so their first digits spread the shards."""
    return f"{environment}#{kind}#{shard_of(item_id, kind)}"


def named_agenda_pk(environment: str, kind: AgendaKind, name: str) -> str:
    """Schedule ids and slot scopes are names, not random hex: their digest spreads the
    shards."""
    digest = hashlib.blake2b(name.encode(), digest_size=4).hexdigest()
    return agenda_pk(environment, kind.value, digest)


def schedule_agenda_pk(environment: str, schedule_id: str) -> str:
    return named_agenda_pk(environment, AgendaKind.SCHEDULE, schedule_id)


def slot_agenda_pk(environment: str, scope: str) -> str:
    return named_agenda_pk(environment, AgendaKind.SLOT, scope)


def agenda_partitions(environment: str, kind: str) -> list[str]:
    """Every agenda partition of one environment and kind (what maintenance scans)."""
    return [f"{environment}#{kind}#{shard}" for shard in range(shard_count(kind))]


def status_pk(environment: str, status: RunStatus, run_id: str) -> str:
    """The status-index partition of one run: its status group and its shard."""
    group = status_group(status)
    return f"{environment}#{group}#{shard_of(run_id, group)}"


def status_partitions(environment: str, statuses: Iterable[RunStatus]) -> list[str]:
    """Every status-index partition that may hold runs of ``statuses``."""
    return [
        f"{environment}#{group}#{shard}"
        for group in status_groups(statuses)
        for shard in range(shard_count(group))
    ]


class RunListing(NamedTuple):
    """Where a run is listed on the table's indexes, and when: what every write of the
    run sets, so the indexes always agree with the state it writes."""

    status_pk: str
    """Its status-index partition (:func:`status_pk`)."""
    agenda_pk: str | None
    """Its agenda partition; ``None``: not on the agenda."""
    agenda_at: datetime | None
    """When it is listed on the agenda (:func:`listed_at`)."""


def run_listing(run: Run) -> RunListing:
    listing = agenda_listing(run)
    status = status_pk(run.environment, run.status, run.id)
    if listing is None:
        return RunListing(status, None, None)
    kind, at = listing
    return RunListing(status, agenda_pk(run.environment, kind, run.id), at)


TAG_KIND = "tag"


def tag_pk(environment: str, key: str, value: str, run_id: str) -> str:
    """The tag-index partition of one run's tag: ``{env}#{key}={value}#{shard}``. A key
    holds no ``=`` or ``#`` and the shard is after the last ``#``, so it splits
    unambiguously whatever the value holds."""
    return f"{environment}#{key}={value}#{shard_of(run_id, TAG_KIND)}"


def run_tag_keys(run: Run) -> dict[str, str]:
    """The tag-index key attributes of a run: its ``n``-th tag (by key) in the ``n``-th
    index's key (``tag_pk_{n}``)."""
    return {
        f"tag_pk_{slot}": tag_pk(run.environment, key, value, run.id)
        for slot, (key, value) in enumerate(sorted(run.tags.items()))
    }


def tag_partitions(environment: str, key: str, value: str) -> list[tuple[int, str]]:
    """Every (tag index, partition) that may hold runs tagged ``key=value``: the tag may
    be any run's first, second, ... tag, in any shard."""
    return [
        (slot, f"{environment}#{key}={value}#{shard}")
        for slot in range(TAG_SLOTS)
        for shard in range(shard_count(TAG_KIND))
    ]


TAG_SLOTS = MAX_TAGS
"""Tag indexes of the table: a run's ``n``-th tag is on the ``n``-th."""
