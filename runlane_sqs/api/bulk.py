"""Bulk recovery: ``app.bulk`` retries, cancels or reruns every run a filter
selects, as one durable operation (docs/operations.md, "Bulk recovery";
:mod:`runlane_sqs.core.bulk`).

An operation acts a page of runs at a time. Before acting on a page it writes its record:
the cursor after the page and the ids of the page's selected runs, with the tally of the
pages before. A process that dies mid-page leaves those ids; the process that resumes the
operation examines them again (each run's history says whether this operation acted on
it already), then goes on from the cursor. So the tally is exact and no run is acted on
twice. One write of the record a page, one read of each selected run's history, and the
action's own writes.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from runlane_sqs.api.runs import MAX_LIST_LIMIT, RunPage, RunsApi
from runlane_sqs.core.bulk import (
    CHECKPOINT_RUNS,
    DEFAULT_RATE,
    BulkAction,
    BulkFilter,
    BulkOperation,
    OperationStatus,
    Outcome,
    check_operation_id,
    checkpoint,
    done_before,
    new_operation,
    stopped,
    taken,
)
from runlane_sqs.core.errors import IllegalTransition, OperationNotFound, RunlaneError
from runlane_sqs.core.model import LinkKind, Run
from runlane_sqs.engine.engine import Engine
from runlane_sqs.ports.bulk import OperationConflict

log = logging.getLogger("runlane_sqs.bulk")


@dataclass(frozen=True, slots=True)
class BulkCount:
    """What a dry run found: the runs the operation would act on now."""

    action: BulkAction
    filter: BulkFilter
    selected: int
    examined: int
    """Runs read: the selected ones and those the filter's other conditions left out."""


@dataclass(frozen=True, slots=True)
class OperationPage:
    """One page of ``app.bulk.list``; pass ``cursor`` back for the next."""

    operations: list[BulkOperation]
    cursor: str | None


