"""Triggers that commit with the caller's own writes: ``app.transaction()``
(docs/transactions.md).

A transaction collects the caller's DynamoDB writes (``put``, ``update``, ``delete``,
``condition_check`` on their own tables) and new runs (``trigger``), and sends them as
one ``TransactWriteItems``: the runs exist if and only if the writes commit. Their
wakeups are published after the commit. A process that stops between the commit and the
publish leaves its runs listed on the agenda at their due time, so the next maintenance
pass publishes them (a wakeup sent twice is harmless: a worker claims a run once).

Keys and a retried commit:

- A run's idempotency and singleton keys are claimed in the same transaction. A key
  held by a run that still holds it cancels the transaction (:class:`~runlane_sqs.
  errors.TransactionCancelled`, ``held_by`` naming that run); a key released by its run
  (failed, or finished for a singleton) is taken over and the transaction sent again.
- Every commit carries a ``ClientRequestToken``: after :class:`~runlane_sqs.errors.
  StorageUnavailable` (the outcome unknown), :meth:`Transaction.commit` again sends the
  same request and writes nothing twice (DynamoDB keeps a token for 10 minutes).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any, Unpack

from boto3.dynamodb.types import TypeSerializer

from runlane_sqs.core import telemetry as t
from runlane_sqs.core.errors import (
    InvalidTransaction,
    RunlaneError,
    TransactionCancelled,
)
from runlane_sqs.core.model import JSON, Run
from runlane_sqs.engine.engine import Engine
from runlane_sqs.engine.tasks import Task
from runlane_sqs.engine.triggering import (
    MAX_KEY_TAKEOVERS,
    NewRun,
    TriggerOptions,
    holds_key,
    replace_owner,
)
from runlane_sqs.ports.keys import KeyClaim
from runlane_sqs.ports.transactions import Action, Cancelled, Refusal, RefusalReason

log = logging.getLogger("runlane_sqs")

TABLE_NAME = re.compile(r"^(arn:[\w-]+:dynamodb:[\w-]+:\d{12}:table/)?[A-Za-z0-9_.-]{3,255}$")
"""A table's name (or ARN), as DynamoDB allows it."""
TABLE_ARN = re.compile(r"^arn:[^:]*:dynamodb:[^:]*:[^:]*:table/([^/]*)")
"""A table's ARN (or an ARN below it, an index's): the table's name is its group."""
_serializer = TypeSerializer()


def _wire(values: Mapping[str, Any] | None, what: str) -> dict[str, Any]:
    """``values`` (Python values, as boto3's ``Table`` takes them) in DynamoDB's form."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise InvalidTransaction(f"{what} must be a mapping of names to values")
    wired: dict[str, Any] = {}
    for name, value in values.items():
        if not isinstance(name, str) or not name:
            raise InvalidTransaction(f"{what}: attribute names are non-empty strings")
        try:
            wired[name] = _serializer.serialize(value)
        except (TypeError, ValueError) as exc:
            raise InvalidTransaction(f"{what}: attribute {name!r}: {exc}") from None
    return wired


def _table(table: object) -> str:
    if not isinstance(table, str) or not TABLE_NAME.fullmatch(table):
        raise InvalidTransaction(
            f"a table name is 3 to 255 letters, digits, '_', '-' or '.' (or its ARN), not {table!r}"
        )
    return table


def table_name(table: str) -> str:
    """The name of the table ``table`` names, by name or by ARN."""
    found = TABLE_ARN.match(table)
    return found.group(1) if found else table


def _expression(
    body: dict[str, Any],
    condition: str | None,
    names: Mapping[str, str] | None,
    values: Mapping[str, Any] | None,
) -> dict[str, Any]:
    if condition is not None:
        body["ConditionExpression"] = condition
    if names:
        body["ExpressionAttributeNames"] = dict(names)
    if values:
        body["ExpressionAttributeValues"] = _wire(values, "expression values")
    return body


def described(action: Action) -> str:
    """An action of the caller's in words: ``Put into 'orders'``."""
    [(kind, body)] = action.items()
    table = body.get("TableName") if isinstance(body, dict) else None
    return f"{kind} into {table!r}" if kind == "Put" else f"{kind} on an item of {table!r}"


