"""An in-memory run store with the same conditional semantics as DynamoDB.

Public API for users' unit tests (see :mod:`runlane_sqs.testing`); the contract tests
run the same bodies against this store and the DynamoDB one.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.codec import (
    event_from_map,
    event_to_map,
    run_from_wire,
    run_state_attributes,
    run_to_wire,
    wait_partition,
)
from runlane_sqs.adapters.dynamodb.cursors import (
    STRING,
    KeyShape,
    agenda_key,
    decode_cursor,
    encode_cursor,
    waits_key,
)
from runlane_sqs.adapters.memory.bulk import InMemoryOperationStore
from runlane_sqs.adapters.memory.groups import InMemoryGroupStore
from runlane_sqs.adapters.memory.health import InMemoryHealthStore
from runlane_sqs.adapters.memory.ordering import InMemoryOrderStore
from runlane_sqs.adapters.memory.rates import InMemoryRateStore
from runlane_sqs.adapters.memory.schedules import InMemoryScheduleStore
from runlane_sqs.adapters.memory.slots import InMemorySlotStore
from runlane_sqs.core.batches import Append, Fill
from runlane_sqs.core.claims import HintedClaim
from runlane_sqs.core.clock import EPOCH, to_epoch_ms
from runlane_sqs.core.debounce import Collapse
from runlane_sqs.core.errors import (
    ConfigurationError,
    ConflictError,
    InvalidTransaction,
    LeaseLost,
    StorageUnavailable,
)
from runlane_sqs.core.indexes import AgendaKind, agenda_pk, listed_at
from runlane_sqs.core.limits import MAX_TRANSACTION_ACTIONS
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import LEASED_STATUSES, Lease, Run, RunEvent, WaitKind
from runlane_sqs.core.ordering import Place
from runlane_sqs.core.rate_deploys import Spacing
from runlane_sqs.core.tokens import Token, TokenDecision, TokenNotFound, token_agenda_entry
from runlane_sqs.core.values import (
    ENVELOPE_MARK,
    PIN_DURATION,
    RELEASE_GRACE,
    ObjectRecord,
    Reference,
    added_references,
    decode_json,
    generation_of,
    moved_record,
    new_generation,
    references_in,
    run_references,
    stored_text,
)
from runlane_sqs.ports.keys import KeyClaim, KeyConflict, KeyHolder, KeyKind
from runlane_sqs.ports.store import RunQuery
from runlane_sqs.ports.transactions import Action, Cancelled, Refusal, RefusalReason

FAILED = RefusalReason.CONDITION_FAILED


def _json_copy(value: object) -> object:
    """``value`` as DynamoDB would give it back (its stored text decoded again)."""
    return None if value is None else decode_json(stored_text(value))


def _as_stored(run: Run, payload_text: str, items: list[str] | None = None) -> Run:
    """``run`` as DynamoDB would give it back: through the same codec (a batch's
    ``items`` as its item holds them)."""
    wire = run_to_wire(run, [], payload_text)
    if items is not None:
        wire["batch_items"] = {"L": [{"S": text} for text in items]}
    return replace(run_from_wire(wire), watched=run.watched)


def _event_as_stored(event: RunEvent) -> RunEvent:
    return event_from_map(event_to_map(event))


# Cursors have the shape of DynamoDB's (one key per query), so a cursor the DynamoDB
# store refuses is refused here too; listing keeps one position across statuses.
AgendaPosition = tuple[Decimal, str]
"""Where an agenda page ended: its ``agenda_at`` and ``pk``."""


def _agenda_start(cursor: str | None, partition: str) -> AgendaPosition | None:
    key = decode_cursor(cursor, agenda_key(partition))
    return (Decimal(key["agenda_at"]["N"]), key["pk"]["S"]) if key else None


def _after(position: tuple[int, str], start: AgendaPosition | None) -> bool:
    return start is None or (Decimal(position[0]), position[1]) > start


def _agenda_cursor(partition: str, at_ms: int, pk: str, sk: str) -> str | None:
    key = {"pk": pk, "sk": sk, "agenda_pk": partition}
    return encode_cursor({**{k: {"S": v} for k, v in key.items()}, "agenda_at": {"N": str(at_ms)}})


def _created_sk(run: Run) -> str:
    return keys.created_sk(to_epoch_ms(run.created_at), run.id)


def _listing_key(environment: str) -> KeyShape:
    """Where a page of the in-memory listing ended: one position across statuses."""
    return KeyShape({"environment": STRING, "created_sk": STRING}, ("environment", environment))


@dataclass
class _Stored:
    run: Run
    payload_text: str
    events: list[RunEvent] = field(default_factory=list)
    items: list[str] | None = None
    """A batch run's items as kept (its first is ``payload_text``)."""

    def keep(self, run: Run) -> Run:
        """Store ``run`` (its payload as this record keeps it); returns it as stored."""
        self.run = _as_stored(run, self.payload_text, self.items)
        return self.run