class BulkApi:
    """Count, start, carry out, read, list and stop bulk operations."""

    def __init__(self, engine: Engine, runs: RunsApi) -> None:
        self._engine = engine
        self._runs = runs

    def count(self, action: BulkAction | str, selection: BulkFilter) -> BulkCount:
        """A dry run: how many runs ``action`` would act on now (one read of the listing
        per 100 runs; nothing is written)."""
        action = _action(action)
        selection = selection.checked(action)
        selected = examined = 0
        for page in self._pages(selection, None, MAX_LIST_LIMIT):
            examined += len(page.runs)
            selected += sum(1 for run in page.runs if selection.selects(run))
        return BulkCount(action, selection, selected, examined)

    def start(
        self,
        action: BulkAction | str,
        selection: BulkFilter,
        *,
        actor: str = "operator",
        reason: str = "",
        rate: float = DEFAULT_RATE,
        counted: BulkCount | None = None,
    ) -> BulkOperation:
        """Store a new operation and return it; :meth:`run` carries it out. Its record
        keeps how many runs it selected at its start: ``counted``, a dry run of it just
        made (:meth:`count`), or one made now. Raises
        :class:`~runlane_sqs.core.errors.ConfigurationError` for a bad filter, rate, actor
        or reason."""
        action = _action(action)
        selection = selection.checked(action)
        if counted is None or (counted.action, counted.filter) != (action, selection):
            counted = self.count(action, selection)
        selected = counted.selected
        operation = new_operation(
            action,
            selection,
            actor=actor,
            reason=reason,
            rate=rate,
            selected=selected,
            now=self._engine.clock.now(),
        )
        stored = self._engine.store.operations.put_operation(operation)
        log.info(
            "bulk operation %s: %s of %s run(s) started by %s",
            stored.id,
            action.value,
            selected,
            stored.actor,
            extra={"operation": stored.id},
        )
        return stored

    def run(
        self,
        operation_id: str,
        *,
        owner: str | None = None,
        force: bool = False,
        progress: Callable[[BulkOperation], object] | None = None,
    ) -> BulkOperation:
        """Carry out an operation until it is done or stopped, at its rate, and return it
        as stored then; ``progress`` is called with it after each page. Resumes a stopped
        operation, or one whose process died once its lease expired (at once with
        ``force``, when that process is known to be gone). Raises
        :class:`~runlane_sqs.core.errors.IllegalTransition` if it is done or another
        process holds it."""
        owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        now = self._engine.clock.now()
        operation = self._write(taken(self.get(operation_id), owner, now, force=force))
        pace = _Pace(now, operation.rate)
        while True:
            tally, last_error = operation.tally, operation.last_error
            for run_id in operation.pending:
                outcome, note = self._act(operation, run_id)
                tally = tally.add(outcome)
                if outcome is Outcome.FAILED:
                    last_error = f"run {run_id}: {note}"
                wait = pace.after_one(self._engine.clock.now())
                if wait > 0:
                    self._engine.pause(wait)
            page = None
            if not operation.listed:
                listed = self._page(operation)
                chosen = tuple(r.id for r in listed.runs if operation.filter.selects(r))
                tally = replace(tally, outside=tally.outside + len(listed.runs) - len(chosen))
                page = (chosen, listed.cursor)
            try:
                operation = self._write(
                    checkpoint(
                        operation,
                        tally=tally,
                        last_error=last_error,
                        now=self._engine.clock.now(),
                        page=page,
                    )
                )
            except OperationConflict as conflict:
                return self._given_up(operation, conflict)
            if progress is not None:
                progress(operation)
            if operation.status is OperationStatus.DONE:
                log.info(
                    "bulk operation %s done: %d acted on, %d skipped, %d failed",
                    operation.id,
                    operation.tally.acted,
                    operation.tally.skipped,
                    operation.tally.failed,
                    extra={"operation": operation.id},
                )
                return operation

    def get(self, operation_id: str) -> BulkOperation:
        """The operation as stored now; raises
        :class:`~runlane_sqs.core.errors.OperationNotFound` if there is none, or
        :class:`~runlane_sqs.core.errors.InvalidKeyError` for a malformed id."""
        found = self._engine.store.operations.get_operation(check_operation_id(operation_id))
        if found is None:
            raise OperationNotFound(operation_id)
        return found

    def list(self, *, limit: int = 20, cursor: str | None = None) -> OperationPage:
        """Operations, newest first."""
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise RunlaneError(f"limit must be between 1 and {MAX_LIST_LIMIT}")
        found, next_cursor = self._engine.store.operations.list_operations(limit, cursor)
        return OperationPage(found, next_cursor)

    def stop(self, operation_id: str) -> BulkOperation:
        """Stop an operation: its process stops after the page it is acting on, and
        :meth:`run` resumes it. Raises
        :class:`~runlane_sqs.core.errors.IllegalTransition` if it is done."""
        for _ in range(5):
            current = self.get(operation_id)
            try:
                return self._write(stopped(current, self._engine.clock.now()))
            except OperationConflict:
                continue
        raise RunlaneError(f"bulk operation {operation_id} kept changing; try again")

    # helpers ------------------------------------------------------------------------

    def _write(self, operation: BulkOperation) -> BulkOperation:
        return self._engine.store.operations.put_operation(operation)

    def _given_up(self, operation: BulkOperation, conflict: OperationConflict) -> BulkOperation:
        """The record changed under this process: an operator stopped the operation, or
        another process took it over. The runs examined since the last write are in no
        tally: whoever goes on examines them again."""
        current = conflict.current
        if current is None:
            raise RunlaneError(f"bulk operation {operation.id} was deleted") from None
        log.info(
            "bulk operation %s is %s (held by %s): this process stops",
            operation.id,
            current.status.value,
            current.owner,
            extra={"operation": operation.id},
        )
        return current

    def _page(self, operation: BulkOperation) -> RunPage:
        """The next page of the operation's listing: few enough runs to act on in about
        ten seconds at its rate, so its lease is renewed in time."""
        size = max(1, min(CHECKPOINT_RUNS, int(operation.rate * 10)))
        return next(self._pages(operation.filter, operation.cursor, size))

    def _pages(self, selection: BulkFilter, cursor: str | None, size: int) -> Iterator[RunPage]:
        """Pages of the runs the listing gives for ``selection`` (a group's children by
        their ids, or the status index), from ``cursor``."""
        while True:
            if selection.group is not None:
                page = self._runs.children(selection.group, limit=size, cursor=cursor)
            else:
                page = self._runs.list(
                    status=list(selection.statuses),
                    task=selection.task,
                    queue=selection.queue,
                    created_after=selection.created_after,
                    created_before=selection.created_before,
                    schedule=selection.schedule,
                    limit=size,
                    cursor=cursor,
                )
            yield page
            if page.cursor is None:
                return
            cursor = page.cursor

    def _act(self, operation: BulkOperation, run_id: str) -> tuple[Outcome, str]:
        """Examine one selected run again (its history: acted on by this operation
        already?) and act on it."""
        found = self._engine.store.get_history(run_id)
        if found is None:
            return Outcome.SKIPPED, "it no longer exists"
        run, events = found
        prior = done_before(operation, events)
        if prior is not None:
            return prior
        if not operation.filter.selects(run):
            return Outcome.SKIPPED, f"it is {run.status.value} now"
        try:
            self._apply(operation, run)
        except IllegalTransition as refused:
            return Outcome.SKIPPED, str(refused)
        except RunlaneError as error:
            log.warning(
                "bulk operation %s: %s of run %s failed: %s",
                operation.id,
                operation.action.value,
                run_id,
                error,
                extra={"operation": operation.id, "run_id": run_id},
            )
            return Outcome.FAILED, str(error)[:500]
        return Outcome.ACTED, operation.action.value

    def _apply(self, operation: BulkOperation, run: Run) -> None:
        actor, reason = operation.actor, operation.reason
        if operation.action is BulkAction.CANCEL:
            self._runs.cancel_stored(run, actor, reason, operation.id)
            return
        kind = LinkKind.RETRY if operation.action is BulkAction.RETRY else LinkKind.RERUN
        self._runs.link_stored(run, kind, actor, reason, operation.id)


def _action(action: BulkAction | str) -> BulkAction:
    try:
        return BulkAction(action)
    except ValueError:
        raise RunlaneError(
            f"unknown bulk action {action!r}; actions are {[a.value for a in BulkAction]}"
        ) from None


@dataclass(slots=True)
class _Pace:
    """The runs a second an operation acts on, kept from when this process took it."""

    begun: datetime
    rate: float
    done: int = 0

    def after_one(self, now: datetime) -> float:
        """Count one run; how long to wait (seconds) before the next."""
        self.done += 1
        due = self.begun + timedelta(seconds=self.done / self.rate)
        return max(0.0, (due - now).total_seconds())
