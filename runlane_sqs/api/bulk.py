"""Bulk recovery: ``app.bulk`` retries, cancels or reruns every run a filter
selects, as one durable operation (docs/operations.md, "Bulk recovery";
:mod:`runlane_sqs.core.bulk`).

An operation acts a page of runs at a time (up to 100 from one read of its listing).
Before acting on a page it writes its record: the cursor after the page and the ids of
the page's selected runs, with the tally of the pages before; then again every 25 runs of
the page, with the ids still to examine (and mid-way through those too once half its
lease passed, so it keeps the operation while it lives). A process that dies mid-page
leaves those ids; the process that resumes the operation examines them again (each run's
history says whether this operation acted on it already), then goes on from the cursor.
So the tally is exact and no run is acted on twice.

A process acts on a few runs at once (:func:`~runlane_sqs.core.bulk.parallel_runs`): it
reads them (and the next few batches) with one ``BatchGetItem``, makes their actions
together, publishes the new runs' wakeups in one send, then links them. Maintenance
calls :meth:`BulkApi.take_over` for an operation whose lease expired
(:mod:`runlane_sqs.engine.maintenance`). A process whose write is refused stops: another
took the operation over, or an operator stopped it.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TypeVar

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
    due_for_renewal,
    handed_back,
    midway,
    new_operation,
    parallel_runs,
    stopped,
    taken,
)
from runlane_sqs.core.errors import IllegalTransition, OperationNotFound, RunlaneError
from runlane_sqs.core.model import LinkKind, Run, RunEvent, RunStatus
from runlane_sqs.engine.engine import Engine
from runlane_sqs.ports.bulk import OperationConflict
from runlane_sqs.runtime.executor import retried

log = logging.getLogger("runlane_sqs.bulk")
History = tuple[Run, list[RunEvent]]
"""A run and its events, as one read gives them."""
READ_AHEAD = 3
"""Batches of runs read at once (one ``BatchGetItem``): a run is acted on moments after
its read, and each refused write reads it again."""
T = TypeVar("T")
R = TypeVar("R")
Examined = tuple[Outcome, str]
"""What became of a run an operation examined, and a note saying why."""


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
    """One page of ``app.bulk.list``; pass ``cursor`` back for the next. Iterating a page
    goes over its operations; ``len(page)`` counts them."""

    operations: list[BulkOperation]
    cursor: str | None

    def __iter__(self) -> Iterator[BulkOperation]:
        return iter(self.operations)

    def __len__(self) -> int:
        return len(self.operations)


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
        as stored then; ``progress`` is called with it after each write of its record (a
        page, and every :data:`CHECKPOINT_RUNS` runs of it). Resumes a stopped
        operation, or one whose process died once its lease expired (at once with
        ``force``, when that process is known to be gone). Raises
        :class:`~runlane_sqs.core.errors.IllegalTransition` if it is done or another
        process holds it."""
        owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        now = self._engine.clock.now()
        operation = self._write(taken(self.get(operation_id), owner, now, force=force))
        return self._carry_out(operation, None, progress)

    def take_over(self, operation: BulkOperation, *, owner: str, until: datetime) -> BulkOperation:
        """Maintenance's part: carry on ``operation`` (as listed) whose lease expired, until
        it is done or stopped or the time is ``until`` (by the engine's clock), then hand
        it back, listed at once; returns it as stored then. Raises
        :class:`~runlane_sqs.core.errors.IllegalTransition` if a process holds it, and
        :class:`~runlane_sqs.ports.bulk.OperationConflict` if it changed since it was
        read (another process took it first)."""
        taken_over = self._write(taken(operation, owner, self._engine.clock.now()))
        log.info(
            "bulk operation %s taken over by %s (its lease had expired)",
            operation.id,
            owner,
            extra={"operation": operation.id},
        )
        return self._carry_out(taken_over, until, None)

    def _carry_out(
        self,
        operation: BulkOperation,
        until: datetime | None,
        progress: Callable[[BulkOperation], object] | None,
    ) -> BulkOperation:
        """Act on the pending runs, write the next page, and so on until done, stopped (a
        write refused) or ``until``."""
        actions = _Actions(self._engine, self._runs, operation)
        acting = _Acting(self._engine, actions, self._write, operation.rate, until, progress)
        with acting:
            while True:
                try:
                    operation, examined = acting.page(operation)
                    if not examined:  # handed back: out of time
                        return operation
                    operation = self._write(self._next_page(operation))
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

    def _next_page(self, operation: BulkOperation) -> BulkOperation:
        """``operation`` (its pending runs examined, not yet written) with the next page
        of its listing to act on, or done at the listing's end."""
        tally, page = operation.tally, None
        if not operation.listed:
            listed = self._page(operation)
            chosen = tuple(r.id for r in listed.runs if operation.filter.selects(r))
            tally = replace(tally, outside=tally.outside + len(listed.runs) - len(chosen))
            page = (chosen, listed.cursor)
        return checkpoint(
            operation,
            tally=tally,
            last_error=operation.last_error,
            now=self._engine.clock.now(),
            page=page,
        )

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
        """The next page of the operation's listing: up to :data:`MAX_LIST_LIMIT` runs,
        few enough to act on in about ten seconds at its rate (its record is written
        every :data:`CHECKPOINT_RUNS` of them)."""
        size = max(1, min(MAX_LIST_LIMIT, int(operation.rate * 10)))
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
                    tags=dict(selection.tags) or None,
                    limit=size,
                    cursor=cursor,
                )
            yield page
            if page.cursor is None:
                return
            cursor = page.cursor


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

    def after(self, runs: int, now: datetime) -> float:
        """Count ``runs`` acted on; how long to wait (seconds) before the next."""
        self.done += runs
        due = self.begun + timedelta(seconds=self.done / self.rate)
        return max(0.0, (due - now).total_seconds())


