"""Opening groups, starting their children as a sliding window, and the join.

A child's terminal write counts it in its group (the run store does it in the same
write). Whoever wrote it then reads the group: if the window has room it claims the
next item (an atomic increment of ``started``: each claim its own item) and creates its
child; if the group is complete it joins. Every other step can be done twice without a
second effect: a child's run id is fixed by its group and index (creating it again
changes nothing), the parent's resume is conditional on its wait, and the callback's
run id is fixed by its group. Maintenance repeats the same steps for a group listed on
the agenda (and creates the child of an item claimed by a finisher that died), so a
finisher that died between its writes leaves nothing undone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import datetime

from runlane_sqs.core import groups as core
from runlane_sqs.core import machine
from runlane_sqs.core.clock import Clock
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import (
    ConfigurationError,
    ConflictError,
    IllegalTransition,
    RunlaneError,
)
from runlane_sqs.core.groups import Group, GroupStatus, Item, Then
from runlane_sqs.core.model import LinkKind, Run, RunStatus, new_run_id
from runlane_sqs.core.payload import encode_json
from runlane_sqs.engine.context import DEFAULT_MAX_IN_FLIGHT, Child, GroupOptions, NamedTask
from runlane_sqs.engine.publishing import Publisher
from runlane_sqs.engine.resuming import Resumer, group_resumption
from runlane_sqs.engine.tasks import Task, TaskRegistry, concurrency_key_of
from runlane_sqs.engine.triggering import Triggers
from runlane_sqs.ports.store import RunStore

log = logging.getLogger("runlane_sqs.groups")

CHILDREN_PAGE = 100
"""Children read at once (one ``BatchGetItem``)."""
ONE_AT_A_TIME = GroupOptions(max_in_flight=1, tolerate=0)
"""A chain step's group: one child."""


