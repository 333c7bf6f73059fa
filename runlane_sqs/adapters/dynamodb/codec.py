"""Runs to DynamoDB items and back.

Times are stored as whole epoch milliseconds; failure and event data as compact JSON
text; payload, result, step and wait results and token values as their stored text
(:mod:`runlane_sqs.core.values`: compact JSON, or the envelope of a sealed value).
Index attributes are derived from the run's state here, so every write keeps the
indexes consistent with the state it writes.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, unquote

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.items import EventMap, RunItem, TokenItem
from runlane_sqs.core.clock import EPOCH, ONE_MS
from runlane_sqs.core.indexes import agenda_entry, agenda_pk, run_listing
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import (
    TERMINAL_STATUSES,
    EventType,
    Failure,
    Lease,
    Run,
    RunEvent,
    RunStatus,
    Slot,
    Wait,
    WaitKind,
)
from runlane_sqs.core.tokens import Token, TokenStatus, token_agenda_entry
from runlane_sqs.core.values import Sealed, decode_json, stored_text

AttributeMap = dict[str, Any]
"""An item in the low-level DynamoDB wire format (``{"name": {"S": ...}}``)."""


def compact_json(value: Any) -> str:
    """JSON text as stored: compact, Unicode kept as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# Every time an item holds is whole milliseconds since the epoch (the rule of
# core/clock.py's to_epoch_ms and from_epoch_ms), converted here, in the codec's inner
# loop over an item's attributes.


def _ms(at: datetime) -> int:
    return (at - EPOCH) // ONE_MS


def _ms_or_none(at: datetime | None) -> int | None:
    return (at - EPOCH) // ONE_MS if at is not None else None


def _time(ms: int) -> datetime:
    return EPOCH + ms * ONE_MS


def _at(ms: Any) -> datetime | None:
    return EPOCH + int(ms) * ONE_MS if ms is not None else None


def event_to_map(event: RunEvent) -> EventMap:
    return EventMap(  # type: ignore[no-untyped-call]
        seq=event.seq,
        type=event.type.value,
        at=_ms(event.at),
        attempt=event.attempt,
        data=compact_json(event.data) if event.data else None,
    )


def event_to_wire(event: RunEvent) -> AttributeMap:
    """An event in the wire format :func:`event_to_map` serialises to."""
    attributes: AttributeMap = {
        "seq": {"N": str(event.seq)},
        "type": {"S": event.type.value},
        "at": {"N": str(_ms(event.at))},
        "attempt": {"N": str(event.attempt)},
    }
    if event.data:
        attributes["data"] = {"S": compact_json(event.data)}
    return {"M": attributes}


def event_from_map(stored: EventMap) -> RunEvent:
    return RunEvent(
        seq=int(stored.seq),
        type=EventType(stored.type),
        at=_time(int(stored.at)),
        attempt=int(stored.attempt),
        data=json.loads(stored.data) if stored.data else {},
    )


_KEEPS_WAIT = frozenset({RunStatus.RELEASED, RunStatus.PARKED})
"""Statuses whose stored run keeps its wait (a parked run returns to it when unparked)."""


def run_state_attributes(run: Run) -> dict[str, Any]:
    """The python values of every state attribute (``None`` means absent)."""
    lease = run.lease
    listing = run_listing(run)
    waiting = run.waiting if run.status in _KEEPS_WAIT else None
    slot_wait = run.slot_wait if run.status.is_runnable else None
    return {
        "status": run.status.value,
        "seq": run.seq,
        "attempt": run.attempt,
        "updated_at": _ms(run.updated_at),
        "due_at": _ms_or_none(run.due_at),
        "lease_owner": lease.owner if lease else None,
        "lease_token": lease.token if lease else None,
        "lease_expires_at": _ms(lease.expires_at) if lease else None,
        "result": stored_text(run.result) if run.result is not None else None,
        "failure": compact_json(run.failure.to_json()) if run.failure else None,
        "deadline_at": _ms_or_none(run.deadline_at),
        "lease_losses": run.lease_losses or None,
        "wake_at": _ms_or_none(run.wake_at),
        "line_at": _ms_or_none(run.line_at),
        "publishes": run.publishes or None,
        "failures": run.failures or None,
        "waiting": compact_json(waiting.to_json()) if waiting else None,
        "parked_from": run.parked_from.value if run.parked_from else None,
        "parked_reason": run.parked_reason,
        "slots": compact_json([[s.scope, s.limit] for s in run.slots]) if run.slots else None,
        "slot_wait": slot_wait,
        "rate_start": _ms_or_none(run.rate_start),
        "app_version": run.app_version,
        "collapsed": run.collapsed or None,
        "expires_at": expiry_of(run),
        "turn_wait": 1 if run.turn_wait else None,
        "wait_pk": wait_partition(run),
        "wait_sk": wait_sort_key(run) if waiting or slot_wait else None,
        "status_pk": listing.status_pk,
        "agenda_pk": listing.agenda_pk,
        "agenda_at": _ms(listing.agenda_at) if listing.agenda_at else None,
    }


