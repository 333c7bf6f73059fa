"""Creating runs: validation, key claims and the eager wakeup."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from runlane_sqs.core import machine
from runlane_sqs.core.agenda import RepublishPolicy
from runlane_sqs.core.model import JSON, Run, RunStatus
from runlane_sqs.core.names import check_key, new_run_id
from runlane_sqs.errors import RunlaneError
from runlane_sqs.ports import KeyClaim, KeyConflict, KeyKind, RunStore

MAX_KEY_TAKEOVERS = 3


@dataclass(frozen=True)
class TriggerRequest:
    """A validated trigger: everything needed to write the run."""

    task: str
    queue: str
    payload: JSON
    payload_json: str
    due_at: datetime | None
    idempotency_key: str | None
    singleton_key: str | None


def validate_keys(idempotency_key: object, singleton_key: object) -> tuple[str | None, str | None]:
    idem = check_key("idempotency", idempotency_key) if idempotency_key is not None else None
    single = check_key("singleton", singleton_key) if singleton_key is not None else None
    return idem, single


def holds_key(kind: KeyKind, owner: Run) -> bool:
    """Does ``owner`` still hold a key of ``kind``? (Released ones may be taken over.)"""
    if kind is KeyKind.IDEMPOTENCY:
        return owner.status is not RunStatus.FAILED
    return not owner.status.is_terminal


def create(
    store: RunStore,
    request: TriggerRequest,
    *,
    environment: str,
    now: datetime,
    idempotency_retention: timedelta,
    republish: RepublishPolicy,
) -> Run:
    """Write the run (with its keys) and return it, or the run that already holds a key."""
    run, event = machine.new_run(
        run_id=new_run_id(),
        environment=environment,
        task=request.task,
        queue=request.queue,
        payload=request.payload,
        now=now,
        due_at=request.due_at,
        idempotency_key=request.idempotency_key,
        singleton_key=request.singleton_key,
        republish=republish,
    )
    claims = _claims(request, now + idempotency_retention)
    for _ in range(MAX_KEY_TAKEOVERS):
        try:
            store.create_run(run, event, request.payload_json, claims)
            return run
        except KeyConflict as conflict:
            owner = store.get_run(conflict.owner) if conflict.owner else None
            if owner is not None and holds_key(conflict.claim.kind, owner):
                return owner
            claims = _replace_owner(claims, conflict.claim, conflict.owner)
    raise RunlaneError(f"could not take the keys of a new {request.task!r} run; try again")


def _claims(request: TriggerRequest, idempotency_expires_at: datetime) -> Sequence[KeyClaim]:
    claims: list[KeyClaim] = []
    if request.idempotency_key is not None:
        claims.append(
            KeyClaim(
                KeyKind.IDEMPOTENCY, request.task, request.idempotency_key, idempotency_expires_at
            )
        )
    if request.singleton_key is not None:
        claims.append(KeyClaim(KeyKind.SINGLETON, request.task, request.singleton_key))
    return claims


def _replace_owner(claims: Sequence[KeyClaim], lost: KeyClaim, owner: str | None) -> list[KeyClaim]:
    return [
        KeyClaim(c.kind, c.task, c.key, c.expires_at, previous_owner=owner) if c == lost else c
        for c in claims
    ]
