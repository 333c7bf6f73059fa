"""The DynamoDB run store (sync, boto3)."""

from __future__ import annotations

import functools
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from runlane_sqs.adapters.aws import endpoint_of
from runlane_sqs.adapters.dynamodb import keys, requests, runs, tokens
from runlane_sqs.adapters.dynamodb.bulk import DynamoOperationStore
from runlane_sqs.adapters.dynamodb.cursors import (
    KeyShape,
    Query,
    QueryPage,
    agenda_key,
    invalid_cursor,
    page_of,
    starting_after,
    waits_key,
)
from runlane_sqs.adapters.dynamodb.errors import (
    Refused,
    Send,
    cancellation_reasons,
    refusal_of,
    refused_as_malformed,
    translate,
)
from runlane_sqs.adapters.dynamodb.groups import DynamoGroupStore
from runlane_sqs.adapters.dynamodb.health import DynamoHealthStore
from runlane_sqs.adapters.dynamodb.listing import list_run_keys, list_tagged_keys
from runlane_sqs.adapters.dynamodb.objects import (
    DynamoObjectRecords,
    hold_items,
    refused_holds,
    release_items,
)
from runlane_sqs.adapters.dynamodb.ordering import DynamoOrderStore, moved, trigger_items
from runlane_sqs.adapters.dynamodb.rates import DynamoRateStore
from runlane_sqs.adapters.dynamodb.replays import (
    landed_creation,
    refused_claim,
    refused_transition,
)
from runlane_sqs.adapters.dynamodb.requests import Request
from runlane_sqs.adapters.dynamodb.runs import (
    applied,
    events_from_item,
    item_from_wire,
    run_from_wire,
    run_in,
    run_to_wire,
)
from runlane_sqs.adapters.dynamodb.schedules import DynamoScheduleStore
from runlane_sqs.adapters.dynamodb.slots import DynamoSlotStore, apply_slotted
from runlane_sqs.adapters.dynamodb.tokens import token_from_wire, token_to_wire
from runlane_sqs.adapters.dynamodb.transactions import DynamoTransactions, creation_actions
from runlane_sqs.core.batches import Append, Fill
from runlane_sqs.core.clock import EPOCH, from_epoch_ms, to_epoch_ms
from runlane_sqs.core.debounce import Collapse
from runlane_sqs.core.errors import (
    ConflictError,
    LeaseLost,
    MissingResourceError,
    OrderMoved,
    StorageError,
    StorageUnavailable,
)
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.machine import HintedClaim, Transition
from runlane_sqs.core.model import KeyKind, Lease, Run, RunEvent, WaitKind
from runlane_sqs.core.ordering import Place
from runlane_sqs.core.progress import AttemptReport
from runlane_sqs.core.rate_deploys import Spacing
from runlane_sqs.core.tags import has_tags
from runlane_sqs.core.tokens import Token, TokenAlreadyDecided, TokenDecision, TokenNotFound
from runlane_sqs.core.values import (
    ENVELOPE_MARK,
    Reference,
    decode_json,
    moved_record,
    references_in,
    run_references,
)
from runlane_sqs.ports.keys import KeyClaim, KeyConflict, KeyHolder
from runlane_sqs.ports.store import RunQuery

log = logging.getLogger("runlane_sqs.store")
QUERY_THREADS = 8
"""Queries of one listing in flight at once (botocore's pool keeps 10 connections)."""
BATCH_GET_ATTEMPTS = 6
"""BatchGetItem requests for one page of runs before unprocessed keys are an error."""
BATCH_GET_FIRST_WAIT_SECONDS = 0.05
"""Wait before asking again for unprocessed keys, doubled each time (AWS's advice)."""


class Sender:
    """Sends the store's requests to ``client``, botocore's errors translated at the
    adapter edge (:func:`~.errors.translate`, called only when a request fails)."""

    def __init__(self, client: Any, table: str) -> None:
        self._client = client
        self._table = table

    @functools.cached_property
    def _endpoint(self) -> str | None:
        """Where the client sends requests (named in errors); read when first needed, so a
        lazily built client is not built by constructing the store, and then kept rather
        than read through the lazy client on every request."""
        return endpoint_of(self._client)

    def __call__(self, operation: str, request: Request) -> Any:
        try:
            return getattr(self._client, operation)(**request)
        except (ClientError, BotoCoreError) as exc:
            translate(exc, table=self._table, endpoint=self._endpoint)

    def conditional(self, operation: str, request: Request) -> dict[str, Any] | Refused:
        try:
            response: dict[str, Any] = self(operation, request)
        except ClientError as exc:
            return refusal_of(exc)
        return response