@dataclass(frozen=True)
class _Key:
    run_id: str
    expires_at_s: int | None
    claimed_at: datetime


Creation = tuple[Run, RunEvent, str, Sequence[KeyClaim]]
"""A new run as a transaction of the in-memory store holds it: the run, its first event,
its payload's text and its key claims."""
MEMORY = "(in memory)"
"""The table name of the in-memory store's actions."""


class InMemoryTransactions:
    """Transactions of new runs only: the caller's own writes are to DynamoDB tables,
    which this store cannot hold (a clear refusal). Each run's actions are its claims
    and the run, as in DynamoDB, so refusals name the same indexes."""

    def __init__(self, store: InMemoryRunStore) -> None:
        self._store = store

    def creation_actions(
        self, run: Run, event: RunEvent, payload_text: str, claims: Sequence[KeyClaim]
    ) -> list[Action]:
        marks: list[Action] = [{"Put": {"TableName": MEMORY, "Claim": c}} for c in claims]
        creation: Creation = (run, event, payload_text, tuple(claims))
        return [*marks, {"Put": {"TableName": MEMORY, "Creation": creation}}]

    def check(self, actions: Sequence[Action]) -> None:
        for action in actions:
            body = next(iter(action.values()), None) if isinstance(action, dict) else None
            if not isinstance(body, dict) or body.get("TableName") != MEMORY:
                raise ConfigurationError(
                    "app.transaction() writes to your own DynamoDB tables: this app keeps "
                    "its runs in memory, where a transaction holds new runs only; test "
                    "your writes against DynamoDB (the moto server: docs/testing.md)"
                )
        if len(actions) > MAX_TRANSACTION_ACTIONS:
            raise InvalidTransaction(
                f"a transaction holds at most {MAX_TRANSACTION_ACTIONS} actions, this one "
                f"{len(actions)}"
            )

    def commit(self, actions: Sequence[Action], token: str) -> None:
        self.check(actions)
        self._store.create_together(
            [a["Put"]["Creation"] for a in actions if "Creation" in a["Put"]]
        )