HISTORY_ATTRIBUTE = "events"
"""The run's events, appended to by every write that records one."""
INDEX_ATTRIBUTES = ("status_pk", "agenda_pk", "agenda_at", "wait_pk", "wait_sk")
MAP_ATTRIBUTES = ("wait_results", "steps")
"""Maps whose entries are only ever added: a write sets the new entries by path, so it
needs no knowledge of the others (index items do not carry these maps)."""


def map_key(name: str) -> str:
    """Step and wait names percent-encoded: a document path must not see ``.``, ``[``
    or ``]`` in a map key (they would read as nesting or a list index)."""
    return quote(name, safe="")


def wait_partition(run: Run) -> str | None:
    """Where a released run is listed on the waits index (time waits are not), or a
    runnable run that waits for a concurrency slot."""
    if run.slot_wait is not None and run.status.is_runnable:
        return keys.wait_pk(run.environment, keys.SLOT_WAIT, run.slot_wait)
    waiting = run.waiting
    if run.status is not RunStatus.RELEASED or waiting is None or waiting.target is None:
        return None
    if waiting.kind is WaitKind.TIME:
        return None
    return keys.wait_pk(run.environment, waiting.kind.value, waiting.target)


def wait_sort_key(run: Run) -> str:
    """Waiters for a slot are woken oldest first: their entries sort by creation time.
    Other waiters are all resumed at once; their entries are the run id."""
    if run.slot_wait is None:
        return run.id
    return keys.created_sk(_ms(run.created_at), run.id)


def map_additions(before: Run, after: Run) -> dict[str, dict[str, str]]:
    """New entries of each only-added map, as JSON text by key."""
    additions: dict[str, dict[str, str]] = {}
    for name in MAP_ATTRIBUTES:
        old, new = getattr(before, name), getattr(after, name)
        added = {map_key(k): stored_text(v) for k, v in new.items() if k not in old}
        if added:
            additions[name] = added
    return additions


"""Written on every transition, whatever the diff says, so indexes never go stale."""


def run_to_item(run: Run, events: list[RunEvent], payload_text: str) -> RunItem:
    created_ms = _ms(run.created_at)
    pk, created_sk = keys.run_pk(run.environment, run.id), keys.created_sk(created_ms, run.id)
    item = RunItem(
        pk=pk,
        sk=keys.RUN_SK,
        run_id=run.id,
        environment=run.environment,
        task=run.task,
        queue=run.queue,
        payload=None if run.batch_key else payload_text,
        batch_items=[payload_text] if run.batch_key else None,
        batch_bytes=len(payload_text.encode("utf-8")) if run.batch_key else None,
        created_at=created_ms,
        idempotency_key=run.idempotency_key,
        singleton_key=run.singleton_key,
        source_run_id=run.source_run_id,
        source_kind=run.source_kind,
        schedule_id=run.schedule_id,
        scheduled_for=_ms(run.scheduled_for) if run.scheduled_for else None,
        concurrency_key=run.concurrency_key,
        ordering_key=run.ordering_key,
        place=run.place,
        trace=run.trace,
        group_id=run.group_id,
        group_index=run.group_index,
        joined_group=run.joined_group,
        debounce_key=run.debounce_key,
        batch_key=run.batch_key,
        retention=int(run.retention.total_seconds()) if run.retention else None,
        events=[event_to_map(e) for e in events],
        steps={map_key(k): stored_text(v) for k, v in run.steps.items()},
        wait_results={map_key(k): stored_text(v) for k, v in run.wait_results.items()},
        created_sk=created_sk,
        **run_state_attributes(run),
    )
    return item