class DynamoRunStore:
    """Runs in one DynamoDB table, namespaced by environment."""

    sleep: Callable[[float], None] = staticmethod(time.sleep)
    """How the store waits between BatchGetItem retries (tests replace it)."""

    def __init__(self, client: Any, table: str, environment: str) -> None:
        self._client = client
        self._send: Send = Sender(client, table)
        self.table = table
        self.environment = environment
        self.schedules = DynamoScheduleStore(self._send, self._query, table, environment)
        """The environment's schedules, in the same table."""
        self.slots = DynamoSlotStore(self._send, self._query, table, environment)
        """The environment's concurrency slot records, in the same table."""
        self.orders = DynamoOrderStore(self._send, table, environment)
        """The environment's ordering keys, in the same table."""
        self.health = DynamoHealthStore(self._send, self._query_all, table, environment)
        """Bounded reads for the console and ``app.health``; the last pass's report."""
        self.tokens = DynamoTokenStore(self._send, self._query, table, environment)
        """The environment's tokens, in the same table."""
        self.keys = DynamoKeyStore(self._send, table, environment)
        """The environment's idempotency and singleton keys, in the same table."""
        self.progress = DynamoProgressStore(self._send, table, environment)
        """Where maintenance's passes stopped, in the same table."""
        self.groups = DynamoGroupStore(self._send, self._query, self._batch_get, table, environment)
        """The environment's groups, in the same table."""
        self.object_records = DynamoObjectRecords(self._send, self._query, table, environment)
        """The counts of the references to each object of the payload bucket."""
        self.rates = DynamoRateStore(self._send, self._query, table, environment)
        """The environment's rate limit records, in the same table."""
        self.operations = DynamoOperationStore(self._send, self._query, table, environment)
        """The environment's bulk operations."""
        self.transactions = DynamoTransactions(self._send, table, environment)
        """Transactions holding the caller's writes and new runs."""

    @property
    def client(self) -> Any:
        """The DynamoDB client the store sends its requests to."""
        return self._client

    def _query(
        self, request: Request, cursor: str | None = None, shape: KeyShape | None = None
    ) -> QueryPage:
        """One page of a ``Query``, after ``cursor`` (a key of ``shape``) when one is
        given (:class:`~.cursors.Query`). DynamoDB refusing one that carries the cursor's
        start key as malformed (``ValidationException``) raises
        :class:`~runlane_sqs.errors.InvalidCursor`: the rest of the request is the
        library's own, so the cursor is what was wrong."""
        request = starting_after(request, cursor, shape)
        try:
            return page_of(self._send("query", request))
        except StorageError as exc:
            if cursor and "ExclusiveStartKey" in request and refused_as_malformed(exc):
                raise invalid_cursor(cursor, f"DynamoDB refused it ({exc})") from exc
            raise

    def _query_all(self, sent: list[Request]) -> list[QueryPage]:
        """Send ``Query`` requests at once, up to ``QUERY_THREADS`` in flight (a listing
        reads every shard of a status group); their first pages come back in order and
        the first error is raised."""
        if len(sent) <= 1:
            return [self._query(request) for request in sent]
        with ThreadPoolExecutor(min(QUERY_THREADS, len(sent))) as pool:
            return list(pool.map(self._query, sent))

    def create_run(
        self,
        run: Run,
        event: RunEvent,
        payload_text: str,
        claims: Sequence[KeyClaim] = (),
        place: Place | None = None,
    ) -> None:
        if not claims and place is None and not payload_text.startswith(ENVELOPE_MARK):
            self._put_run(run, event, payload_text)  # nothing beside the run: one PutItem
            return
        actions = creation_actions(self.table, self.environment, run, event, payload_text, claims)
        made = len(claims) + 1  # the claims' and the run's; the holds come after
        if len(actions) == 1 and place is None:
            self._put_run(run, event, payload_text)
            return
        placed = trigger_items(self.table, run, place) if place is not None else []
        items = actions[:made] + placed + actions[made:]
        try:
            self._send("transact_write_items", {"TransactItems": items})
        except ClientError as exc:
            if place is not None and moved(exc, made):
                raise OrderMoved(place.key) from None
            reasons = cancellation_reasons(exc)
            if refused_holds(reasons, len(actions) - made):
                sealed = decode_json(payload_text)
                raise StorageUnavailable(
                    moved_record(next(iter(references_in([sealed]))))
                ) from None
            run_item = reasons[len(claims)].item if len(reasons) > len(claims) else None
            if not claims and landed_creation(run, event, payload_text, run_item):
                return
            self._raise_key_conflict(exc, run.id, claims)

    def _put_run(self, run: Run, event: RunEvent, payload_text: str) -> None:
        """Create ``run`` alone, with one conditional ``PutItem``; a put refused because it
        had landed already (a resend) is the run created."""
        request = runs.put_run(self.table, run_to_wire(run, [event], payload_text))
        sent = self._send.conditional("put_item", request)
        if isinstance(sent, Refused) and not landed_creation(run, event, payload_text, sent.item):
            raise _conflict(run.id, sent.item)

    def _raise_key_conflict(
        self, exc: ClientError, run_id: str, claims: Sequence[KeyClaim]
    ) -> None:
        reasons = cancellation_reasons(exc)
        for claim, reason in zip(claims, reasons, strict=False):
            if reason.condition_failed:
                owner = (reason.item or {}).get("run_id", {}).get("S")
                raise KeyConflict(claim, owner) from exc
        if len(reasons) > len(claims) and reasons[len(claims)].condition_failed:
            raise _conflict(run_id, reasons[len(claims)].item) from None
        raise exc

    def get_run(self, run_id: str) -> Run | None:
        response = self._send("get_item", runs.get_run(self.table, self.environment, run_id))
        return run_in(response)

    def get_events(self, run_id: str) -> list[RunEvent]:
        history = self.get_history(run_id)
        return history[1] if history else []

    def get_history(self, run_id: str) -> tuple[Run, list[RunEvent]] | None:
        response = self._send("get_item", runs.get_run(self.table, self.environment, run_id))
        wire = response.get("Item")
        return (run_from_wire(wire), events_from_item(item_from_wire(wire))) if wire else None

    def apply(self, transition: Transition) -> Run:
        beside = runs.beside_the_run(transition)
        if beside is not None:
            return apply_slotted(self._send, self.sleep, self.table, transition, beside)
        request = runs.apply_transition(self.table, transition)
        sent = self._send.conditional("update_item", request)
        if isinstance(sent, Refused):
            return refused_transition(transition, sent.item)
        return applied(transition, sent)

    def collapse(self, collapse: Collapse) -> Run:
        request = runs.collapse_run(self.table, self.environment, collapse)
        return self._update_unstarted(collapse.run_id, request)

    def append_item(self, append: Append) -> Run:
        request = runs.append_item(self.table, self.environment, append)
        return self._update_unstarted(append.run_id, request)

    def fill_batch(self, fill: Fill) -> Run:
        request = runs.fill_batch(self.table, self.environment, fill)
        return self._update_unstarted(fill.run_id, request)

    def _update_unstarted(self, run_id: str, request: Request) -> Run:
        """Send an update of a run that holds only before it starts; returns the stored
        run, or raises :class:`ConflictError` with the run the refusal found."""
        sent = self._send.conditional("update_item", request)
        if isinstance(sent, Refused):
            raise ConflictError(run_id, run_from_wire(sent.item) if sent.item else None)
        return run_from_wire(sent["Attributes"])

    def claim_hinted(self, claim: HintedClaim) -> Run:
        request = runs.claim_hinted(self.table, claim)
        sent = self._send.conditional("update_item", request)
        if isinstance(sent, Refused):
            return refused_claim(claim, sent.item)
        return run_from_wire(sent["Attributes"])

    def renew_lease(self, run: Run, lease: Lease) -> Run:
        request = runs.lease_renewal(self.table, run, lease)
        sent = self._send.conditional("update_item", request)
        if isinstance(sent, Refused):
            raise LeaseLost(run.id)
        return run_from_wire(sent["Attributes"])

    def report_progress(self, run: Run, token: str, report: AttemptReport) -> Run:
        request = runs.progress_report(self.table, run, token, report)
        sent = self._send.conditional("update_item", request)
        if isinstance(sent, Refused):
            raise LeaseLost(run.id)
        return run_from_wire(sent["Attributes"])

    def agenda_partitions(self, kind: AgendaKind) -> list[str]:
        return keys.agenda_partitions(self.environment, kind.value)

    def agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[Run], str | None]:
        request = requests.query_agenda(self.table, partition, to_epoch_ms(until), limit)
        page = self._query(request, cursor, agenda_key(partition))
        # the index holds no run state: read the listed runs themselves (consistently)
        listed = [{"pk": item["pk"], "sk": item["sk"]} for item in page.items]
        return self._batch_get(listed), page.cursor

    def watch_run(self, run_id: str) -> Run | None:
        request = runs.watch_run(self.table, self.environment, run_id)
        sent = self._send.conditional("update_item", request)
        if isinstance(sent, Refused):
            return None  # no such run
        return run_from_wire(sent["Attributes"])

    def waiting_runs(
        self, kind: WaitKind, target: str, limit: int, cursor: str | None
    ) -> tuple[list[str], str | None]:
        partition = keys.wait_pk(self.environment, kind.value, target)
        request = runs.query_waiters(self.table, partition, limit)
        page = self._query(request, cursor, waits_key(partition))
        prefix = keys.run_pk(self.environment, "")
        return [item["pk"]["S"][len(prefix) :] for item in page.items], page.cursor

    def list_runs(
        self, query: RunQuery, limit: int, cursor: str | None
    ) -> tuple[list[Run], str | None]:
        listing = list_tagged_keys if query.tags else list_run_keys
        try:
            run_keys, next_cursor = listing(
                self._query_all, self.table, self.environment, query, limit, cursor
            )
        except (StorageError, MissingResourceError) as exc:
            # DynamoDB refuses a missing index as malformed, moto as a missing resource
            if query.tags and "index" in str(exc.__cause__).lower():
                raise MissingResourceError(
                    f"DynamoDB table {self.table!r} has no tag indexes (tag_0 to tag_3), "
                    "which a listing by tag reads: add them with app.provision() or "
                    "`runlane-sqs provision`, or deploy infra/runlane.yaml one index per "
                    f"stack update (docs/tags.md, 'An existing table'); {exc}"
                ) from exc
            raise
        # a status group holds several statuses (``active``): keep the ones asked for
        wanted = set(query.statuses)
        return [
            run
            for run in self._batch_get(run_keys)
            if run.status in wanted
            and query.schedule in (None, run.schedule_id)
            and has_tags(run.tags, query.tags)
        ], next_cursor

    def get_histories(self, run_ids: Sequence[str]) -> dict[str, tuple[Run, list[RunEvent]]]:
        run_keys = [keys.run_key(self.environment, run_id) for run_id in run_ids]
        return {
            run_id: (run_from_wire(wire), events_from_item(item_from_wire(wire)))
            for run_id, wire in self._batch_items(run_keys).items()
        }

    def _batch_get(self, run_keys: list[dict[str, Any]]) -> list[Run]:
        """Full runs for index keys, in the keys' order."""
        found = self._batch_items(run_keys)
        prefix = keys.run_pk(self.environment, "")
        ids = [key["pk"]["S"][len(prefix) :] for key in run_keys]
        return [run_from_wire(found[i]) for i in ids if i in found]

    def _batch_items(self, run_keys: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Run items by id for ``run_keys`` (at most 100). Unprocessed keys (throttling)
        are asked for again after a growing wait; any still left raise
        :class:`~runlane_sqs.errors.StorageUnavailable` rather than shorten the page."""
        found: dict[str, dict[str, Any]] = {}
        pending = list(run_keys)
        for attempt in range(BATCH_GET_ATTEMPTS):
            if not pending:
                return found
            if attempt:
                self.sleep(BATCH_GET_FIRST_WAIT_SECONDS * 2 ** (attempt - 1))
            response = self._send("batch_get_item", runs.batch_get_runs(self.table, pending))
            for item in response.get("Responses", {}).get(self.table, []):
                found[item["run_id"]["S"]] = item
            pending = response.get("UnprocessedKeys", {}).get(self.table, {}).get("Keys", [])
        if not pending:
            return found
        raise StorageUnavailable(
            f"DynamoDB left {len(pending)} of {len(run_keys)} runs unread after "
            f"{BATCH_GET_ATTEMPTS} BatchGetItem requests (throttled); try again"
        )

    def delete_run(self, run: Run, now: datetime) -> bool:
        delete = runs.delete_run(self.table, run)
        holds = run_references(run)
        if holds:
            released = release_items(self.table, self.environment, holds, now)
            try:
                self._send(
                    "transact_write_items", {"TransactItems": [{"Delete": delete}, *released]}
                )
            except ClientError as exc:
                reasons = cancellation_reasons(exc)
                if reasons and reasons[0].condition_failed:
                    return False
                if not refused_holds(reasons, len(released)):
                    raise
                log.warning(
                    "run %s: an object record it references is gone or moved; deleting the "
                    "run without taking its references off",
                    run.id,
                    extra={"run_id": run.id},
                )
            else:
                return True
        sent = self._send.conditional("delete_item", delete)
        return not isinstance(sent, Refused)


class DynamoTokenStore:
    """The tokens of one environment, in the run table (``store.tokens``)."""

    def __init__(self, send: Send, query: Query, table: str, environment: str) -> None:
        self._send = send
        self._query = query
        self.table = table
        self.environment = environment

    def create_token(self, token: Token) -> None:
        put = tokens.put_token(self.table, token_to_wire(token))
        holds = references_in([token.metadata])
        if not holds:
            self._send("put_item", put)
            return
        items = [{"Put": put}, *hold_items(self.table, self.environment, holds)]
        self._send_holding(items, holds)

    def _send_holding(self, items: list[Request], holds: Counter[Reference]) -> None:
        """Send a token's write with the hold items of its references."""
        try:
            self._send("transact_write_items", {"TransactItems": items})
        except ClientError as exc:
            reasons = cancellation_reasons(exc)
            if refused_holds(reasons, len(items) - 1):
                raise StorageUnavailable(moved_record(next(iter(holds)))) from None
            raise

    def get_token(self, token_id: str) -> Token | None:
        request = tokens.get_token(self.table, self.environment, token_id)
        wire = self._send("get_item", request).get("Item")
        return token_from_wire(wire) if wire else None

    def decide_token(self, decision: TokenDecision) -> Token:
        request = tokens.decide_token(self.table, self.environment, decision)
        holds = references_in([decision.value])
        if holds:
            return self._decide_holding(decision, request, holds)
        sent = self._send.conditional("update_item", request)
        if not isinstance(sent, Refused):
            return token_from_wire(sent["Attributes"])
        if sent.item is None:
            raise TokenNotFound(decision.token_id)
        raise TokenAlreadyDecided(token_from_wire(sent.item))

    def _decide_holding(
        self, decision: TokenDecision, request: Request, holds: Counter[Reference]
    ) -> Token:
        """:meth:`decide_token` with the hold items of a large value: a transaction,
        which returns nothing, so the decided token is read back."""
        request = {k: v for k, v in request.items() if k != "ReturnValues"}
        items = [{"Update": request}, *hold_items(self.table, self.environment, holds)]
        try:
            self._send_holding(items, holds)
        except ClientError as exc:
            reasons = cancellation_reasons(exc)
            if not reasons or not reasons[0].condition_failed:
                raise
            current = reasons[0].item
            if current is None:
                raise TokenNotFound(decision.token_id) from None
            raise TokenAlreadyDecided(token_from_wire(current)) from None
        decided = self.get_token(decision.token_id)
        if decided is None:
            raise TokenNotFound(decision.token_id)
        return decided

    def finish_token_resume(self, token_id: str) -> None:
        request = tokens.finish_token_resume(self.table, self.environment, token_id)
        self._send.conditional("update_item", request)  # refused: still pending

    def token_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[Token], str | None]:
        request = requests.query_agenda(self.table, partition, to_epoch_ms(until), limit)
        page = self._query(request, cursor, agenda_key(partition))
        return [token_from_wire(item) for item in page.items], page.cursor