class InMemoryRunStore:
    """Runs in a dict, guarded by a lock; every write checks what DynamoDB would check."""

    def __init__(self, environment: str = "dev") -> None:
        self.environment = environment
        self._runs: dict[str, _Stored] = {}
        self._keys: dict[tuple[KeyKind, str, str], _Key] = {}
        self._lock = threading.Lock()
        self.object_records = InMemoryObjectRecords(environment)
        """The counts of the references to each object of the payload bucket."""
        self.tokens = InMemoryTokenStore(environment, self.object_records)
        """The environment's tokens."""
        self.keys = InMemoryKeyStore(self._keys, self._lock)
        """The environment's idempotency and singleton keys."""
        self.progress = InMemoryProgressStore()
        """Where maintenance's passes stopped."""
        self.schedules = InMemoryScheduleStore(environment)
        """The environment's schedules."""
        self.slots = InMemorySlotStore(environment, self._lock, self._all_runs)
        """The environment's concurrency slot records."""
        self.orders = InMemoryOrderStore(self._lock, self.slots)
        """The environment's ordering keys."""
        self.health = InMemoryHealthStore(environment, self._lock, self._all_runs)
        """Bounded reads for the console and ``app.health``; the last pass's report."""
        self.groups = InMemoryGroupStore(environment, self._lock, self._stored_run)
        """The environment's groups."""
        self.rates = InMemoryRateStore(self._lock)
        """The environment's rate limit records."""
        self.operations = InMemoryOperationStore(environment)
        """The environment's bulk operations."""
        self.transactions = InMemoryTransactions(self)
        """Transactions of new runs only (the caller's writes are to DynamoDB tables)."""

    def create_run(
        self,
        run: Run,
        event: RunEvent,
        payload_text: str,
        claims: Sequence[KeyClaim] = (),
        place: Place | None = None,
    ) -> None:
        now_s = int(run.created_at.timestamp())
        with self._lock:
            for claim in claims:
                held = self._held(claim, now_s)
                if held is not None:
                    raise KeyConflict(claim, held.run_id)
            if run.id in self._runs:
                raise ConflictError(run.id, self._runs[run.id].run)
            self._store_new(run, event, payload_text, claims, place)

    def create_together(self, creations: Sequence[Creation]) -> None:
        """Store new runs together or none: a transaction of new runs only. Raises
        :class:`~runlane_sqs.ports.transactions.Cancelled` with a refusal per held key
        or existing run, at its action's index (each run's claims, then the run)."""
        with self._lock:
            refusals: list[Refusal] = []
            index = 0
            for run, _, _, claims in creations:
                now_s = int(run.created_at.timestamp())
                for claim in claims:
                    held = self._held(claim, now_s)
                    if held is not None:
                        refusals.append(
                            Refusal(index, FAILED, "ConditionalCheckFailed", "", held.run_id)
                        )
                    index += 1
                if run.id in self._runs:
                    refusals.append(Refusal(index, FAILED, "ConditionalCheckFailed", "", run.id))
                index += 1
            if refusals:
                raise Cancelled(refusals)
            for run, event, payload_text, claims in creations:
                self._store_new(run, event, payload_text, claims, None)

    def _held(self, claim: KeyClaim, now_s: int) -> _Key | None:
        """The key item ``claim`` cannot take over (``None``: the key is free to it)."""
        held = self._keys.get((claim.kind, claim.task, claim.key))
        if (
            held is None
            or (held.expires_at_s is not None and held.expires_at_s < now_s)
            or held.run_id == claim.previous_owner
        ):
            return None
        return held

    def _store_new(
        self,
        run: Run,
        event: RunEvent,
        payload_text: str,
        claims: Sequence[KeyClaim],
        place: Place | None,
    ) -> None:
        stored = _as_stored(run, payload_text)
        holds = run_references(stored) if payload_text.startswith(ENVELOPE_MARK) else None
        if holds:
            self.object_records.check_holds(holds)
        if place is not None:
            self.orders.take_place(run, place)
        for claim in claims:
            expires = int(claim.expires_at.timestamp()) if claim.expires_at else None
            self._keys[(claim.kind, claim.task, claim.key)] = _Key(run.id, expires, run.created_at)
        items = [payload_text] if run.batch_key else None
        self._runs[run.id] = _Stored(stored, payload_text, [_event_as_stored(event)], items)
        if holds:
            self.object_records.add_holds(holds)

    def get_run(self, run_id: str) -> Run | None:
        with self._lock:
            stored = self._runs.get(run_id)
            return stored.run if stored else None

    def get_events(self, run_id: str) -> list[RunEvent]:
        with self._lock:
            stored = self._runs.get(run_id)
            return list(stored.events) if stored else []

    def get_history(self, run_id: str) -> tuple[Run, list[RunEvent]] | None:
        with self._lock:
            stored = self._runs.get(run_id)
            return (stored.run, list(stored.events)) if stored else None

    def apply(self, transition: Transition) -> Run:
        with self._lock:
            stored = self._runs.get(transition.run_id)
            current = stored.run if stored else None
            if stored is None or current is None or current.seq != transition.before.seq:
                raise ConflictError(transition.run_id, current)
            fence = transition.fence
            if fence is not None and (current.lease is None or current.lease.token != fence):
                raise ConflictError(transition.run_id, current)
            stored_state = run_state_attributes(current)
            seen_state = run_state_attributes(transition.before)
            if any(stored_state[name] != seen_state[name] for name in transition.guard):
                raise ConflictError(transition.run_id, current)
            holds = added_references(transition.before, transition.after)
            if holds:
                self.object_records.check_holds(holds)
            self.slots.take_and_free(transition)
            self.orders.leave(transition)
            after = replace(transition.after, watched=current.watched)
            stored.keep(after)
            stored.events.extend(_event_as_stored(e) for e in transition.events)
            if holds:
                self.object_records.add_holds(holds)
            return stored.run

    def _not_started(self, run_id: str, holds: Callable[[Run], bool]) -> _Stored:
        """The stored run a write that holds only before it starts (a collapse, an
        append, a fill) may change: not started and ``holds``; raises
        :class:`ConflictError` with the stored run otherwise. Under the lock."""
        stored = self._runs.get(run_id)
        if stored is None or not stored.run.not_started or not holds(stored.run):
            raise ConflictError(run_id, stored.run if stored else None)
        return stored

    def collapse(self, collapse: Collapse) -> Run:
        with self._lock:
            stored = self._not_started(
                collapse.run_id,
                lambda run: (
                    run.debounce_key == collapse.key
                    and (collapse.seen is None or run.collapsed == collapse.seen)
                ),
            )
            current = stored.run
            after = current.with_changes(
                due_at=collapse.due_at,
                wake_at=collapse.wake_at,
                review_at=None,
                line_at=None,
                publishes=0,
                updated_at=collapse.now,
                collapsed=current.collapsed + 1,
            )
            stored.payload_text = collapse.payload_text
            return stored.keep(after)

    def append_item(self, append: Append) -> Run:
        with self._lock:
            stored = self._not_started(append.run_id, lambda run: run.batch_key == append.key)
            items, current = stored.items, stored.run
            if (
                items is None
                or len(items) >= append.size
                or sum(len(t.encode()) for t in items) + append.item_bytes > append.max_bytes
            ):
                raise ConflictError(append.run_id, current)
            items.append(append.item_text)
            after = current.with_changes(
                updated_at=append.now, collapsed=current.collapsed + 1, created=False
            )
            return stored.keep(after)

    def fill_batch(self, fill: Fill) -> Run:
        with self._lock:
            stored = self._not_started(
                fill.run_id,
                lambda run: (
                    run.batch_key == fill.key and run.due_at is not None and run.due_at > fill.now
                ),
            )
            current = stored.run
            after = current.with_changes(
                due_at=fill.now,
                wake_at=fill.wake_at,
                review_at=None,
                line_at=None,
                publishes=0,
                updated_at=fill.now,
            )
            return stored.keep(after)

    def claim_hinted(self, claim: HintedClaim) -> Run:
        with self._lock:
            stored = self._runs.get(claim.run_id)
            current = stored.run if stored else None
            if stored is None or current is None or not claim.holds(current):
                raise ConflictError(claim.run_id, current)
            transition = claim.transition(current)
            after = transition.after
            if claim.keeps_listing():  # as on DynamoDB: the agenda entry stays
                after = replace(after, review_at=current.review_at)
            stored.keep(after)
            stored.events.extend(_event_as_stored(e) for e in transition.events)
            return stored.run

    def renew_lease(self, run: Run, lease: Lease) -> Run:
        with self._lock:
            stored = self._runs.get(run.id)
            current = stored.run if stored else None
            if (
                stored is None
                or current is None
                or current.status not in LEASED_STATUSES
                or current.lease is None
                or current.lease.token != lease.token
            ):
                raise LeaseLost(run.id)
            # as on DynamoDB: the agenda entry stays where it is
            stored.run = replace(current, lease=lease, review_at=listed_at(current))
            return stored.run

    def agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[Run], str | None]:
        start = _agenda_start(cursor, partition)
        until_ms = to_epoch_ms(until)
        with self._lock:
            listed: list[tuple[tuple[int, str], Run]] = []
            for stored in self._runs.values():
                state = run_state_attributes(stored.run)
                if state["agenda_pk"] != partition or state["agenda_at"] > until_ms:
                    continue
                position = (state["agenda_at"], keys.run_pk(self.environment, stored.run.id))
                if _after(position, start):
                    listed.append((position, stored.run))
        listed.sort(key=lambda pair: pair[0])
        page = listed[:limit]
        if not page or len(listed) <= limit:
            return [run for _, run in page], None
        at, pk = page[-1][0]
        return [run for _, run in page], _agenda_cursor(partition, at, pk, keys.RUN_SK)

    def watch_run(self, run_id: str) -> Run | None:
        with self._lock:
            stored = self._runs.get(run_id)
            if stored is None:
                return None
            stored.run = replace(stored.run, watched=True)
            return stored.run

    def waiting_runs(
        self, kind: WaitKind, target: str, limit: int, cursor: str | None
    ) -> tuple[list[str], str | None]:
        partition = keys.wait_pk(self.environment, kind.value, target)
        after = decode_cursor(cursor, waits_key(partition))
        with self._lock:
            ids = sorted(
                s.run.id for s in self._runs.values() if wait_partition(s.run) == partition
            )
        if after:
            ids = [i for i in ids if i > after["wait_sk"]["S"]]
        page = ids[:limit]
        if not page or len(ids) <= limit:
            return page, None
        last = {
            "pk": keys.run_pk(self.environment, page[-1]),
            "sk": keys.RUN_SK,
            "wait_pk": partition,
            "wait_sk": page[-1],
        }
        return page, encode_cursor({name: {"S": value} for name, value in last.items()})

    def list_runs(
        self, query: RunQuery, limit: int, cursor: str | None
    ) -> tuple[list[Run], str | None]:
        after = decode_cursor(cursor, _listing_key(self.environment))
        with self._lock:
            matching = [
                s.run
                for s in self._runs.values()
                if s.run.status in query.statuses
                and query.task in (None, s.run.task)
                and query.queue in (None, s.run.queue)
                and query.schedule in (None, s.run.schedule_id)
                and (query.created_after is None or s.run.created_at >= query.created_after)
                and (query.created_before is None or s.run.created_at <= query.created_before)
            ]
        matching.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        if after:
            position = after["created_sk"]["S"]
            matching = [r for r in matching if _created_sk(r) < position]
        page = matching[:limit]
        if len(matching) <= limit or not page:
            return page, None
        last = {"environment": {"S": self.environment}, "created_sk": {"S": _created_sk(page[-1])}}
        return page, encode_cursor(last)

    def delete_run(self, run: Run, now: datetime) -> bool:
        with self._lock:
            stored = self._runs.get(run.id)
            if stored is None or stored.run.seq != run.seq or not stored.run.is_terminal:
                return False
            del self._runs[run.id]
            self.object_records.release(run_references(stored.run), now)
            return True

    def _stored_run(self, run_id: str) -> Run | None:
        """A run as stored, read under the lock its caller holds."""
        stored = self._runs.get(run_id)
        return stored.run if stored else None

    def _all_runs(self) -> list[Run]:
        """Every stored run; the caller holds the lock."""
        return [s.run for s in self._runs.values()]

    # inspection helpers for tests
    def all_runs(self) -> list[Run]:
        with self._lock:
            return [s.run for s in self._runs.values()]


