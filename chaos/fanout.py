"""Fan-outs: the share of triggers that start groups (docs/groups.md), and what each must
look like once the chaos is over. Pure: the runner reads storage, this judges it with
the ground-truth log.

A *map* trigger is a parent run whose handler calls ``ctx.map`` over its items once; a
*then* trigger is ``app.group(children, then=callback)``. Each child returns its item's
value; the parent and the callback return the values in item order and their sum.
Every fan-out must end with:

- its group *joined* once: the record exists and ``joined_at`` is set (*unjoined*);
- its counts equal to its children's terminal statuses and, once joined, adding up to
  its total (*miscounted*);
- each child once, at its index: every child the group started (all, once joined)
  exists as the run ``child_run_id(group, index)`` naming its group and index, none
  exists past the last index, and the log shows no item executed under another run id
  (*stray children*);
- a parent never resumed twice from its group wait and, once the group joined, resumed
  from it exactly once if it released to wait: one ``resumed`` event naming the group
  in its history (none, when a retried attempt found its group joined before it
  waited) (*not resumed once*);
- the parent's or callback's result the children's values in order and their sum
  (*wrong results*);
- the callback run ``callback_run_id(group)`` existing once the group joined, triggered
  by that group, not ending otherwise than succeeded, and no callback of the trigger
  executed under another run id (*callbacks not once*).

A group that has not joined by the end of the drain is *unjoined*; its children not
started yet and its missing callback count as stuck runs, not as lost ones.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chaos.app import MAP, THEN
from chaos.ledger import Execution
from runlane_sqs.core.groups import COUNTED, Group, child_run_id
from runlane_sqs.core.model import EventType, Run, RunEvent, RunStatus, WaitKind

NOT_STARTED = "not_started"
"""The status the ledger gets for a child or callback its unjoined group has not
started: stuck, not lost."""


@dataclass(frozen=True)
class FanOut:
    """What one fan-out trigger started."""

    index: int
    shape: str
    """:data:`~chaos.app.MAP` or :data:`~chaos.app.THEN`."""
    group_id: str
    run_id: str
    """The parent (map) or the callback (then): the run the trigger is judged by."""
    values: tuple[int, ...]
    """Each child's value, by item index."""
    resent: bool = False
    """The harness sent its ``app.group`` more than once (a failed request may have
    landed): another group may have run the same items under other run ids."""

    @property
    def children(self) -> list[str]:
        return [child_run_id(self.group_id, index) for index in range(len(self.values))]


@dataclass(frozen=True)
class Found:
    """What storage holds for one fan-out at the end."""

    group: Group | None
    run: Run | None
    """The parent or the callback."""
    children: list[Run | None]
    """By item index."""
    beyond: Run | None
    """A child one past the last index: there must be none."""
    events: list[RunEvent] = field(default_factory=list)
    """The parent's history (empty for a callback)."""


@dataclass
class GroupFigures:
    groups: int = 0
    maps: int = 0
    thens: int = 0
    resumes: int = 0
    """``resumed`` events naming a group, over every parent."""
    joined_before_wait: int = 0
    """Parents whose retried attempt found the group joined before it waited."""
    unjoined: list[str] = field(default_factory=list)
    """Group ids."""
    miscounted: list[str] = field(default_factory=list)
    """Group ids."""
    stray_children: list[str] = field(default_factory=list)
    """Group ids."""
    not_resumed_once: list[str] = field(default_factory=list)
    """Parent run ids."""
    wrong_results: list[str] = field(default_factory=list)
    """Parent and callback run ids."""
    callbacks_not_once: list[str] = field(default_factory=list)
    """Callback run ids."""
    violating_runs: list[str] = field(default_factory=list)
    """The parent or callback of each fan-out with any violation."""


def _joined(found: Found) -> bool:
    return found.group is not None and found.group.joined_at is not None


def statuses(found: Iterable[tuple[FanOut, Found]]) -> dict[str, str | None]:
    """The final status of every child and callback for the ledger: ``None`` (missing:
    lost) only once its group has joined; before, :data:`NOT_STARTED` (stuck)."""
    statuses: dict[str, str | None] = {}
    for fan_out, stored in found:
        missing = None if _joined(stored) else NOT_STARTED
        for run_id, child in zip(fan_out.children, stored.children, strict=True):
            statuses[run_id] = missing if child is None else str(child.status)
        if fan_out.shape == THEN:
            statuses[fan_out.run_id] = missing if stored.run is None else str(stored.run.status)
    return statuses


def counts_match(group: Group, children: list[Run | None]) -> bool:
    """The group's counts equal its children's terminal statuses and, once it has
    joined, add up to its total."""
    found = Counter(COUNTED[c.status] for c in children if c is not None and c.is_terminal)
    if group.joined_at is not None and group.finished != group.total:
        return False
    return (
        group.total == len(children)
        and group.succeeded == found["succeeded"]
        and group.failed == found["failed"]
        and group.cancelled == found["cancelled"]
    )


