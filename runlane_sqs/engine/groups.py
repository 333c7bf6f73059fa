"""Opening groups, starting their children as a sliding window, and the join.

Whoever makes a child terminal then counts it (:meth:`Groups.after_child`): it reads the
group and sends one conditional write that empties the child's lane, giving it the next
position when there is one (:meth:`~runlane_sqs.ports.groups.GroupStore.count`); it
then creates that position's child, or joins a group its count completed. Each of these
can be done twice without a second effect: a count lands only while the lane holds its
child, a child's run id is fixed by its group and position (creating it again changes
nothing), the parent's resume is conditional on its wait, and the callback's run id is
fixed by its group. Maintenance looks at a listed group's lanes: it creates a child a
finisher started but did not create, counts one a writer made terminal but did not
count, and joins what is complete; so a writer that died between its writes leaves
nothing undone.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime

from runlane_sqs.core import groups as core
from runlane_sqs.core import machine
from runlane_sqs.core.clock import Clock
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import (
    ConfigurationError,
    ConflictError,
    IllegalTransition,
    PayloadTooLarge,
    RunlaneError,
)
from runlane_sqs.core.groups import Group, GroupStatus, Item, Then
from runlane_sqs.core.limits import MAX_PAYLOAD_LIMIT_BYTES
from runlane_sqs.core.model import LinkKind, Run, RunStatus, new_run_id
from runlane_sqs.core.options import option_names, refuse_unknown
from runlane_sqs.core.tags import Tags, check_tags, inherited
from runlane_sqs.core.values import Holder, ValueField, ValuePlace, decode_json, encode_json
from runlane_sqs.engine.context import DEFAULT_MAX_IN_FLIGHT, Child, GroupOptions, NamedTask
from runlane_sqs.engine.publishing import Publisher
from runlane_sqs.engine.resuming import Resumer, group_resumption
from runlane_sqs.engine.tasks import Task, TaskRegistry, concurrency_key_of, retention_for
from runlane_sqs.engine.triggering import Triggers
from runlane_sqs.engine.values import Values
from runlane_sqs.ports.store import RunStore

log = logging.getLogger("runlane_sqs.groups")

CHILDREN_PAGE = 100
"""Children read at once (one ``BatchGetItem``)."""
CHUNKS_KEPT = 16
"""Item chunks a process keeps after reading them (up to 16 x 300 KB): a chunk never
changes once its group is opened, and the finishers of one group start the items of one
chunk after another, so each process reads a chunk about once, not once per child."""
CANCEL_TRIES = 3
"""Writes of a child's cancel request, each against the child as the last refused one
found it (a worker claiming it, a heartbeat)."""
GROUP_OPTIONS = option_names(GroupOptions)
ONE_AT_A_TIME = GroupOptions(max_in_flight=1, tolerate=0)
"""The group of each task of a chain: one child."""


class Groups:
    """Opens groups, starts their children and joins them."""

    def __init__(
        self,
        store: RunStore,
        publisher: Publisher,
        resumer: Resumer,
        triggers: Triggers,
        values: Values,
        tasks: TaskRegistry,
        clock: Clock,
        config: RunlaneConfig,
    ) -> None:
        self._values = values
        self._store = store
        self._publisher = publisher
        self._resumer = resumer
        self._triggers = triggers
        self._tasks = tasks
        self._clock = clock
        self._config = config
        self._chunks: OrderedDict[tuple[str, int], list[Item]] = OrderedDict()
        self._chunks_lock = threading.Lock()

    # opening -----------------------------------------------------------------------

    def items(self, children: Iterable[Child], group_id: str) -> list[Item]:
        """Validate children before anything is written, as a trigger does: registered
        tasks, their queues, payloads within the limit, concurrency keys. Each payload is
        sealed for its place among the items of group ``group_id``."""
        items: list[Item] = []
        for number, child in enumerate(children):
            if not isinstance(child, tuple) or len(child) != 2:
                raise ConfigurationError(
                    f"child {number} of a group must be a (task, payload) pair; got "
                    f"{type(child).__name__} (groups do not nest: start the inner one in a "
                    "child's handler with ctx.map)"
                )
            place = ValuePlace.in_group(group_id, ValueField.ITEM, str(number))
            trigger = self._triggers.validate(_task_name(child[0]), child[1], place=place)
            kept = self._values.keep_inline(trigger.prepared)
            items.append(Item(trigger.task, _item_text(kept.text, f"child {number}")))
        return items

    def then(self, callback: Child | None, group_id: str) -> Then | None:
        if callback is None:
            return None
        place = ValuePlace.in_group(group_id, ValueField.CALLBACK)
        trigger = self._triggers.validate(_task_name(callback[0]), callback[1], place=place)
        kept = self._values.keep_inline(trigger.prepared)
        return Then(trigger.task, _item_text(kept.text, "the callback"))

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
        """The record of a new group, its first window started, and its item chunks
        (nothing written)."""
        if options.keys() - GROUP_OPTIONS:
            refuse_unknown(options, GROUP_OPTIONS, "group")
        window = core.check_window(options.get("max_in_flight", DEFAULT_MAX_IN_FLIGHT))
        tolerate = options.get("tolerate", 0)
        tags = child_tags(options, parent)
        bounds, chunks = core.chunk(items)
        now = self._clock.now()
        first = min(window, len(items))
        group = Group(
            id=group_id or new_run_id(),
            environment=self._config.environment,
            total=len(items),
            window=window,
            tolerate=core.tolerance(tolerate, len(items)),
            created_at=now,
            bounds=bounds,
            items_key=new_run_id(),
            parent_run_id=parent.id if parent else None,
            then=then,
            next_tasks=next_tasks,
            tags=tags,
            started=first,
            lanes={lane: lane for lane in range(first)},
            review_at=now + self._config.republish.after,
        )
        return group, chunks

    def start(self, children: Iterable[Child], then: Child | None, options: GroupOptions) -> Group:
        """A group started from outside a run (``app.group``), with its callback."""
        group_id = new_run_id()
        items = self.items(children, group_id)
        group, chunks = self.new_group(
            items, group_id=group_id, then=self.then(then, group_id), options=options
        )
        return self.open(group, chunks, None)

    def chain(
        self,
        first: Child,
        tasks: Iterable[NamedTask | str],
        tags: Mapping[str, str] | None = None,
    ) -> Group:
        """A chain started from outside a run (``app.chain``): ``first`` runs, then each
        of ``tasks`` with the result of the one before; it stops at a run that does not
        succeed. Each task runs as a group of one child, so each hand-on is a join."""
        group_id = new_run_id()
        items = self.items([first], group_id)
        names = tuple(self._tasks.resolve(_task_name(task)).name for task in tasks)
        options = GroupOptions(max_in_flight=1, tolerate=0, tags=tags) if tags else ONE_AT_A_TIME
        group, chunks = self.new_group(items, group_id=group_id, next_tasks=names, options=options)
        return self.open(group, chunks, None)

    def open(self, group: Group, chunks: list[list[Item]], fence: tuple[str, str] | None) -> Group:
        """Store the group (once: a second open returns the first) and create its first
        window of children; a group with no items joins at once."""
        stored, written = self.store(group, chunks, fence)
        return self.first_children(stored, written)

    def store(
        self, group: Group, chunks: list[list[Item]], fence: tuple[str, str] | None
    ) -> tuple[Group, bool]:
        """Store the group, once: ``(the group as stored, whether this call wrote it)``.
        With a ``fence`` (the parent run's id and lease token), the parent is marked in
        the same write."""
        stored, written = self._store.groups.open_group(group, chunks, fence)
        log.info(
            "group %s: %d item(s), at most %d running",
            stored.id,
            stored.total,
            stored.window,
            extra={"group_id": stored.id, "run_id": stored.parent_run_id},
        )
        return stored, written

    def first_children(self, stored: Group, written: bool) -> Group:
        """Create the first window of children of a group this call just ``written``;
        else take it as an earlier call left it (:meth:`opened`)."""
        if not written:
            return self.opened(stored)
        self._create_children(stored, sorted(stored.lanes.values()))
        return self.fill_lanes(stored)

    def opened(self, group: Group) -> Group:
        """A group opened by an earlier attempt, which may have died before creating its
        children: create those missing, count those ended, join it if complete."""
        repaired, _ = self._repair_lanes(group)
        return self.fill_lanes(repaired)

    # the window and the join -------------------------------------------------------

    def fill_lanes(self, group: Group) -> Group:
        """Fill the free lanes (a redrive, maintenance) with one write each time, then
        create their children; close and join a complete group."""
        while room := group.room():
            started, stored = self._store.groups.mark_started(group.id, group.started, room)
            if stored is None:
                break
            if started:
                self._create_children(stored, sorted(room.values()))
            group = stored
        return self._settle(group)

    def _settle(self, group: Group) -> Group:
        """A complete group that has not joined: ask the children left in its lanes to
        cancel, and join it once none is left (:attr:`~runlane_sqs.core.groups.Group.closed`),
        so its join sees every child's final status. Returns the group after (its
        ``joined_at`` set once joined)."""
        if not group.complete or group.joined_at is not None:
            return group
        if group.lanes:
            group = self._cancel_unfinished(group)
        if not group.closed:
            return group  # the last of them to end joins it (or maintenance does)
        self.join(group)
        return group.with_changes(joined_at=self._clock.now())

    def after_child(self, run: Run) -> None:
        """A child finished: count it (starting the next position in its lane), then
        join the group if that completed it."""
        assert run.group_id is not None and run.group_index is not None
        group = self._store.groups.get_group(run.group_id)
        if group is None:
            return
        position = group.position_of(run.id, run.group_index)
        lane = None if position is None else group.lane_of(position)
        if position is not None and lane is not None:
            group = self._count(group, lane, position, run.status)
        self._settle(group)

    def _count(self, group: Group, lane: int, position: int, status: RunStatus) -> Group:
        """Count the terminal child at ``position`` (once, however often this runs) and
        create the child of the position its lane starts; returns the group after."""
        start = group.started < group.positions and not group.complete
        counted = self._store.groups.count(group.id, lane, position, status, start=start)
        refused = counted.group if start and not counted.landed else None
        if refused is not None and refused.lanes.get(lane) == position:  # nothing to start
            start = False  # (the group this finisher read was before another lane's start)
            counted = self._store.groups.count(group.id, lane, position, status, start=False)
        after = counted.group or group
        if counted.landed and start:
            self._create_children(after, [after.lanes[lane]])
        return after

    def _create_children(self, group: Group, positions: list[int]) -> None:
        """Create the children of started positions (one that exists is left as it is)
        and publish their wakeups."""
        created: list[Run] = []
        try:
            for position in positions:
                child = self._create_child(group, position)
                if child is not None:
                    created.append(child)
        finally:
            if created:
                self._publisher.publish_new(created)

    def _item(self, group: Group, index: int) -> Item:
        """Item ``index`` of a group, from its chunk (read once, then kept)."""
        chunk = group.chunk_of(index)
        key = (group.id, chunk)
        with self._chunks_lock:
            items = self._chunks.get(key)
            if items is not None:
                self._chunks.move_to_end(key)
        if not items:
            items = self._store.groups.get_items(group, chunk)
            with self._chunks_lock:
                self._chunks[key] = items
                while len(self._chunks) > CHUNKS_KEPT:
                    self._chunks.popitem(last=False)
        return items[index - group.bounds[chunk]]

    def _create_child(self, group: Group, position: int) -> Run | None:
        """Create a position's child (``None``: it exists already); a rerun is linked to
        the child it replaces."""
        index, run_id = group.at(position)
        item = self._item(group, index)
        task = self._registered(item.task, f"group {group.id} starts task")
        source = None
        if position >= group.total:
            actor, reason = group.redrive_by or ("retry-failed", f"group {group.id}")
            source = (group.replaced(position), LinkKind.RETRY, actor, reason)
        return self._create(
            run_id,
            task,
            (item.payload_text, ValuePlace.in_group(group.id, ValueField.ITEM, str(index))),
            source=source,
            group_id=group.id,
            group_index=index,
            tags=dict(group.tags),
        )

    def _repair_lanes(self, group: Group) -> tuple[Group, bool]:
        """Read the children of the group's lanes: create those not created (a finisher
        died after starting them), count the terminal ones not counted (a writer died
        after ending them); returns the group as the counts left it, and whether there
        was anything to repair. In a complete group a child not created is left to
        :meth:`_settle`, which creates it cancelled: it never runs."""
        missing: list[int] = []
        repaired = False
        for position, child in self._lane_children(group):
            if child is None:
                missing.append(position)
            elif child.is_terminal and (lane := group.lane_of(position)) is not None:
                group = self._count(group, lane, position, child.status)
                repaired = True
        if not group.complete:
            self._create_children(group, missing)
        return group, repaired or bool(missing)

    def _lane_children(self, group: Group) -> Iterator[tuple[int, Run | None]]:
        """Each position running in the group's lanes, with its child (``None``: not
        created), read by id a page at a time."""
        positions = sorted(group.lanes.values())
        for first in range(0, len(positions), CHILDREN_PAGE):
            page = positions[first : first + CHILDREN_PAGE]
            yield from zip(page, self._store.groups.children_at(group, page), strict=True)

    def _registered(self, name: str, what: str) -> Task:
        task = self._tasks.get(name)
        if task is None:
            raise ConfigurationError(f"{what} {name!r}, which this app does not register")
        return task

    def _create(
        self,
        run_id: str,
        task: Task,
        stored: tuple[str, ValuePlace],
        *,
        source: tuple[str, LinkKind, str, str] | None = None,
        **changes: object,
    ) -> Run | None:
        """Write a run the group makes under its fixed id, with the concurrency key a
        trigger would give it, its payload the group's ``stored`` one (its text, and its
        place in the group's records) sealed again for the run; ``None`` if that id
        exists already (made by another finisher, join or maintenance)."""
        payload_text, place = stored
        payload = self._values.open(decode_json(payload_text), place)
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
        retention = retention_for(task, self._config)
        run = run.with_changes(concurrency_key=key, retention=retention, **changes)
        # sealed for the run; a large one goes to the bucket
        kept = self._values.reseal(
            payload, payload_text, place=ValuePlace(Holder.RUN, run_id, ValueField.PAYLOAD)
        )
        try:
            self._store.create_run(run, event, kept.text)
        except ConflictError:
            return None
        return run

    def join(self, group: Group) -> None:
        """Resume the parent or trigger the callback (each lands once) and record the
        join, for a closed group (every child it started has been counted)."""
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
            self._next_task(group)
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

    def stop(self, group_id: str, seen_generation: int = 0) -> None:
        """Stop a group whose parent was cancelled: no child starts after, the running
        ones are asked to cancel, and the group joins once they have ended (resuming
        nothing). Only while the group is at ``seen_generation``: a group that
        ``runs retry-failed`` reopened since it was read is left running."""
        group = self._store.groups.mark_stopped(group_id, self._clock.now(), seen_generation)
        if group is not None:
            self._settle(group)

    def _next_task(self, group: Group) -> None:
        """Open the group of a chain's next task, with this group's result as its payload
        (once: the next group's id is fixed by this one's)."""
        [child] = self._store.groups.children(group, 0, 1)
        assert child is not None  # the group succeeded: its one child did
        try:
            result = self._values.open(
                child.result, ValuePlace(Holder.RUN, child.id, ValueField.RESULT)
            )
            what = f"result of chain run {child.id}"
            encoded = encode_json(result, what=what, limit_bytes=ITEM_BYTES)
            place = ValuePlace.in_group(core.next_group_id(group.id), ValueField.ITEM, "0")
            prepared = self._values.prepare_text(result, encoded, what=what, place=place)
            text = _item_text(self._values.keep_inline(prepared).text, f"the {what}")
        except RunlaneError as exc:  # the chain stops here, and says why
            log.error(
                "chain stops after run %s: its result cannot be the next task's payload: %s",
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
            options=GroupOptions(max_in_flight=1, tolerate=0, tags=group.tags),
        )
        self.open(following, chunks, None)

    def retry_failed(self, group_id: str, *, actor: str, reason: str) -> Group:
        """Rerun a joined group's failed and cancelled children (and start the items it
        never started), as Step Functions' redrive does: each rerun is a new run linked
        to the child it replaces; once they finish the group joins again, triggering its
        callback again, opening a chain's next task, or running a failed parent again
        (a new run linked to it, whose ``ctx.map`` finds this group). Raises
        :class:`~runlane_sqs.core.errors.IllegalTransition` when there is nothing to rerun,
        the parent did not fail, or the callback of the last join has not ended."""
        group = self._store.groups.get_group(group_id)
        if group is None:
            raise RunlaneError(f"no group {group_id!r} in this environment")
        if group.joined_at is not None and group.lanes:  # joined before its lanes emptied
            group, _ = self._repair_lanes(group)  # (by an earlier version): count the ended
        self._check_joiners(group)
        unsuccessful = [
            (child.group_index, child.status)
            for start in range(0, group.started, CHILDREN_PAGE)
            for child in self._store.groups.children(group, start, CHILDREN_PAGE)
            if child is not None
            and child.group_index is not None
            and child.status in (RunStatus.FAILED, RunStatus.CANCELLED)
        ]
        reopened = core.redrive(group, unsuccessful).with_changes(
            review_at=self._clock.now() + self._config.republish.after,
            redrive_by=(actor, reason),
        )
        taken_failed = group.failed - reopened.failed
        taken_cancelled = group.cancelled - reopened.cancelled
        if not self._store.groups.reopen(reopened, group.generation, taken_failed, taken_cancelled):
            raise IllegalTransition(
                f"group {group.id} was reopened meanwhile (another retry-failed) or has "
                "children still running; read it again"
            )
        log.info(
            "group %s: rerunning %d child(ren) by %s (generation %d)",
            group.id,
            len(unsuccessful),
            actor,
            reopened.generation,
            extra={"group_id": group.id, "run_id": group.parent_run_id},
        )
        stored = self._store.groups.get_group(group.id)
        return self.fill_lanes(stored) if stored is not None else reopened

    def _check_joiners(self, group: Group) -> None:
        """Refuse a redrive while the runs the last join reached could still read the
        group: its parent must have failed, and its callback must have ended (it reads
        the group's record and children, which the redrive changes)."""
        if group.parent_run_id is not None:
            parent = self._store.get_run(group.parent_run_id)
            if parent is None or parent.status is not RunStatus.FAILED:
                status = parent.status.value if parent else "gone"
                raise IllegalTransition(
                    f"the parent {group.parent_run_id} of group {group.id} is {status}; "
                    "retry-failed reruns the group of a parent that failed"
                )
        if group.then is not None and group.joined_at is not None:
            callback = self._store.get_run(core.callback_run_id(group.id, group.generation))
            if callback is not None and not callback.is_terminal:
                raise IllegalTransition(
                    f"the callback {callback.id} of group {group.id} is "
                    f"{callback.status.value}; retry-failed reruns the group once it has "
                    "ended (it reads the group)"
                )

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
            (then.payload_text, ValuePlace.in_group(group.id, ValueField.CALLBACK)),
            joined_group=group.id,
            tags=dict(group.tags),
        )
        if run is not None:  # None: triggered already, by another join
            self._publisher.publish_new([run])

    def _cancel_unfinished(self, group: Group) -> Group:
        """Ask the children left in the lanes of a complete group to cancel (cooperative):
        one not started yet is cancelled at once, one a finisher started but has not
        created (it read the group before it failed) is created cancelled, its wakeup
        never sent; those that are terminal are counted. Returns the group after."""
        for position, child in self._lane_children(group):
            stopped = self._stopped(group, position, child)
            lane = group.lane_of(position)
            if stopped is not None and stopped.is_terminal and lane is not None:
                group = self._count(group, lane, position, stopped.status)
        return group

    def _stopped(self, group: Group, position: int, child: Run | None) -> Run | None:
        """A lane's child after it was asked to cancel (``None``: it moved on meanwhile)."""
        if child is None:
            return self._created_cancelled(group, position)
        return child if child.is_terminal else self._cancel(child)

    def _created_cancelled(self, group: Group, position: int) -> Run | None:
        """Create a position's child and cancel it before anyone is told of it (or, if
        its finisher created it meanwhile, ask that one to cancel)."""
        child = self._create_child(group, position)
        if child is None:
            child = self._store.get_run(group.at(position)[1])
        if child is None or child.is_terminal:
            return child
        return self._cancel(child)

    def _cancel(self, child: Run) -> Run | None:
        """Ask a child to cancel; one that moved on meanwhile (a worker claimed it) is
        asked again as the refused write found it. ``None``: it was asked already."""
        for _ in range(CANCEL_TRIES):
            if child.is_terminal:
                return child
            try:
                decision = machine.request_cancel(
                    child, now=self._clock.now(), actor="group", reason="the group failed"
                )
                return self._store.apply(decision)
            except IllegalTransition:
                return None  # asked already
            except ConflictError as exc:
                if exc.current is None:
                    return None
                child = exc.current
        return None

    # maintenance -------------------------------------------------------------------

    def review(self, group: Group, now: datetime) -> bool:
        """Maintenance's look at a listed group: repair its lanes (children started but
        not created, ended but not counted), fill its window, join it if it is complete;
        list it again later if it has not joined. Returns whether it did anything."""
        before = (group.started, group.finished, group.joined_at)
        if group.parent_run_id is not None and not group.complete:
            parent = self._store.get_run(group.parent_run_id)
            # cancelled while it opened the group (a reopened group's parent failed)
            if parent is None or (parent.is_terminal and not group.generation):
                self.stop(group.id, group.generation)
                return True
        repaired, did = self._repair_lanes(group)
        after = self.fill_lanes(repaired)
        if after.joined_at is None:  # running, or closing: children asked to cancel
            self._store.groups.relist(group.id, now + self._config.republish.after)
        return did or (after.started, after.finished, after.joined_at) != before


ITEM_BYTES = MAX_PAYLOAD_LIMIT_BYTES
"""Largest payload of a group's child or callback: the group's records keep them."""


def child_tags(options: GroupOptions, parent: Run | None) -> Tags:
    """The tags of a group's children: its ``tags``, added to its parent's with
    ``inherit_tags``."""
    own = options.get("tags")
    if not options.get("inherit_tags"):
        return check_tags(own) if own is not None else {}
    if parent is None:
        raise ConfigurationError(
            "inherit_tags takes the tags of the run that opens the group: use it in "
            "ctx.map or ctx.group, or give app.group its tags"
        )
    return inherited(parent.tags, own)


def _item_text(text: str, what: str) -> str:
    """``text``, a group item's payload, if its record can keep it."""
    size = len(text.encode("utf-8"))
    if size > ITEM_BYTES:
        raise PayloadTooLarge(f"the payload of {what} of a group", size, ITEM_BYTES)
    return text


def _task_name(task: NamedTask | str) -> str:
    return task if isinstance(task, str) else str(getattr(task, "name", task))