def run_to_wire(run: Run, events: list[RunEvent], payload_text: str) -> AttributeMap:
    wire: AttributeMap = run_to_item(run, events, payload_text).serialize()
    return wire


def item_from_wire(wire: AttributeMap) -> RunItem:
    item: RunItem = RunItem.from_raw_data(wire)
    return item


class _Attributes:
    """Reads one item's attributes straight from the wire format: every run attribute is
    a string, a number, or a map of strings. PynamoDB's model builds and copies an
    attribute object per value: 118 µs per claimed item against 18 µs read here
    (docs/performance.md, "Worker CPU")."""

    __slots__ = ("wire",)

    def __init__(self, wire: AttributeMap) -> None:
        self.wire = wire

    def text(self, name: str) -> str | None:
        value = self.wire.get(name)
        return value["S"] if value is not None and "S" in value else None

    def required_text(self, name: str) -> str:
        value = self.text(name)
        if value is None:
            raise ValueError(f"run item without {name!r}")
        return value

    def number(self, name: str) -> int | None:
        value = self.wire.get(name)
        return int(value["N"]) if value is not None and "N" in value else None

    def time(self, name: str) -> datetime | None:
        value = self.wire.get(name)
        return EPOCH + int(value["N"]) * ONE_MS if value is not None and "N" in value else None

    def required_time(self, name: str) -> datetime:
        value = self.time(name)
        if value is None:
            raise ValueError(f"run item without {name!r}")
        return value

    def json_map(self, name: str) -> dict[str, Any]:
        value = self.wire.get(name)
        if value is None or "M" not in value:
            return {}
        return {unquote(k): decode_json(v["S"]) for k, v in value["M"].items()}


def run_from_wire(wire: AttributeMap) -> Run:
    """The run an item holds. Its history is not part of a ``Run`` and is not decoded
    (it is the largest attribute, and every attempt write reads the item back)."""
    item = _Attributes(wire)
    lease = None
    token = item.text("lease_token")
    if token is not None:
        lease = Lease(
            owner=item.text("lease_owner") or "",
            token=token,
            expires_at=item.required_time("lease_expires_at"),
        )
    waiting, failure, parked_from = (
        item.text("waiting"),
        item.text("failure"),
        item.text("parked_from"),
    )
    payload, result = decode_json(item.text("payload")), decode_json(item.text("result"))
    if "batch_items" in wire:  # a batch: its items, in the order they were added
        payload = [decode_json(entry["S"]) for entry in wire["batch_items"]["L"]]
    run = Run(
        id=item.required_text("run_id"),
        environment=item.required_text("environment"),
        task=item.required_text("task"),
        queue=item.required_text("queue"),
        status=RunStatus(item.required_text("status")),
        payload=payload,
        deadline_at=item.time("deadline_at"),
        lease_losses=item.number("lease_losses") or 0,
        wake_at=item.time("wake_at"),
        line_at=item.time("line_at"),
        publishes=item.number("publishes") or 0,
        failures=item.number("failures") or 0,
        waiting=Wait.from_json(json.loads(waiting)) if waiting else None,
        wait_results=item.json_map("wait_results"),
        steps=item.json_map("steps"),
        watched=bool(item.number("watched")),
        source_run_id=item.text("source_run_id"),
        source_kind=item.text("source_kind"),
        schedule_id=item.text("schedule_id"),
        scheduled_for=item.time("scheduled_for"),
        concurrency_key=item.text("concurrency_key"),
        slots=_slots(item.text("slots")),
        slot_wait=item.text("slot_wait"),
        rate_start=item.time("rate_start"),
        ordering_key=item.text("ordering_key"),
        place=item.number("place"),
        turn_wait=bool(item.number("turn_wait")),
        trace=item.text("trace"),
        app_version=item.text("app_version"),
        group_id=item.text("group_id"),
        group_index=item.number("group_index"),
        joined_group=item.text("joined_group"),
        debounce_key=item.text("debounce_key"),
        batch_key=item.text("batch_key"),
        retention=_seconds(item.number("retention")),
        collapsed=item.number("collapsed") or 0,
        parked_from=RunStatus(parked_from) if parked_from else None,
        parked_reason=item.text("parked_reason"),
        created_at=item.required_time("created_at"),
        updated_at=item.required_time("updated_at"),
        seq=item.number("seq") or 0,
        attempt=item.number("attempt") or 0,
        due_at=item.time("due_at"),
        lease=lease,
        result=result,
        failure=Failure.from_json(json.loads(failure)) if failure else None,
        idempotency_key=item.text("idempotency_key"),
        singleton_key=item.text("singleton_key"),
    )
    return _with_review(run, item.time("agenda_at"))