class _Acting:
    """One process acting on an operation's pending runs: a few at once (their actions
    are independent), at the operation's rate, renewing its lease as it goes, and handing
    the operation back once its time (``until``) is over."""

    def __init__(
        self,
        engine: Engine,
        actions: _Actions,
        write: Callable[[BulkOperation], BulkOperation],
        rate: float,
        until: datetime | None,
        progress: Callable[[BulkOperation], object] | None,
    ) -> None:
        self._engine = engine
        self._progress = progress
        self._actions = actions
        self._write = write
        self._until = until
        self._parallel = parallel_runs(rate)
        self._pace = _Pace(engine.clock.now(), rate)
        self._pool: ThreadPoolExecutor | None = None
        self._found: dict[str, History] = {}
        """The runs read ahead, with their histories, not yet examined."""

    def __enter__(self) -> _Acting:
        if self._parallel > 1:
            self._pool = ThreadPoolExecutor(self._parallel, thread_name_prefix="runlane-bulk")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def page(self, operation: BulkOperation) -> tuple[BulkOperation, bool]:
        """Examine ``operation``'s pending runs. Returns it with their tally, not yet
        written, and ``True``; or, out of time, as handed back (written) and ``False``.
        Raises :class:`OperationConflict` when a write of its lease is refused."""
        tally, last_error = operation.tally, operation.last_error
        pending, unwritten = operation.pending, 0
        while pending:
            now = self._engine.clock.now()
            if self._until is not None and now >= self._until:
                back = handed_back(
                    operation, tally=tally, last_error=last_error, pending=pending, now=now
                )
                return self._write(back), False
            if unwritten >= CHECKPOINT_RUNS or due_for_renewal(operation, now):
                renewed = midway(
                    operation, tally=tally, last_error=last_error, pending=pending, now=now
                )
                operation, unwritten = self._write(renewed), 0
                if self._progress is not None:
                    self._progress(operation)
            size = min(self._parallel, CHECKPOINT_RUNS - unwritten)
            batch, pending = pending[:size], pending[size:]
            unwritten += len(batch)
            self._read(batch, pending)
            for run_id, (outcome, note) in zip(batch, self._act_on(batch), strict=True):
                tally = tally.add(outcome)
                if outcome is Outcome.FAILED:
                    last_error = f"run {run_id}: {note}"
            wait = self._pace.after(len(batch), self._engine.clock.now())
            if wait > 0:
                self._engine.pause(wait)
        return replace(operation, pending=(), tally=tally, last_error=last_error), True

    def _read(self, batch: tuple[str, ...], after: tuple[str, ...]) -> None:
        """Read ``batch``'s runs with their histories, and those of the next batches
        (:data:`READ_AHEAD` in all), with one ``BatchGetItem``, unless read already."""
        if any(run_id not in self._found for run_id in batch):
            self._found = self._engine.store.get_histories(
                (batch + after)[: self._parallel * READ_AHEAD]
            )

    def _act_on(self, batch: tuple[str, ...]) -> list[Examined]:
        """Act on ``batch`` together (its runs read with the batches after it): their
        actions at once (a cancel, or a retry's or rerun's new run), one publish of the
        new runs' wakeups, then their links at once."""
        actions = self._actions
        examined: dict[str, Examined] = {}
        chosen: list[Run] = []
        for run_id in batch:
            checked = actions.check(run_id, self._found.pop(run_id, None))
            if isinstance(checked, Run):
                chosen.append(checked)
            else:
                examined[run_id] = checked
        made: list[tuple[Run, Run]] = []
        for source, started in zip(chosen, self._map(actions.start, chosen), strict=True):
            if isinstance(started, Run):
                made.append((source, started))
            else:
                examined[source.id] = started
        self._engine.publisher.publish_new([m for _, m in made if m.status is RunStatus.QUEUED])
        for (source, _), linked in zip(made, self._map(actions.finish, made), strict=True):
            examined[source.id] = linked
        return [examined[run_id] for run_id in batch]

    def _map(self, step: Callable[[T], R], items: list[T]) -> list[R]:
        """``step`` of each item, several at once when this process acts so."""
        if self._pool is None or len(items) <= 1:
            return [step(item) for item in items]
        return list(self._pool.map(step, items))