class DynamoKeyStore:
    """The idempotency and singleton keys of one environment (``store.keys``); a new
    run's keys are claimed with it, in :meth:`DynamoRunStore.create_run`."""

    def __init__(self, send: Send, table: str, environment: str) -> None:
        self._send = send
        self.table = table
        self.environment = environment

    def release_key(self, kind: KeyKind, task: str, key: str, run_id: str) -> None:
        pk = keys.key_pk(self.environment, kind, task, key)
        # refused: another run holds the key now, and keeps it
        self._send.conditional("delete_item", requests.release_key(self.table, pk, run_id))

    def get_key_owner(self, kind: KeyKind, task: str, key: str, now: datetime) -> str | None:
        holder = self.get_key_holder(kind, task, key, now)
        return holder.run_id if holder else None

    def get_key_holder(self, kind: KeyKind, task: str, key: str, now: datetime) -> KeyHolder | None:
        pk = keys.key_pk(self.environment, kind, task, key)
        item = self._send("get_item", requests.get_key(self.table, pk)).get("Item")
        if not item:
            return None
        expires = item.get("expires_at", {}).get("N")
        if expires is not None and int(expires) < to_epoch_ms(now) // 1000:
            return None  # past retention: TTL deletion can lag, the key is free
        ends = EPOCH + timedelta(seconds=int(expires)) if expires is not None else None
        return KeyHolder(
            str(item["run_id"]["S"]), from_epoch_ms(int(item["created_at"]["N"])), ends
        )

    def delete_key(self, kind: KeyKind, task: str, key: str) -> None:
        self._send(
            "delete_item",
            requests.delete_key(self.table, keys.key_pk(self.environment, kind, task, key)),
        )