def children_in_place(fan_out: FanOut, found: Found, executions: list[Execution]) -> bool:
    """Each child the group started (all of them, once it joined) exists once, at its
    index, none past the last, and no item ran under another run id."""
    ids = fan_out.children
    group = found.group
    started = len(ids) if group is None or group.joined_at is not None else group.started
    for index, child in enumerate(found.children):
        if child is None and index >= started:
            continue  # not started yet: the group is unjoined (reported as such)
        if child is None or (child.group_id, child.group_index) != (fan_out.group_id, index):
            return False
    if found.beyond is not None:
        return False
    return fan_out.resent or all(
        e.item < len(ids) and e.run == ids[e.item] for e in executions if e.item is not None
    )


def group_waits(events: Iterable[RunEvent], group_id: str) -> tuple[int, int, bool]:
    """Releases to wait for a group, ``resumed`` events naming a group, and whether each
    of those names ``group_id``."""
    released = resumed = 0
    same = True
    for event in events:
        wait = event.data.get("wait")
        if event.type is EventType.RELEASED and isinstance(wait, dict):
            released += wait.get("kind") == WaitKind.GROUP.value
        elif event.type is EventType.RESUMED and "group" in event.data:
            resumed += 1
            same = same and event.data["group"] == group_id
    return released, resumed, same


def result_right(fan_out: FanOut, run: Run) -> bool:
    result = run.result
    return (
        isinstance(result, dict)
        and result.get("group") == fan_out.group_id
        and result.get("values") == list(fan_out.values)
        and result.get("sum") == sum(fan_out.values)
    )


def _judge_parent(fan_out: FanOut, found: Found, figures: GroupFigures) -> None:
    """Never resumed twice; once joined, resumed once if it released for the group."""
    released, resumed, same = group_waits(found.events, fan_out.group_id)
    figures.resumes += resumed
    joined = _joined(found)
    figures.joined_before_wait += joined and not released
    if not same or resumed > 1 or (joined and resumed != (1 if released else 0)):
        figures.not_resumed_once.append(fan_out.run_id)


def _judge_callback(fan_out: FanOut, found: Found, executions: list[Execution]) -> bool:
    """The callback exists once its group joined, was triggered by its group, did not
    end otherwise than succeeded (one still running is stuck), and no callback of the
    trigger ran under another run id."""
    run = found.run
    if run is None:
        return not _joined(found)
    if run.joined_group != fan_out.group_id:
        return False
    if run.status.is_terminal and run.status is not RunStatus.SUCCEEDED:
        return False
    return fan_out.resent or all(e.run == fan_out.run_id for e in executions if e.kind == THEN)


def _judge(
    fan_out: FanOut, found: Found, executions: list[Execution], figures: GroupFigures
) -> None:
    group = found.group
    if group is None or group.joined_at is None:
        figures.unjoined.append(fan_out.group_id)
    if group is None or not counts_match(group, found.children):
        figures.miscounted.append(fan_out.group_id)
    if not children_in_place(fan_out, found, executions):
        figures.stray_children.append(fan_out.group_id)
    if fan_out.shape == MAP:
        _judge_parent(fan_out, found, figures)
    elif not _judge_callback(fan_out, found, executions):
        figures.callbacks_not_once.append(fan_out.run_id)
    run = found.run
    if run is not None and run.status is RunStatus.SUCCEEDED and not result_right(fan_out, run):
        figures.wrong_results.append(fan_out.run_id)


def judge(
    fan_outs: Iterable[tuple[FanOut, Found]], per_run: Mapping[str, list[Execution]]
) -> GroupFigures:
    """The group figures for each fan-out and what storage held for it at the end."""
    by_trigger: dict[int, list[Execution]] = defaultdict(list)
    for executions in per_run.values():
        for execution in executions:
            if execution.trigger is not None:
                by_trigger[execution.trigger].append(execution)
    figures = GroupFigures()
    for fan_out, found in fan_outs:
        figures.groups += 1
        figures.maps += fan_out.shape == MAP
        figures.thens += fan_out.shape == THEN
        before = _violation_count(figures)
        _judge(fan_out, found, by_trigger.get(fan_out.index, []), figures)
        if _violation_count(figures) != before:
            figures.violating_runs.append(fan_out.run_id)
    return figures


def describe(fan_out: FanOut, found: Found) -> dict[str, Any]:
    """A violating fan-out as the report prints it: its group record's counts and its
    children's statuses."""
    group = found.group
    return {
        "trigger": fan_out.index,
        "shape": fan_out.shape,
        "group": fan_out.group_id,
        "run": fan_out.run_id,
        "record": None
        if group is None
        else {
            "started": group.started,
            "succeeded": group.succeeded,
            "failed": group.failed,
            "cancelled": group.cancelled,
            "total": group.total,
            "joined_at": None if group.joined_at is None else group.joined_at.isoformat(),
        },
        "children": [None if c is None else str(c.status) for c in found.children],
        "run_status": None if found.run is None else str(found.run.status),
    }


def violations(figures: GroupFigures) -> dict[str, list[str]]:
    """Each kind of group violation and the ids behind it."""
    return {
        "unjoined group": figures.unjoined,
        "miscounted group": figures.miscounted,
        "stray child": figures.stray_children,
        "parent not resumed once": figures.not_resumed_once,
        "wrong fan-out result": figures.wrong_results,
        "callback not once": figures.callbacks_not_once,
    }


def _violation_count(figures: GroupFigures) -> int:
    return sum(len(ids) for ids in violations(figures).values())