TERMINAL_VALUES = frozenset(status.value for status in TERMINAL_STATUSES)


def run_in(response: dict[str, Any]) -> Run | None:
    """The run a ``GetItem`` response carries, if any."""
    wire = response.get("Item")
    return run_from_wire(wire) if wire else None


def applied(transition: Transition, response: dict[str, Any]) -> Run:
    """The stored run after a transition's ``UpdateItem``."""
    stored = response.get("Attributes")
    return run_from_wire(stored) if stored else transition.after


def _seconds(number: int | None) -> timedelta | None:
    return timedelta(seconds=number) if number is not None else None


def expiry_of(run: Run) -> int | None:
    """When DynamoDB's TTL may delete ``run`` (epoch seconds): its retention after it
    finished. ``None`` while it is unfinished, when it is kept until pruned, or when it
    references objects of the payload bucket (``runs prune`` takes their references
    off; a TTL deletion could not)."""
    if run.retention is None or run.status.value not in TERMINAL_VALUES:
        return None
    values = (run.payload, run.result, *run.steps.values(), *run.wait_results.values())
    if any(isinstance(v, Sealed) and v.reference is not None for v in values):
        return None
    return _ms(run.updated_at + run.retention) // 1000


def _slots(text: str | None) -> tuple[Slot, ...]:
    if not text:
        return ()
    return tuple(Slot(scope=str(scope), limit=int(limit)) for scope, limit in json.loads(text))


def _with_review(run: Run, listed: datetime | None) -> Run:
    """A run listed earlier than its agenda time carries that time as ``review_at``."""
    if listed is None:
        return run
    entry = agenda_entry(run)
    if entry is None or listed >= entry[1]:
        return run
    return run.with_changes(review_at=listed)


def events_from_item(item: RunItem) -> list[RunEvent]:
    return [event_from_map(stored) for stored in item.events or []]


def token_to_wire(token: Token) -> AttributeMap:
    entry = token_agenda_entry(token)
    item = TokenItem(
        pk=keys.token_pk(token.environment, token.id),
        sk=keys.TOKEN_SK,
        token_id=token.id,
        environment=token.environment,
        token_status=token.status.value,
        value=stored_text(token.value) if token.value is not None else None,
        metadata=stored_text(token.metadata) if token.metadata is not None else None,
        created_at=_ms(token.created_at),
        timeout_at=_ms_or_none(token.timeout_at),
        decided_at=_ms_or_none(token.decided_at),
        decision_trace=token.decision_trace,
        agenda_pk=agenda_pk(token.environment, entry[0], token.id) if entry else None,
        agenda_at=_ms(entry[1]) if entry else None,
    )
    wire: AttributeMap = item.serialize()
    return wire


def token_from_wire(wire: AttributeMap) -> Token:
    item: TokenItem = TokenItem.from_raw_data(wire)
    return Token(
        id=item.token_id,
        environment=item.environment,
        status=TokenStatus(item.token_status),
        created_at=_time(int(item.created_at)),
        timeout_at=_at(item.timeout_at),
        value=decode_json(item.value),
        metadata=decode_json(item.metadata),
        decided_at=_at(item.decided_at),
        resuming=item.agenda_pk is not None and item.token_status != TokenStatus.PENDING.value,
        decision_trace=item.decision_trace,
    )