class DynamoProgressStore:
    """Where maintenance's passes stopped, in one environment (``store.progress``)."""

    def __init__(self, send: Send, table: str, environment: str) -> None:
        self._send = send
        self.table = table
        self.environment = environment

    def load_cursors(self) -> dict[str, str]:
        response = self._send("query", requests.query_cursors(self.table, self.environment))
        prefix = keys.CURSOR_SK_PREFIX
        return {
            item["sk"]["S"][len(prefix) :]: item["cursor"]["S"]
            for item in response.get("Items", [])
            if item["sk"]["S"].startswith(prefix)
        }

    def save_cursor(self, partition: str, cursor: str | None) -> None:
        if cursor is None:
            self._send(
                "delete_item", requests.delete_cursor(self.table, self.environment, partition)
            )
        else:
            request = requests.put_cursor(self.table, self.environment, partition, cursor)
            self._send("put_item", request)

    def load_drained(self) -> dict[str, datetime]:
        response = self._send("query", requests.query_drained(self.table, self.environment))
        prefix = keys.DRAINED_SK_PREFIX
        return {
            item["sk"]["S"][len(prefix) :]: from_epoch_ms(int(item["drained_at"]["N"]))
            for item in response.get("Items", [])
        }

    def save_drained(self, queue: str, at: datetime) -> None:
        request = requests.put_drained(self.table, self.environment, queue, to_epoch_ms(at))
        self._send.conditional("put_item", request)  # refused: a later time is kept

    def load_rate_limits(self) -> dict[str, Spacing] | None:
        key = {"pk": {"S": keys.maintenance_pk(self.environment)}, "sk": {"S": keys.RATES_SK}}
        request = {"TableName": self.table, "Key": key, "ConsistentRead": True}
        item = self._send("get_item", request).get("Item")
        if not item:
            return None
        limits = json.loads(item["limits"]["S"])
        return {pattern: (int(i), int(o)) for pattern, (i, o) in limits.items()}

    def save_rate_limits(self, limits: Mapping[str, Spacing]) -> None:
        item = {
            "pk": {"S": keys.maintenance_pk(self.environment)},
            "sk": {"S": keys.RATES_SK},
            "limits": {"S": json.dumps({p: list(s) for p, s in sorted(limits.items())})},
        }
        self._send("put_item", {"TableName": self.table, "Item": item})


def _conflict(run_id: str, stored: dict[str, Any] | None) -> ConflictError:
    """A refused run write: the run changed (``stored``), or was never there."""
    current = run_from_wire(stored) if stored else None
    return ConflictError(current.id if current else run_id, current)