class InMemoryObjectRecords:
    """The object records of one environment (``store.object_records``): counts of the
    references to each object, kept as DynamoDB keeps them. The run store checks and
    adds a write's references under its own lock, in the write."""

    def __init__(self, environment: str) -> None:
        self.environment = environment
        self._records: dict[str, ObjectRecord] = {}
        self._lock = threading.Lock()

    def pin(self, sha256: str, size: int, now: datetime) -> str:
        with self._lock:
            found = self._records.get(sha256)
            until = now + PIN_DURATION
            if found is None:
                found = ObjectRecord(sha256, new_generation(), 0, size)
            self._records[sha256] = replace(found, pinned_until=until, listed_at=until)
            return found.generation

    def check_holds(self, references: Counter[Reference]) -> None:
        """Raise :class:`StorageUnavailable` unless every reference's record is there,
        in the reference's generation (what the write's condition says on DynamoDB)."""
        with self._lock:
            for reference in references:
                found = self._records.get(reference.sha256)
                if found is None or found.generation != generation_of(reference):
                    raise StorageUnavailable(moved_record(reference))

    def add_holds(self, references: Counter[Reference]) -> None:
        with self._lock:
            for reference, count in references.items():
                found = self._records[reference.sha256]
                self._records[reference.sha256] = replace(
                    found, holders=found.holders + count, listed_at=None
                )

    def release(self, references: Counter[Reference], now: datetime) -> None:
        """Take references off (a deleted run's); each record is listed for a look."""
        with self._lock:
            for reference, count in references.items():
                found = self._records.get(reference.sha256)
                if found is not None and found.generation == generation_of(reference):
                    self._records[reference.sha256] = replace(
                        found, holders=found.holders - count, listed_at=now + RELEASE_GRACE
                    )

    def object_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[ObjectRecord], str | None]:
        start = _agenda_start(cursor, partition)
        kind = AgendaKind.OBJECT.value
        with self._lock:
            listed = sorted(
                ((to_epoch_ms(r.listed_at), keys.object_pk(self.environment, r.sha256)), r)
                for r in self._records.values()
                if r.listed_at is not None
                and r.listed_at <= until
                and agenda_pk(self.environment, kind, r.sha256) == partition
            )
        listed = [(position, r) for position, r in listed if _after(position, start)]
        page = listed[:limit]
        if not page or len(listed) <= limit:
            return [r for _, r in page], None
        at, pk = page[-1][0]
        return [r for _, r in page], _agenda_cursor(partition, at, pk, keys.OBJECT_SK)

    def remove(self, record: ObjectRecord, now: datetime) -> bool:
        with self._lock:
            found = self._records.get(record.sha256)
            if found is None or found.generation != record.generation:
                return False
            if found.listed_at != record.listed_at:
                return False
            if found.removable(now):
                del self._records[record.sha256]
                return True
            if found.holders > 0:
                self._records[record.sha256] = replace(found, listed_at=None)
            return False

    # inspection helpers for tests
    def get(self, sha256: str) -> ObjectRecord | None:
        with self._lock:
            return self._records.get(sha256)


