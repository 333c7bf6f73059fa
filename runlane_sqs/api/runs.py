"""Observing and recovering runs: ``app.runs`` (the operator API).

Every control action records who did it and why in the run's history. Retry and rerun
create a new run linked to its source, so the audit trail survives (a replacement
trigger would lose it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from runlane_sqs.api.waiting import ProgressCallback, wait_for, wait_for_async
from runlane_sqs.core import bulk, machine, parking
from runlane_sqs.core.attempts import Attempt, attempts_from
from runlane_sqs.core.clock import Duration, to_timedelta
from runlane_sqs.core.errors import (
    ConflictError,
    IllegalTransition,
    InvalidCursor,
    RunlaneError,
    RunNotFound,
)
from runlane_sqs.core.groups import Group, group_id_for, group_root, redriven_parent_ids
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import (
    JSON,
    TERMINAL_STATUSES,
    KeyKind,
    LinkKind,
    Run,
    RunEvent,
    RunStatus,
    WaitKind,
    new_run_id,
)
from runlane_sqs.core.names import check_key
from runlane_sqs.core.schedules import check_schedule_id
from runlane_sqs.core.tags import tag_filter
from runlane_sqs.core.versions import UNFINISHED_STATUSES, VersionReport, count_versions
from runlane_sqs.core.waits import wait_name
from runlane_sqs.engine.engine import Engine
from runlane_sqs.ports.store import RunQuery

log = logging.getLogger("runlane_sqs.runs")
MAX_LIST_LIMIT = 100


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of ``app.runs.list``; pass ``cursor`` back for the next (None: no more).
    Iterating a page (``for run in app.runs.list()``) goes over its runs, this page's only;
    ``len(page)`` counts them."""

    runs: list[Run]
    cursor: str | None

    def __iter__(self) -> Iterator[Run]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)