class Groups:
    """Opens groups, starts their children and joins them."""

    def __init__(
        self,
        store: RunStore,
        publisher: Publisher,
        resumer: Resumer,
        triggers: Triggers,
        tasks: TaskRegistry,
        clock: Clock,
        config: RunlaneConfig,
    ) -> None:
        self._store = store
        self._publisher = publisher
        self._resumer = resumer
        self._triggers = triggers
        self._tasks = tasks
        self._clock = clock
        self._config = config

    # opening -----------------------------------------------------------------------

    def items(self, children: Iterable[Child]) -> list[Item]:
        """Validate children before anything is written, as a trigger does: registered
        tasks, their queues, payloads within the limit, concurrency keys."""
        items: list[Item] = []
        for number, child in enumerate(children):
            if not isinstance(child, tuple) or len(child) != 2:
                raise ConfigurationError(
                    f"child {number} of a group must be a (task, payload) pair; got "
                    f"{type(child).__name__} (groups do not nest: start the inner one in a "
                    "child's handler with ctx.map)"
                )
            request = self._triggers.request(_task_name(child[0]), child[1])
            items.append(Item(request.task, request.payload_json))
        return items

    def then(self, callback: Child | None) -> Then | None:
        if callback is None:
            return None
        request = self._triggers.request(_task_name(callback[0]), callback[1])
        return Then(request.task, request.payload_json)

    def new_group(
        self,
        items: list[Item],
        *,
        group_id: str | None = None,
        parent: Run | None = None,
        then: Then | None = None,
        next_tasks: tuple[str, ...] = (),
        options: GroupOptions,
    ) -> tuple[Group, list[list[Item]]]:
        """The record of a new group and its item chunks (nothing written)."""
        unknown = sorted(set(options) - GroupOptions.__optional_keys__)
        if unknown:
            known = ", ".join(sorted(GroupOptions.__optional_keys__))
            raise ConfigurationError(f"unknown group option(s) {unknown}; the options are {known}")
        window = core.check_window(options.get("max_in_flight", DEFAULT_MAX_IN_FLIGHT))
        tolerate = options.get("tolerate", 0)
        bounds, chunks = core.chunk(items)
        now = self._clock.now()
        group = Group(
            id=group_id or new_run_id(),
            environment=self._config.environment,
            total=len(items),
            window=window,
            tolerate=core.tolerance(tolerate, len(items)),
            created_at=now,
            bounds=bounds,
            parent_run_id=parent.id if parent else None,
            then=then,
            next_tasks=next_tasks,
            review_at=now + self._config.republish.after,
        )
        return group, chunks

    def start(self, children: Iterable[Child], then: Child | None, options: GroupOptions) -> Group:
        """A group started from outside a run (``app.group``), with its callback."""
        items = self.items(children)
        group, chunks = self.new_group(items, then=self.then(then), options=options)
        return self.open(group, chunks, None)

    def chain(self, first: Child, steps: Iterable[NamedTask | str]) -> Group:
        """A chain started from outside a run (``app.chain``): ``first`` runs, then each
        step with the result of the one before; it stops at a step that does not
        succeed. Each step is a group of one child, so each hand-on is a join."""
        items = self.items([first])
        names = tuple(self._tasks.resolve(_task_name(step)).name for step in steps)
        group, chunks = self.new_group(items, next_tasks=names, options=ONE_AT_A_TIME)
        return self.open(group, chunks, None)

    def open(self, group: Group, chunks: list[list[Item]], fence: tuple[str, str] | None) -> Group:
        """Store the group (once: a second open returns the first) and start its first
        window of children; a group with no items joins at once."""
        stored = self._store.groups.open_group(group, chunks, fence)
        log.info(
            "group %s: %d item(s), at most %d running",
            stored.id,
            stored.total,
            stored.window,
            extra={"group_id": stored.id, "run_id": stored.parent_run_id},
        )
        return self.advance(stored)

    # the window and the join -------------------------------------------------------

    def advance(self, group: Group) -> Group:
        """Fill the window (opening a group, maintenance): the children it has room for
        are created first, then counted started with one write; join a complete group."""
        created: list[Run] = []
        items: dict[int, list[Item]] = {}
        try:
            while group.next_start() is not None:
                batch = self._room(group)
                for index in batch:
                    child = self._create_child(group, index, items)
                    if child is not None:
                        created.append(child)
                _, stored = self._store.groups.mark_started(group.id, group.started, len(batch))
                if stored is None:
                    break
                group = stored
        finally:
            if created:
                self._publisher.publish_new(created)
        if group.complete and group.joined_at is None:
            self.join(group)
        return group

    def start_next(self, group: Group) -> None:
        """A finisher's step: claim the items the window has room for as this finisher
        read it (usually the one its end made room for; each claim gets its own item, so
        finishers at the same moment do not race for one) and create their children;
        join a complete group. A child claimed but never created (its finisher died) is
        created by maintenance."""
        if group.complete:
            self.join(group)
            return
        if group.next_start() is None:
            return
        limit = min(group.total, group.finished + group.window)
        created: list[Run] = []
        items: dict[int, list[Item]] = {}
        try:
            while (index := self._store.groups.claim_next(group.id, limit)) is not None:
                child = self._create_child(group, index, items)
                if child is not None:
                    created.append(child)
                if index + 1 >= limit:
                    break
        finally:
            if created:
                self._publisher.publish_new(created)

    @staticmethod
    def _room(group: Group) -> list[int]:
        """The items the window has room for now, from the next one to start."""
        end = min(group.total, group.finished + group.window)
        return list(range(group.started, end))

    def _create_child(
        self,
        group: Group,
        index: int,
        cache: dict[int, list[Item]],
        source: tuple[str, LinkKind, str, str] | None = None,
    ) -> Run | None:
        """Create item ``index``'s current child (``None``: it exists already); a rerun
        names the child it replaces in ``source``."""
        chunk = group.chunk_of(index)
        if chunk not in cache:
            cache[chunk] = self._store.groups.get_items(group.id, chunk)
        item = cache[chunk][index - group.bounds[chunk]]
        task = self._registered(item.task, f"group {group.id} starts task")
        return self._create(
            group.child_id(index),
            task,
            item.payload_json,
            source=source,
            group_id=group.id,
            group_index=index,
        )  # None: started already, by another finisher

    def _registered(self, name: str, what: str) -> Task:
        task = self._tasks.get(name)
        if task is None:
            raise ConfigurationError(f"{what} {name!r}, which this app does not register")
        return task

    def _create(
        self,
        run_id: str,
        task: Task,
        payload_json: str,
        *,
        source: tuple[str, LinkKind, str, str] | None = None,
        **changes: object,
    ) -> Run | None:
        """Write a run the group makes under its fixed id, with the concurrency key a
        trigger would give it; ``None`` if that id exists already (made by another
        finisher, join or maintenance)."""
        payload = json.loads(payload_json)
        run, event = machine.new_run(
            run_id=run_id,
            environment=self._config.environment,
            task=task.name,
            queue=task.queue,
            payload=payload,
            now=self._clock.now(),
            republish=self._config.republish,
            source=source,
        )
        key = concurrency_key_of(task, payload, None)
        run = run.with_changes(concurrency_key=key, **changes)
        try:
            self._store.create_run(run, event, payload_json)
        except ConflictError:
            return None
        return run

    def after_child(self, run: Run) -> None:
        """A child finished (and was counted): start the next one, or join."""
        assert run.group_id is not None
        group = self._store.groups.get_group(run.group_id)
        if group is not None and group.joined_at is None:
            self.start_next(group)

    def join(self, group: Group) -> None:
        """Resume the parent or trigger the callback (each lands once), ask the children
        still running to cancel if the group failed, and record the join."""
        if group.parent_run_id is not None:
            parent = self._store.get_run(group.parent_run_id)
            if parent is not None:
                resumed = self._resumer.resume_one(parent, group_resumption(group))
                if resumed is not None:
                    self._publisher.publish_many([resumed])
        if group.parent_run_id is not None and group.generation:
            self._redrive_parent(group, group.parent_run_id)
        if group.then is not None:
            self._trigger_then(group, group.then)
        if group.next_tasks and group.status is GroupStatus.SUCCEEDED:
            self._next_step(group)
        if group.status in (GroupStatus.FAILED, GroupStatus.STOPPED):
            self._cancel_unfinished(group)
        if self._store.groups.mark_joined(group.id, self._clock.now()):
            log.info(
                "group %s joined: %s (%d succeeded, %d failed, %d cancelled of %d)",
                group.id,
                group.status.value,
                group.succeeded,
                group.failed,
                group.cancelled,
                group.total,
                extra={"group_id": group.id, "run_id": group.parent_run_id},
            )

    def stop(self, group_id: str) -> None:
        """Stop a group whose parent was cancelled: no child starts after, the running
        ones are asked to cancel, and the group joins (resuming nothing)."""
        group = self._store.groups.mark_stopped(group_id, self._clock.now())
        if group is not None:
            self.join(group)

    def _next_step(self, group: Group) -> None:
        """Open the group of a chain's next step, with this step's result as its payload
        (once: the next group's id is fixed by this one's)."""
        [child] = self._store.groups.children(group, 0, 1)
        assert child is not None  # the group succeeded: its one child did
        try:
            text = encode_json(
                child.result,
                what=f"result of chain step {child.id}",
                limit_bytes=self._config.payload_limit,
            )
        except RunlaneError as exc:  # the chain stops here, and says why
            log.error(
                "chain stops after run %s: its result cannot be the next step's payload: %s",
                child.id,
                exc,
                extra={"run_id": child.id, "task": child.task, "group_id": group.id},
            )
            return
        task, rest = group.next_tasks[0], group.next_tasks[1:]
        following, chunks = self.new_group(
            [Item(task, text)],
            group_id=core.next_group_id(group.id),
            next_tasks=rest,
            options=ONE_AT_A_TIME,
        )
        self.open(following, chunks, None)

    def retry_failed(self, group_id: str, *, actor: str, reason: str) -> Group:
        """Rerun a joined group's failed and cancelled children (and start the items it
        never started), as Step Functions' redrive does: each rerun is a new run linked
        to the child it replaces; once they finish the group joins again, triggering its
        callback again, opening a chain's next step, or running a failed parent again
        (a new run linked to it, whose ``ctx.map`` finds this group). Raises
        :class:`~runlane_sqs.core.errors.IllegalTransition` when there is nothing to rerun
        or the parent did not fail."""
        group = self._store.groups.get_group(group_id)
        if group is None:
            raise RunlaneError(f"no group {group_id!r} in this environment")
        if group.parent_run_id is not None:
            parent = self._store.get_run(group.parent_run_id)
            if parent is None or parent.status is not RunStatus.FAILED:
                status = parent.status.value if parent else "gone"
                raise IllegalTransition(
                    f"the parent {group.parent_run_id} of group {group.id} is {status}; "
                    "retry-failed reruns the group of a parent that failed"
                )
        unsuccessful = [
            (child.group_index, child.status)
            for start in range(0, group.started, CHILDREN_PAGE)
            for child in self._store.groups.children(group, start, CHILDREN_PAGE)
            if child is not None
            and child.group_index is not None
            and child.status in (RunStatus.FAILED, RunStatus.CANCELLED)
        ]
        reopened = core.redrive(group, unsuccessful).with_changes(
            review_at=self._clock.now() + self._config.republish.after
        )
        taken_failed = group.failed - reopened.failed
        taken_cancelled = group.cancelled - reopened.cancelled
        if not self._store.groups.reopen(reopened, group.generation, taken_failed, taken_cancelled):
            raise ConflictError(group.id, None)
        replaced = {index: group.child_id(index) for index, _ in unsuccessful}
        rerun = self._rerun(reopened, actor, reason, replaced)
        log.info(
            "group %s: rerunning %d child(ren) by %s (generation %d)",
            group.id,
            len(rerun),
            actor,
            reopened.generation,
            extra={"group_id": group.id, "run_id": group.parent_run_id},
        )
        stored = self._store.groups.get_group(group.id)
        return self.advance(stored) if stored is not None else reopened

    def _create_missing(self, group: Group) -> None:
        """Create the children of claimed items that do not exist (a finisher died
        between its claim and the child's creation), reading the group's children by
        their ids a page at a time."""
        created: list[Run] = []
        items: dict[int, list[Item]] = {}
        for start in range(0, group.started, CHILDREN_PAGE):
            children = self._store.groups.children(group, start, CHILDREN_PAGE)
            for offset, child in enumerate(children):
                if child is None:
                    made = self._create_child(group, start + offset, items)
                    if made is not None:
                        created.append(made)
        if created:
            self._publisher.publish_new(created)

    def _rerun(
        self, group: Group, actor: str, reason: str, replaced: dict[int, str] | None = None
    ) -> list[Run]:
        """Create the children of the items rerun in the group's generation (those that
        exist already are left as they are), each linked to the child it replaces, and
        publish their wakeups."""
        created: list[Run] = []
        items: dict[int, list[Item]] = {}
        for index, generation in group.redriven:
            if generation != group.generation:
                continue
            before = (replaced or {}).get(index, core.child_run_id(group.id, index))
            source = (before, LinkKind.RETRY, actor, reason)
            child = self._create_child(group, index, items, source)
            if child is not None:
                created.append(child)
        if created:
            self._publisher.publish_new(created)
        return created

    def _redrive_parent(self, group: Group, parent_id: str) -> None:
        """After a redrive's join, run a parent that failed again (once per generation):
        a new run linked to it, whose ``ctx.map`` calls find its groups."""
        parent = self._store.get_run(parent_id)
        if parent is None or parent.status is not RunStatus.FAILED:
            return
        if group.status is not GroupStatus.SUCCEEDED:
            return  # still failing: the parent would fail the same way
        link = (parent.id, LinkKind.REDRIVE, "retry-failed", f"group {group.id}")
        try:
            self._triggers.relaunch(
                parent, core.redriven_parent_id(group.id, group.generation), link
            )
        except ConflictError:
            return  # ran again already, by another join

    def _trigger_then(self, group: Group, then: Then) -> None:
        task = self._registered(then.task, f"group {group.id}'s callback is task")
        run = self._create(
            core.callback_run_id(group.id, group.generation),
            task,
            then.payload_json,
            joined_group=group.id,
        )
        if run is not None:  # None: triggered already, by another join
            self._publisher.publish_new([run])

    def _cancel_unfinished(self, group: Group) -> None:
        """Ask the started children that have not finished to cancel (cooperative)."""
        for start in range(0, group.started, CHILDREN_PAGE):
            for child in self._store.groups.children(group, start, CHILDREN_PAGE):
                if child is None or child.is_terminal:
                    continue
                self._cancel(child)

    def _cancel(self, child: Run) -> None:
        try:
            decision = machine.request_cancel(
                child, now=self._clock.now(), actor="group", reason="the group failed"
            )
            self._store.apply(decision)
        except (ConflictError, IllegalTransition):
            return  # it moved on meanwhile (it finished, or is asked already)

    # maintenance -------------------------------------------------------------------

    def review(self, group: Group, now: datetime) -> bool:
        """Maintenance's look at a listed group: start what an interrupted finisher did
        not, join what it completed; list it again later if it has not joined. Returns
        whether it did anything."""
        before = (group.started, group.joined_at)
        if group.generation and not group.complete:  # a redrive cut short: its reruns
            self._rerun(group, "maintenance", "a redrive's rerun was not created")
        if group.parent_run_id is not None and not group.complete:
            parent = self._store.get_run(group.parent_run_id)
            if parent is None or parent.is_terminal:  # cancelled while it opened the group
                self.stop(group.id)
                return True
        if group.reviewed == group.finished and not group.complete:
            self._create_missing(group)  # no child finished since the last look
        after = self.advance(group)
        if after.joined_at is None and not after.complete:
            self._store.groups.relist(group.id, now + self._config.republish.after, after.finished)
        return (after.started, after.joined_at) != before or after.complete


def _task_name(task: NamedTask | str) -> str:
    return task if isinstance(task, str) else str(getattr(task, "name", task))
