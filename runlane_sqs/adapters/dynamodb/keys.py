"""Every DynamoDB key format, in one place.

Environment names, task names and run ids cannot contain ``#`` (see
:mod:`runlane_sqs.core.names`), so each key below splits unambiguously even though
idempotency and singleton keys may contain any printable character.
"""

from __future__ import annotations

from runlane_sqs.core.model import KeyKind

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