@dataclass(frozen=True, slots=True)
class RunHistory:
    """A run, its events ordered by sequence and its attempts, all from one read."""

    run: Run
    events: list[RunEvent]
    attempts: list[Attempt]


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What one ``app.runs.prune`` call removed; call again with ``cursor`` to go on."""

    examined: int
    deleted: int
    cursor: str | None


class RunsApi:
    """Look up, list, cancel, retry, rerun and prune runs."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    # observe ------------------------------------------------------------------------

    def wait(
        self,
        run_id: str,
        *,
        timeout: Duration | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Run:
        """Block until the run is finished and return it (its status, result or failure);
        raise :class:`~runlane_sqs.errors.RunWaitTimedOut` (carrying its last state)
        after ``timeout``. Polls with one read per poll, backing off from 0.1 s to 5 s
        (:mod:`runlane_sqs.api.waiting` gives the cost). With ``on_progress``, it is
        called with the run (its ``progress`` and ``state``) at each poll that finds them
        changed, and the polls back off to 1 s only (docs/progress.md)."""
        read = partial(self.get_stored, run_id)
        return self._engine.values.open_run(wait_for(read, timeout, on_progress=on_progress))

    async def wait_async(
        self,
        run_id: str,
        *,
        timeout: Duration | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Run:
        """:meth:`wait` for asyncio code: each read runs on a thread, the waits on the
        event loop (``on_progress`` is called on the event loop)."""
        import asyncio  # noqa: PLC0415 (loaded already: this runs on an event loop)

        finished = await wait_for_async(
            lambda: asyncio.to_thread(self.get_stored, run_id), timeout, on_progress=on_progress
        )
        return await asyncio.to_thread(self._engine.values.open_run, finished)

    def get(self, run_id: str) -> Run:
        """The run as stored now, its payload and result opened (read from the payload
        bucket when they are large); raises :class:`~runlane_sqs.core.errors.RunNotFound`,
        or :class:`~runlane_sqs.errors.ValueUnreadable` when a large value cannot be read
        back (:meth:`get_stored` reads the run without opening them)."""
        return self._engine.values.open_run(self.get_stored(run_id))

    def get_stored(self, run_id: str) -> Run:
        """The run as stored now, a large payload or result left as its
        :class:`~runlane_sqs.core.values.Sealed` reference (no S3 request)."""
        run = self._engine.store.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        return run

    def events(self, run_id: str) -> list[RunEvent]:
        """The run's history, ordered by sequence (1, 2, 3, ...)."""
        events = self._engine.store.get_events(run_id)
        if not events:
            raise RunNotFound(run_id)
        return sorted(events, key=lambda e: e.seq)

    def attempts(self, run_id: str) -> list[Attempt]:
        """Each attempt: worker, start, end, outcome and failure."""
        return attempts_from(self.events(run_id))

    def history(self, run_id: str, *, opened: bool = True) -> RunHistory:
        """The run with its history and attempts as of one read (``get``, ``events`` and
        ``attempts`` are a read each); raises
        :class:`~runlane_sqs.core.errors.RunNotFound`. With ``opened=False`` a large
        payload or result stays its :class:`~runlane_sqs.core.values.Sealed` reference
        (no S3 request)."""
        found = self._engine.store.get_history(run_id)
        if found is None:
            raise RunNotFound(run_id)
        run, events = found
        ordered = sorted(events, key=lambda e: e.seq)
        if opened:
            run = self._engine.values.open_run(run)
        return RunHistory(run, ordered, attempts_from(ordered))

    def list(
        self,
        *,
        status: RunStatus | str | Sequence[RunStatus | str] | None = None,
        task: str | None = None,
        queue: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        schedule: str | None = None,
        tags: Mapping[str, str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> RunPage:
        """Runs newest first, from the status index (never a table scan). With
        ``schedule``, only runs that schedule made: the other runs read are left out, so
        a page may hold fewer than ``limit`` runs while ``cursor`` goes on. With ``tags``,
        only runs carrying every one of them, read from the tag indexes for the first tag
        given and filtered on the others (put the rarest first; docs/tags.md). Runs are
        as stored: a large payload or result is its
        :class:`~runlane_sqs.core.values.Sealed` reference (:meth:`get` opens it)."""
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise RunlaneError(f"limit must be between 1 and {MAX_LIST_LIMIT}")
        query = RunQuery(
            statuses=_statuses(status),
            task=task,
            queue=queue,
            created_after=created_after,
            created_before=created_before,
            schedule=check_schedule_id(schedule) if schedule is not None else None,
            tags=tag_filter(tags) if tags else (),
        )
        runs, next_cursor = self._engine.store.list_runs(query, limit, cursor)
        return RunPage(runs, next_cursor)

    def versions(self, *, task: str | None = None) -> VersionReport:
        """The unfinished runs (of ``task``, or of every task) counted by the app
        version they started under and their task, and those not started yet: when no
        run counts under a version, its code paths can go (docs/versions.md). Reads
        every unfinished run from the status index, a page at a time (never a Scan)."""
        query = RunQuery(statuses=UNFINISHED_STATUSES, task=task)

        def unfinished() -> Iterator[Run]:
            cursor: str | None = None
            while True:
                runs, cursor = self._engine.store.list_runs(query, MAX_LIST_LIMIT, cursor)
                yield from runs
                if cursor is None:
                    return

        return count_versions(unfinished())

    def groups(self, run_id: str) -> Sequence[Group]:
        """The groups a parent run opened (``ctx.map``, ``ctx.group``), in call order, as
        stored now: counts per status, how many started, whether it joined."""
        return self.groups_of(self.get_stored(run_id))

    def groups_of(self, run: Run) -> Sequence[Group]:
        """The groups a run's ``ctx.map`` calls opened, by their ids (fixed by the run and
        each call's number), read until the first that does not exist: one read more than
        there are groups, and none missed (a group that completed while it was opened
        was never waited for, so the run's history does not name it)."""
        root = group_root(run)  # a redriven parent finds the groups of the run it redrives
        found: list[Group] = []
        while group := self._engine.store.groups.get_group(
            group_id_for(root, wait_name(WaitKind.GROUP, None, len(found) + 1))
        ):
            found.append(group)
        return found

    def _groups_named(self, run_or_group_id: str) -> Sequence[Group] | None:
        """A parent's groups, or the group with this id, from one read of each kind
        (``None``: neither exists)."""
        run = self._engine.store.get_run(run_or_group_id)
        if run is not None:
            return self.groups_of(run)
        group = self._engine.store.groups.get_group(run_or_group_id)
        return [group] if group is not None else None

    def group(self, group_id: str) -> Group:
        """One group as stored now (``app.group`` returns its id); raises
        :class:`~runlane_sqs.core.errors.RunlaneError` if there is none."""
        group = self._engine.store.groups.get_group(group_id)
        if group is None:
            raise RunlaneError(f"no group {group_id!r} in this environment")
        return group

    def children(self, parent_id: str, *, limit: int = 50, cursor: str | None = None) -> RunPage:
        """A page of the child runs of a parent's groups in item order (of a group's,
        if ``parent_id`` is a group id: ``app.group`` has no parent run), read by their
        fixed ids, never a table scan. Children not started yet are left out."""
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise RunlaneError(f"limit must be between 1 and {MAX_LIST_LIMIT}")
        store = self._engine.store
        groups = self._groups_named(parent_id)
        if groups is None:
            raise RunNotFound(parent_id)
        position, index = _children_position(cursor, len(groups))
        runs: list[Run] = []
        while position < len(groups) and len(runs) < limit:
            group = groups[position]
            if index >= group.started:
                position, index = position + 1, 0
                continue
            want = min(limit - len(runs), group.started - index)
            runs.extend(r for r in store.groups.children(group, index, want) if r is not None)
            index += want
        more = position < len(groups) and (
            index < groups[position].started or position + 1 < len(groups)
        )
        return RunPage(runs, f"{position}:{index}" if more else None)

    def retry_failed(
        self, run_or_group_id: str, *, reason: str = "", actor: str = "operator"
    ) -> Group:
        """Rerun the failed and cancelled children of a group (a parent's latest, or the
        group with this id) and start the items it never started; once they finish, the
        group joins again: its callback runs again, or a parent that failed runs again
        as a new run linked to it whose ``ctx.map`` finds the group's new results.
        Raises :class:`~runlane_sqs.core.errors.IllegalTransition` when the group has not
        joined (a failed group joins once the children it asked to cancel have ended),
        was stopped, has nothing to rerun, its parent did not fail, its callback (of the
        last join) has not ended, or another ``retry_failed`` reopened it meanwhile."""
        groups = self._groups_named(run_or_group_id)
        if groups is None:
            raise RunNotFound(run_or_group_id)
        if not groups:
            raise IllegalTransition(f"run {run_or_group_id} opened no group")
        return self._engine.groups.retry_failed(groups[-1].id, actor=actor, reason=reason)

    def find_current(self, task: str, idempotency_key: str) -> Run | None:
        """The run holding an idempotency key (None if the key is free)."""
        owner = self._engine.store.keys.get_key_owner(
            KeyKind.IDEMPOTENCY,
            task,
            check_key("idempotency", idempotency_key),
            self._engine.clock.now(),
        )
        run = self._engine.store.get_run(owner) if owner else None
        return run if run is not None and run.status is not RunStatus.FAILED else None

    def find_active(self, task: str, singleton_key: str) -> Run | None:
        """The unfinished run holding a singleton key (None if none)."""
        owner = self._engine.store.keys.get_key_owner(
            KeyKind.SINGLETON, task, check_key("singleton", singleton_key), self._engine.clock.now()
        )
        run = self._engine.store.get_run(owner) if owner else None
        return run if run is not None and not run.is_terminal else None

    # recover ------------------------------------------------------------------------

    def cancel(self, run_id: str, *, reason: str = "", actor: str = "operator") -> Run:
        """Cancel a run: a waiting one becomes ``cancelled`` at once; a running one becomes
        ``cancel_requested`` and its worker sets the handler's cancellation event at the
        next heartbeat. Raises :class:`~runlane_sqs.core.errors.IllegalTransition` for a
        finished run (a success that won the race stays a success)."""
        return self.cancel_stored(self.get_stored(run_id), actor, reason)

    def cancel_stored(self, run: Run, actor: str, reason: str, operation: str | None = None) -> Run:
        """:meth:`cancel` of ``run`` as read, by a bulk ``operation`` if given."""
        seen: list[Run] = []

        def decide(current: Run) -> Transition:
            seen.append(current)
            return machine.request_cancel(
                current,
                now=self._engine.clock.now(),
                actor=actor,
                reason=reason,
                operation=operation,
            )

        stored = self._transition_from(run, decide)
        log.info(
            "run %s: %s by %s",
            run.id,
            stored.status.value,
            actor,
            extra={"run_id": run.id, "task": stored.task},
        )
        if stored.is_terminal:
            self._engine.finisher.after_finished(stored)
            waiting = seen[-1].waiting
            if waiting is not None and waiting.kind is WaitKind.GROUP and waiting.target:
                self._engine.groups.stop(waiting.target)  # its children go with it
        return stored

    def unpark(self, run_id: str, *, reason: str = "", actor: str = "operator") -> Run:
        """Make a ``parked`` run runnable again and publish its wakeup (after deploying a
        worker that registers its task). Raises
        :class:`~runlane_sqs.core.errors.IllegalTransition` if the run is not parked."""
        data: dict[str, JSON] = {"by": actor, "reason": reason}
        stored = self._transition(
            run_id,
            lambda run: parking.unpark(
                run,
                now=self._engine.clock.now(),
                republish=self._engine.config.republish,
                data=data,
            ),
        )
        self._engine.publisher.publish_many([stored])
        log.info(
            "run %s: unparked by %s",
            run_id,
            actor,
            extra={"run_id": run_id, "task": stored.task},
        )
        return stored

    def retry(self, run_id: str, *, reason: str = "", actor: str = "operator") -> Run:
        """A new run of a ``failed`` run's task and payload, linked to it."""
        return self.link_stored(self.get_stored(run_id), LinkKind.RETRY, actor, reason)

    def rerun(self, run_id: str, *, reason: str = "", actor: str = "operator") -> Run:
        """A new run of any finished run's task and payload, linked to it."""
        return self.link_stored(self.get_stored(run_id), LinkKind.RERUN, actor, reason)

    def prune(
        self,
        *,
        older_than: Duration | datetime,
        statuses: Sequence[RunStatus | str] | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> PruneReport:
        """Delete finished runs created before ``older_than`` (a time, or an age), with
        their history and steps and the groups they opened, and free their idempotency
        keys. A parent whose group a ``retry-failed`` rerun still uses is left for a later
        prune. Bounded by ``limit``; resume with the returned cursor."""
        chosen = _statuses(statuses) if statuses else tuple(TERMINAL_STATUSES)
        if any(not s.is_terminal for s in chosen):
            raise IllegalTransition("prune removes finished runs only")
        if isinstance(older_than, datetime):
            cutoff = older_than
        else:
            cutoff = self._engine.clock.now() - to_timedelta(older_than, "older_than")
        page = self.list(status=list(chosen), created_before=cutoff, limit=limit, cursor=cursor)
        deleted, now = 0, self._engine.clock.now()
        store = self._engine.store
        for run in page.runs:
            groups = self._groups_pruned_with(run) if run.created_at <= cutoff else None
            if groups is None or not store.delete_run(run, now):
                continue
            deleted += 1
            for group in groups:  # after their parent: never before it
                store.groups.delete_group(group.id)
            if run.idempotency_key is not None:
                store.keys.release_key(KeyKind.IDEMPOTENCY, run.task, run.idempotency_key, run.id)
        log.info("pruned %d of %d run(s)", deleted, len(page.runs))
        return PruneReport(examined=len(page.runs), deleted=deleted, cursor=page.cursor)

    def _groups_pruned_with(self, run: Run) -> Sequence[Group] | None:
        """The groups ``run`` opened, which prune deletes with it; ``None`` while one of
        them is still in use: a ``retry-failed`` rerun of it has not joined, or the parent
        it ran again (whose ``ctx.map`` calls find this run's groups) is stored."""
        if not run.opened_groups:
            return ()
        opened = [group for group in self.groups_of(run) if group.parent_run_id == run.id]
        for group in opened:
            if self._rerun_uses(group):
                log.info(
                    "run %s: not pruned yet: its group %s has not joined, or is used by "
                    "the run a retry-failed rerun ran again",
                    run.id,
                    group.id,
                    extra={"run_id": run.id, "group_id": group.id},
                )
                return None
        return opened

    def _rerun_uses(self, group: Group) -> bool:
        """Whether a ``retry-failed`` rerun of the group has not joined yet, or the parent
        one of its joins ran again is stored."""
        if group.joined_at is None:
            return True
        return any(self._engine.store.get_run(i) for i in redriven_parent_ids(group))

    # helpers ------------------------------------------------------------------------

    def _transition(self, run_id: str, decide: Callable[[Run], Transition]) -> Run:
        return self._transition_from(self.get_stored(run_id), decide)

    def _transition_from(self, run: Run, decide: Callable[[Run], Transition]) -> Run:
        for _ in range(machine.MAX_REDECISIONS):
            try:
                return self._engine.store.apply(decide(run))
            except ConflictError as conflict:
                if conflict.current is None:
                    raise RunNotFound(run.id) from None
                run = conflict.current
        raise RunlaneError(f"run {run.id} kept changing; try again")

    def _link_once(self, source: Run, decide: Callable[[Run], Transition], operation: str) -> None:
        """Write an operation's link on ``source`` unless another process of the same
        operation (one it took over from, still running) linked it meanwhile: a refused
        write reads the run's history before it decides again, so the link is written
        once."""
        run = source
        for _ in range(machine.MAX_REDECISIONS):
            try:
                self._engine.store.apply(decide(run))
                return
            except ConflictError as conflict:
                found = self._engine.store.get_history(source.id)
                if conflict.current is None or found is None:
                    raise RunNotFound(source.id) from None
                if bulk.done_by(operation, found[1]):
                    return
                run = found[0]
        raise RunlaneError(f"run {source.id} kept changing; try again")

    def link_stored(
        self,
        source: Run,
        kind: LinkKind,
        actor: str,
        reason: str,
        operation: str | None = None,
    ) -> Run:
        """A retry or rerun of ``source`` as read (a large payload stays sealed: the same
        object), by a bulk ``operation`` if given. The new run is created first (its
        first event names the source) and its wakeup published, then the link is
        recorded on the source, so a refused create leaves no dangling link. An
        operation's new run has an id made of the operation's and the source's, so doing
        it again (after a crash) finds it."""
        run = self.relaunch_stored(source, kind, actor, reason, operation)
        self.record_link(source, run, kind, actor, reason, operation)
        return run

    def relaunch_stored(
        self,
        source: Run,
        kind: LinkKind,
        actor: str,
        reason: str,
        operation: str | None = None,
        *,
        publish: bool = True,
    ) -> Run:
        """The first half of :meth:`link_stored`: the new run (for an operation, the one
        made before a crash if there is one) and, unless ``publish`` is false, its
        wakeup (the caller then publishes it before :meth:`record_link`)."""
        machine.link_run(  # refuse early: retry needs failed, rerun needs finished
            source,
            kind=kind,
            new_run_id="",
            actor=actor,
            reason=reason,
            now=self._engine.clock.now(),
        )
        link = (source.id, kind, actor, reason)
        if operation is None:
            return self._engine.triggers.relaunch(source, new_run_id(), link, publish=publish)
        made = bulk.new_run_id_for(operation, source.id)
        try:
            return self._engine.triggers.relaunch(source, made, link, publish=publish)
        except ConflictError:  # made before a crash left it unlinked, maybe unpublished
            run = self.get_stored(made)
            if publish and run.status is RunStatus.QUEUED:
                self._engine.publisher.publish_many([run])  # a second wakeup is harmless
            return run

    def record_link(
        self,
        source: Run,
        run: Run,
        kind: LinkKind,
        actor: str,
        reason: str,
        operation: str | None = None,
    ) -> None:
        """The second half of :meth:`link_stored`: the link to ``run`` on ``source``
        (an operation's written once)."""

        def decide(current: Run) -> Transition:
            return machine.link_run(
                current,
                kind=kind,
                new_run_id=run.id,
                actor=actor,
                reason=reason,
                now=self._engine.clock.now(),
                operation=operation,
            )

        if operation is None:
            self._transition_from(source, decide)
        else:
            self._link_once(source, decide, operation)
        log.info(
            "run %s: %s as %s by %s",
            source.id,
            kind.value,
            run.id,
            actor,
            extra={"run_id": source.id, "task": source.task},
        )


def _statuses(value: RunStatus | str | Sequence[RunStatus | str] | None) -> tuple[RunStatus, ...]:
    if value is None:
        return tuple(RunStatus)
    values = [value] if isinstance(value, str) else list(value)
    try:
        return tuple(RunStatus(v) for v in values)
    except ValueError:
        raise RunlaneError(
            f"unknown status in {values!r}; statuses are {[s.value for s in RunStatus]}"
        ) from None


class IdempotencyApi:
    """``app.idempotency``: operator control of idempotency keys."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def reset(self, task: str, key: str) -> None:
        """Free ``key`` so the next trigger with it creates a new run."""
        self._engine.store.keys.delete_key(KeyKind.IDEMPOTENCY, task, check_key("idempotency", key))
        log.info("idempotency key of task %s reset", task, extra={"task": task})


def _children_position(cursor: str | None, groups: int) -> tuple[int, int]:
    """Where a page of children starts: the group's place among the parent's groups and
    the item index (``cursor`` is what the previous page returned)."""
    if cursor is None:
        return 0, 0
    position, _, index = cursor.partition(":")
    if not (position.isdigit() and index.isdigit()) or int(position) >= groups:
        raise InvalidCursor(f"cursor {cursor[:40]!r} is not valid: not a page of these children")
    return int(position), int(index)