class Transaction:
    """The caller's writes and new runs, committed as one DynamoDB transaction.

    Use it as a context manager (``with app.transaction() as tx:``; ``async with`` in
    asyncio code): leaving the block commits, an exception in it sends nothing. Or call
    :meth:`commit` yourself, or send :meth:`items` in a request of your own and then call
    :meth:`committed`."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._actions: list[Action] = []
        self._new: list[NewRun] = []
        self._token = str(uuid.uuid4())
        self._committed: list[Run] | None = None

    # the caller's writes -----------------------------------------------------------

    def put(
        self,
        table: str,
        item: Mapping[str, Any],
        *,
        condition: str | None = None,
        names: Mapping[str, str] | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> None:
        """Put ``item`` (Python values: ``str``, ``int``, ``Decimal``, ``bytes``, lists,
        dicts, sets) into ``table``, if ``condition`` holds."""
        body = {"TableName": _table(table), "Item": _wire(item, "item")}
        self.add({"Put": _expression(body, condition, names, values)})

    def update(
        self,
        table: str,
        key: Mapping[str, Any],
        expression: str,
        *,
        condition: str | None = None,
        names: Mapping[str, str] | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> None:
        """Update the item of ``table`` at ``key`` with the update ``expression``."""
        body = {
            "TableName": _table(table),
            "Key": _wire(key, "key"),
            "UpdateExpression": expression,
        }
        self.add({"Update": _expression(body, condition, names, values)})

    def delete(
        self,
        table: str,
        key: Mapping[str, Any],
        *,
        condition: str | None = None,
        names: Mapping[str, str] | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> None:
        """Delete the item of ``table`` at ``key``, if ``condition`` holds."""
        body = {"TableName": _table(table), "Key": _wire(key, "key")}
        self.add({"Delete": _expression(body, condition, names, values)})

    def condition_check(
        self,
        table: str,
        key: Mapping[str, Any],
        condition: str,
        *,
        names: Mapping[str, str] | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> None:
        """Commit only if ``condition`` holds for the item of ``table`` at ``key``."""
        body = {"TableName": _table(table), "Key": _wire(key, "key")}
        self.add({"ConditionCheck": _expression(body, condition, names, values)})

    def add(self, action: Action) -> None:
        """Add an action in DynamoDB's low-level form, as ``TransactItems`` holds it
        (``{"Put": {"TableName": "orders", "Item": {"id": {"S": "42"}}}}``). An action
        on the run table is refused: runs are made by :meth:`trigger` and changed by the
        library alone."""
        self._open()
        if not isinstance(action, dict):
            raise InvalidTransaction(f"an action is a dict, not {type(action).__name__}")
        self._refuse_run_table(action)
        self._actions.append(action)

    def _refuse_run_table(self, action: Action) -> None:
        """Raise :class:`InvalidTransaction` if ``action`` names the run table (by name
        or ARN): a caller's write there could forge, rewrite or delete any
        environment's runs and keys, which no API of the library may be the way to."""
        run_table = table_name(self._engine.config.table)
        for kind, body in action.items():
            table = body.get("TableName") if isinstance(body, dict) else None
            if isinstance(table, str) and table_name(table) == run_table:
                raise InvalidTransaction(
                    f"a {kind} on the run table {table!r} is refused: a transaction holds "
                    "the caller's writes to their own tables; runs are made by tx.trigger "
                    "and changed by the library alone (docs/transactions.md)"
                )

    # runs ----------------------------------------------------------------------------

    def trigger(
        self, task: Task | str, payload: JSON = None, **options: Unpack[TriggerOptions]
    ) -> Run:
        """A run of ``task`` created by the commit (``idempotency_key``,
        ``singleton_key``, ``delay``, ``concurrency_key``, ``queue`` as for
        ``app.trigger``; not ``ordering_key``). Returns the run as the commit will store
        it. Everything is checked now; a large payload's object is written now (one
        nothing references until the commit is deleted by maintenance)."""
        self._open()
        new = self._engine.triggers.new_in_transaction(task, payload, **options)
        self._new.append(new)
        return new.run

    # committing ----------------------------------------------------------------------

    def items(self) -> list[Action]:
        """Every action :meth:`commit` sends, in its order: the caller's, then each run's
        (its key claims, its item, the counts of the objects its payload references),
        checked against DynamoDB's limits. Send them in one ``TransactWriteItems`` of
        your own (with more actions if you like), then call :meth:`committed`. Keys held
        by released runs are not taken over this way: such a request is cancelled."""
        actions = list(self._actions)
        store = self._engine.store.transactions
        for new in self._new:
            actions += store.creation_actions(new.run, new.event, new.payload_text, new.claims)
        store.check(actions)
        return actions

    def commit(self) -> list[Run]:
        """Send the transaction, then publish its runs' wakeups; returns the runs.
        Raises :class:`~runlane_sqs.errors.TransactionCancelled` (nothing was written),
        :class:`~runlane_sqs.errors.InvalidTransaction` (nothing was sent), or
        :class:`~runlane_sqs.errors.StorageUnavailable` (call it again: the same token
        makes a commit that landed a no-op)."""
        if self._committed is not None:
            return self._committed
        if not self._new:
            self._send()
            return self.committed()
        first = self._new[0].run
        with self._engine.observer.trigger(first.task, first.queue) as span:
            span.set({t.MESSAGING_BATCH_SIZE: len(self._new)})
            if span.trace and first.trace is None:  # the first commit's: its runs keep it
                self._new = [
                    replace(new, run=new.run.with_changes(trace=span.trace)) for new in self._new
                ]
            self._send()
            return self.committed()

    def _send(self) -> None:
        """Send the transaction (again after a released key was taken over)."""
        for _ in range(MAX_KEY_TAKEOVERS):
            try:
                self._engine.store.transactions.commit(self.items(), self._token)
            except Cancelled as cancelled:
                if self._landed(cancelled.refusals):
                    return
                self._token = str(uuid.uuid4())  # another request: a new token
                if not self._take_over(cancelled.refusals):
                    raise self._explained(cancelled.refusals) from None
                continue
            return
        raise RunlaneError("could not take the keys of the transaction's runs; try again")

    async def commit_async(self) -> list[Run]:
        """:meth:`commit` on a thread, for asyncio code."""
        import asyncio  # noqa: PLC0415 (loaded already: this runs on an event loop)

        return await asyncio.to_thread(self.commit)

    def committed(self) -> list[Run]:
        """After the transaction was committed (by :meth:`commit`, or by the caller with
        :meth:`items`): publish the runs' wakeups and return the runs."""
        if self._committed is not None:
            return self._committed
        runs = [new.run for new in self._new]
        self._committed = runs
        if runs:
            self._engine.publisher.publish_new(runs)
            self._engine.observer.triggered(runs)
        for run in runs:
            log.info(
                "triggered run %s of %s in a transaction",
                run.id,
                run.task,
                extra={"run_id": run.id, "task": run.task},
            )
        return runs

    # refusals -------------------------------------------------------------------------

    def _ours(self) -> list[tuple[str, int, KeyClaim | None]]:
        """The runs' actions, after the caller's: each in words, its run's place in
        ``_new`` and, for a key claim, the claim."""
        store = self._engine.store.transactions
        found: list[tuple[str, int, KeyClaim | None]] = []
        for place, new in enumerate(self._new):
            for claim in new.claims:
                words = f"the {claim.kind} key {claim.key!r} of task {claim.task!r}"
                found.append((words, place, claim))
            found.append((f"the new run {new.run.id} of {new.run.task!r}", place, None))
            made = store.creation_actions(new.run, new.event, new.payload_text, new.claims)
            holds = len(made) - len(new.claims) - 1
            found += [(f"the object of run {new.run.id}'s payload", place, None)] * holds
        return found

    def _landed(self, refusals: Sequence[Refusal]) -> bool:
        """Whether a refusal found one of the new runs stored: run ids are random, so
        only this transaction, sent before, can have written it (its answer was lost and
        DynamoDB no longer knew the token, or an emulator ignores it), and the rest of
        it was written with it."""
        mine, ours = len(self._actions), self._ours()
        for refusal in refusals:
            at = refusal.index - mine
            is_run = 0 <= at < len(ours) and ours[at][2] is None
            if is_run and refusal.owner == self._new[ours[at][1]].run.id:
                log.info(
                    "run %s: its transaction was refused on resending because it had "
                    "already been committed (the first answer was lost); carrying on",
                    refusal.owner,
                    extra={"run_id": refusal.owner},
                )
                return True
        return False

    def _take_over(self, refusals: Sequence[Refusal]) -> bool:
        """Whether every refusal is a key whose run released it: then the claims are
        made again, over that run."""
        mine, ours = len(self._actions), self._ours()
        taken: list[tuple[int, KeyClaim, str | None]] = []
        for refusal in refusals:
            at = refusal.index - mine
            claim = ours[at][2] if 0 <= at < len(ours) else None
            if refusal.reason is not RefusalReason.CONDITION_FAILED or claim is None:
                return False
            owner = self._engine.store.get_run(refusal.owner) if refusal.owner else None
            if owner is not None and holds_key(claim.kind, owner):
                return False
            taken.append((ours[at][1], claim, refusal.owner))
        for place, claim, owner_id in taken:
            new = self._new[place]
            self._new[place] = replace(new, claims=replace_owner(new.claims, claim, owner_id))
        return bool(taken)

    def _explained(self, refusals: Sequence[Refusal]) -> TransactionCancelled:
        mine, ours = len(self._actions), self._ours()
        reasons: list[str] = []
        held_by: str | None = None
        for refusal in refusals:
            at = refusal.index - mine
            if at < 0:
                what = f"action {refusal.index}, {described(self._actions[refusal.index])}"
                reasons.append(f"{what}: {_said(refusal)}")
                continue
            words, _, claim = ours[at] if at < len(ours) else ("a new run's action", 0, None)
            if claim is not None and refusal.reason is RefusalReason.CONDITION_FAILED:
                held_by = held_by or refusal.owner
                reasons.append(f"{words} is held by run {refusal.owner}")
            else:
                reasons.append(f"action {refusal.index}, {words}: {_said(refusal)}")
        codes = ["None"] * (mine + len(ours))
        for refusal in refusals:
            if refusal.index < len(codes):
                codes[refusal.index] = refusal.code
        return TransactionCancelled(reasons, codes, held_by)

    # context manager -----------------------------------------------------------------

    def _open(self) -> None:
        if self._committed is not None:
            raise InvalidTransaction("this transaction was committed: start another one")

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None:
            self.commit()

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None:
            await self.commit_async()


def _said(refusal: Refusal) -> str:
    """DynamoDB's reason for one action, in words."""
    if refusal.reason is RefusalReason.CONDITION_FAILED:
        return "its condition failed"
    if refusal.reason is RefusalReason.CONFLICT:
        return "another transaction was writing the item at the same moment; try again"
    return f"{refusal.code}: {refusal.message}" if refusal.message else refusal.code