class _Actions:
    """What an operation does to each run, in the steps a batch of runs takes together:
    check a run against its history (acted on by this operation already? still
    selected?), start (a cancel; a retry's or rerun's new run, its wakeup left to the
    batch) and finish (the link on the source)."""

    def __init__(self, engine: Engine, runs: RunsApi, operation: BulkOperation) -> None:
        """``operation``: what to do and for whom (the same in every version of it)."""
        self._engine = engine
        self._runs = runs
        self._operation = operation

    def check(self, run_id: str, found: History | None) -> Run | Examined:
        """The run to act on, or what became of it without an action."""
        if found is None:
            return Outcome.SKIPPED, "it no longer exists"
        run, events = found
        prior = done_before(self._operation, events)
        if prior is not None:
            return prior
        if not self._operation.filter.selects(run):
            return Outcome.SKIPPED, f"it is {run.status.value} now"
        return run

    def start(self, run: Run) -> Run | Examined:
        """Cancel ``run``, or make its new run (returned, to publish and link)."""
        operation = self._operation
        actor, reason = operation.actor, operation.reason
        if operation.action is BulkAction.CANCEL:

            def cancel() -> Examined:
                self._runs.cancel_stored(run, actor, reason, operation.id)
                return Outcome.ACTED, operation.action.value

            return self._guarded(run.id, cancel)
        kind = LinkKind.RETRY if operation.action is BulkAction.RETRY else LinkKind.RERUN
        return self._guarded(
            run.id,
            lambda: self._runs.relaunch_stored(
                run, kind, actor, reason, operation.id, publish=False
            ),
        )

    def finish(self, made: tuple[Run, Run]) -> Examined:
        """Link the source to the new run made of it (its wakeup published)."""
        source, run = made
        operation = self._operation
        kind = LinkKind.RETRY if operation.action is BulkAction.RETRY else LinkKind.RERUN

        def link() -> Examined:
            self._runs.record_link(
                source, run, kind, operation.actor, operation.reason, operation.id
            )
            return Outcome.ACTED, operation.action.value

        return self._guarded(source.id, link)

    def _guarded(self, run_id: str, step: Callable[[], R]) -> R | Examined:
        """``step``, sent again while storage is unavailable within the budget of any
        request (each step may be done twice: a retry's new run has a fixed id, an
        operation's link and cancel are written once), or what its refusal or error makes
        of the run: a refusal (the run changed) reads its history again, where this
        operation's other process may have acted on it."""
        operation = self._operation
        try:
            return retried(lambda _: step(), None)
        except IllegalTransition as refused:
            again = self._engine.store.get_history(run_id)
            prior = done_before(operation, again[1]) if again is not None else None
            return prior or (Outcome.SKIPPED, str(refused))
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