class InMemoryTokenStore:
    """The tokens of one environment (``store.tokens``)."""

    def __init__(self, environment: str, object_records: InMemoryObjectRecords) -> None:
        self.environment = environment
        self._tokens: dict[str, Token] = {}
        self._lock = threading.Lock()
        self.object_records = object_records
        """Where a token's references are counted (the run store's)."""

    def create_token(self, token: Token) -> None:
        with self._lock:
            if token.id in self._tokens:
                raise ConflictError(token.id, None)
            holds = references_in([token.metadata])
            self.object_records.check_holds(holds)
            self._tokens[token.id] = token
            self.object_records.add_holds(holds)

    def get_token(self, token_id: str) -> Token | None:
        with self._lock:
            return self._tokens.get(token_id)

    def decide_token(self, decision: TokenDecision) -> Token:
        with self._lock:
            current = self._tokens.get(decision.token_id)
            if current is None:
                raise TokenNotFound(decision.token_id)
            decided = decision.applied_to(current)  # raises TokenAlreadyDecided
            stored = replace(decided, value=_json_copy(decided.value))
            holds = references_in([stored.value])
            self.object_records.check_holds(holds)
            self._tokens[decision.token_id] = stored
            self.object_records.add_holds(holds)
            return stored

    def finish_token_resume(self, token_id: str) -> None:
        with self._lock:
            current = self._tokens.get(token_id)
            if current is not None and current.is_decided:
                self._tokens[token_id] = replace(current, resuming=False)

    def token_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[Token], str | None]:
        start = _agenda_start(cursor, partition)
        with self._lock:
            listed: list[tuple[tuple[int, str], Token]] = []
            for token in self._tokens.values():
                entry = token_agenda_entry(token)
                if entry is None or entry[1] > until:
                    continue
                if agenda_pk(self.environment, entry[0], token.id) != partition:
                    continue
                position = (to_epoch_ms(entry[1]), keys.token_pk(self.environment, token.id))
                if _after(position, start):
                    listed.append((position, token))
        listed.sort(key=lambda pair: pair[0])
        page = listed[:limit]
        if not page or len(listed) <= limit:
            return [token for _, token in page], None
        at, pk = page[-1][0]
        return [token for _, token in page], _agenda_cursor(partition, at, pk, keys.TOKEN_SK)


class InMemoryKeyStore:
    """The idempotency and singleton keys of one environment (``store.keys``), shared
    with the run store, which claims a new run's keys with the run."""

    def __init__(self, held: dict[tuple[KeyKind, str, str], _Key], lock: threading.Lock) -> None:
        self._keys = held
        self._lock = lock

    def release_key(self, kind: KeyKind, task: str, key: str, run_id: str) -> None:
        with self._lock:
            held = self._keys.get((kind, task, key))
            if held is not None and held.run_id == run_id:
                del self._keys[(kind, task, key)]

    def get_key_owner(self, kind: KeyKind, task: str, key: str, now: datetime) -> str | None:
        holder = self.get_key_holder(kind, task, key, now)
        return holder.run_id if holder else None

    def get_key_holder(self, kind: KeyKind, task: str, key: str, now: datetime) -> KeyHolder | None:
        with self._lock:
            held = self._keys.get((kind, task, key))
        if held is None:
            return None
        ends = held.expires_at_s
        if ends is not None and ends < int(now.timestamp()):
            return None
        expires_at = None if ends is None else EPOCH + timedelta(seconds=ends)
        return KeyHolder(held.run_id, held.claimed_at, expires_at)

    def delete_key(self, kind: KeyKind, task: str, key: str) -> None:
        with self._lock:
            self._keys.pop((kind, task, key), None)


class InMemoryProgressStore:
    """Where maintenance's passes stopped (``store.progress``)."""

    def __init__(self) -> None:
        self._cursors: dict[str, str] = {}
        self._drained: dict[str, datetime] = {}
        self._rate_limits: dict[str, Spacing] | None = None
        self._lock = threading.Lock()

    def load_cursors(self) -> dict[str, str]:
        with self._lock:
            return dict(self._cursors)

    def save_cursor(self, partition: str, cursor: str | None) -> None:
        with self._lock:
            if cursor is None:
                self._cursors.pop(partition, None)
            else:
                self._cursors[partition] = cursor

    def load_drained(self) -> dict[str, datetime]:
        with self._lock:
            return dict(self._drained)

    def save_drained(self, queue: str, at: datetime) -> None:
        with self._lock:
            if queue not in self._drained or self._drained[queue] < at:
                self._drained[queue] = at

    def load_rate_limits(self) -> dict[str, Spacing] | None:
        with self._lock:
            return None if self._rate_limits is None else dict(self._rate_limits)

    def save_rate_limits(self, limits: Mapping[str, Spacing]) -> None:
        with self._lock:
            self._rate_limits = dict(limits)
