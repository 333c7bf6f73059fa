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

Each fan-out has a *mode* (docs/groups.md, "What holds" and "Operating groups"), and
the exact outcome the mode gives is checked (*wrong outcome* otherwise):

- ``succeeds``: every child succeeds; the group succeeds.
- ``fails`` (one ``broken`` child, ``tolerate=0``): the group fails and closes: the
  broken child failed, every other child it started succeeded or was cancelled (none
  left running: the group joined once they had ended) and none past ``started``
  exists; the parent fails with ``GroupFailed``, the callback succeeds with the
  group's status ``failed`` and the values of the children that succeeded.
- ``tolerates`` (one or two ``broken`` children, ``tolerate`` as many): the group
  succeeds with exactly those children failed; the values of the others.
- ``retried`` (one ``broken`` child): the group fails as in ``fails``; the harness then
  fixes the broken child and asks ``retry-failed`` as soon as the group has joined
  (refused until the parent has failed or the first callback has ended). The group
  joins again as generation 1, succeeded: each child that failed or was cancelled was
  rerun once (and only those), every item's current child succeeded, and the parent
  ran again
  (``redriven_parent_id(group, 1)``: the run the trigger is judged by) with every
  value, or the second callback (``callback_run_id(group, 1)``) has every value while
  the first has the failed view.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chaos.app import MAP, THEN
from chaos.ledger import Execution
from runlane_sqs.core.groups import (
    COUNTED,
    Group,
    GroupStatus,
    child_run_id,
    redrive_run_id,
)
from runlane_sqs.core.model import EventType, Run, RunEvent, RunStatus, WaitKind

NOT_STARTED = "not_started"
"""The status the ledger gets for a child or callback its unjoined group has not
started: stuck, not lost."""
SUCCEEDS = "succeeds"
FAILS = "fails"
TOLERATES = "tolerates"
RETRIED = "retried"
MODES = (SUCCEEDS, FAILS, TOLERATES, RETRIED)
"""The fan-outs' modes, given in turn."""
FAILED = frozenset({str(RunStatus.FAILED)})
CANCELLED = frozenset({str(RunStatus.CANCELLED)})


@dataclass(frozen=True)
class FanOut:
    """What one fan-out trigger started."""

    index: int
    shape: str
    """:data:`~chaos.app.MAP` or :data:`~chaos.app.THEN`."""
    group_id: str
    run_id: str
    """The run the trigger is judged by: the parent (map) or the callback (then); for a
    ``retried`` fan-out, the parent its group's second join runs again, or its second
    callback."""
    values: tuple[int, ...]
    """Each child's value, by item index."""
    resent: bool = False
    """The harness sent its ``app.group`` more than once (a failed request may have
    landed): another group may have run the same items under other run ids."""
    mode: str = SUCCEEDS
    broken: frozenset[int] = frozenset()
    """The items whose children are ``broken``."""
    first_run: str = ""
    """The parent, or the first callback (the same as ``run_id`` unless ``retried``)."""

    @property
    def children(self) -> list[str]:
        return [child_run_id(self.group_id, index) for index in range(len(self.values))]

    @property
    def tolerate(self) -> int:
        return len(self.broken) if self.mode == TOLERATES else 0

    @property
    def callbacks(self) -> set[str]:
        return {self.first_run, self.run_id} if self.shape == THEN else set()

    def expected_values(self, children: list[Run | None]) -> list[int | None]:
        """The values a result lists: a child's value if it succeeded (every value once
        a ``retried`` group joined again), ``None`` for the others."""
        return [
            value if child is not None and child.status is RunStatus.SUCCEEDED else None
            for value, child in zip(self.values, children, strict=True)
        ]


@dataclass(frozen=True)
class Found:
    """What storage holds for one fan-out at the end."""

    group: Group | None
    run: Run | None
    """The parent or the callback (:attr:`FanOut.run_id`)."""
    children: list[Run | None]
    """By item index: each item's first child."""
    beyond: Run | None
    """A child one past the last index: there must be none."""
    events: list[RunEvent] = field(default_factory=list)
    """The parent's history (empty for a callback)."""
    first: Run | None = None
    """The parent or the first callback (:attr:`FanOut.first_run`)."""
    reruns: dict[int, Run | None] = field(default_factory=dict)
    """The children ``retry-failed`` reran, by item index (the latest of each)."""

    @property
    def current(self) -> list[Run | None]:
        """Each item's current child: its rerun if any, else its first."""
        return [self.reruns.get(i, child) for i, child in enumerate(self.children)]


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
    modes: dict[str, int] = field(default_factory=dict)
    """Fan-outs per mode."""
    retried: int = 0
    """``retry-failed`` requests that landed (one per ``retried`` fan-out)."""
    retry_refusals: int = 0
    """``retry-failed`` requests refused (the group not closed yet, or another landed)."""
    wrong_outcomes: list[str] = field(default_factory=list)
    """Group ids whose outcome is not the one their mode gives."""
    violating_runs: list[str] = field(default_factory=list)
    """The parent or callback of each fan-out with any violation."""


def _joined(found: Found) -> bool:
    return found.group is not None and found.group.joined_at is not None


def _done(fan_out: FanOut, found: Found) -> bool:
    """Joined for good: a ``retried`` group once it joined again."""
    group = found.group
    again = fan_out.mode != RETRIED or (group is not None and group.generation > 0)
    return _joined(found) and again


@dataclass
class Judged:
    """What the ledger counts for the fan-outs besides the triggered runs."""

    statuses: dict[str, str | None] = field(default_factory=dict)
    """Every child's, rerun's, callback's and first parent's final status: ``None``
    (missing: lost) only once its group has joined; before, :data:`NOT_STARTED`."""
    children: list[str] = field(default_factory=list)
    """The runs counted like triggered ones (not the run each trigger is judged by)."""
    designed: dict[str, frozenset[str]] = field(default_factory=dict)
    """The terminal statuses other than succeeded each run may end in by design."""


def _status(run: Run | None, missing: str | None) -> str | None:
    return missing if run is None else str(run.status)


def judged(found: Iterable[tuple[FanOut, Found]]) -> Judged:
    """The runs of every fan-out for the ledger, with their statuses and designs."""
    out = Judged()
    for fan_out, stored in found:
        missing = None if _done(fan_out, stored) else NOT_STARTED
        _judged_children(fan_out, stored, missing, out)
        out.statuses[fan_out.run_id] = _status(stored.run, missing)
        if fan_out.mode == FAILS and fan_out.shape == MAP:
            out.designed[fan_out.run_id] = FAILED
        if fan_out.first_run != fan_out.run_id:  # retried: the first parent or callback
            first_missing = None if _joined(stored) else NOT_STARTED
            out.statuses[fan_out.first_run] = _status(stored.first, first_missing)
            out.children.append(fan_out.first_run)
            if fan_out.shape == MAP:
                out.designed[fan_out.first_run] = FAILED
    return out


def _judged_children(fan_out: FanOut, stored: Found, missing: str | None, out: Judged) -> None:
    """Each first child (but those a failed group never started) and each rerun."""
    group = stored.group
    started = len(fan_out.values) if group is None else group.started
    for index, (run_id, child) in enumerate(zip(fan_out.children, stored.children, strict=True)):
        if child is None and fan_out.mode == FAILS and _joined(stored) and index >= started:
            continue  # the group failed before it started this item: no run
        out.statuses[run_id] = _status(child, missing)
        out.children.append(run_id)
        if index in fan_out.broken:
            out.designed[run_id] = FAILED
        elif fan_out.mode in (FAILS, RETRIED):
            out.designed[run_id] = CANCELLED
    for index, generation in group.redriven if group is not None else ():
        rerun_id = redrive_run_id(fan_out.group_id, index, generation)
        out.statuses[rerun_id] = _status(stored.reruns.get(index), missing)
        out.children.append(rerun_id)


def counts_match(group: Group, current: list[Run | None]) -> bool:
    """The group's counts equal its current children's terminal statuses and, once it
    has joined, no child is left in its lanes and, if it succeeded, they add up to its
    total."""
    found = Counter(COUNTED[c.status] for c in current if c is not None and c.is_terminal)
    if group.joined_at is not None and group.lanes:
        return False
    joined_succeeded = group.status is GroupStatus.SUCCEEDED and group.joined_at is not None
    if joined_succeeded and group.finished != group.total:
        return False
    return (
        group.total == len(current)
        and group.succeeded == found["succeeded"]
        and group.failed == found["failed"]
        and group.cancelled == found["cancelled"]
    )


def children_in_place(fan_out: FanOut, found: Found, executions: list[Execution]) -> bool:
    """Each child the group started exists once, at its index, none past the last,
    and no item ran under another run id than its first child or its reruns."""
    ids = fan_out.children
    group = found.group
    started = len(ids) if group is None else min(group.started, len(ids))
    for index, child in enumerate(found.children):
        if child is None and (index >= started or group is None or group.joined_at is None):
            continue  # not started (the group failed first), or unjoined (reported)
        if child is None or (child.group_id, child.group_index) != (fan_out.group_id, index):
            return False
    for index, rerun in found.reruns.items():
        if rerun is not None and (rerun.group_id, rerun.group_index) != (fan_out.group_id, index):
            return False
    if found.beyond is not None:
        return False
    allowed = {(i, run_id) for i, run_id in enumerate(ids)}
    if group is not None:
        allowed |= {(i, redrive_run_id(group.id, i, g)) for i, g in group.redriven}
    return fan_out.resent or all(
        (e.item, e.run) in allowed for e in executions if e.item is not None
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


def result_right(
    fan_out: FanOut, run: Run, children: list[Run | None], status: GroupStatus
) -> bool:
    """A parent's or callback's result: its group, the group's ``status`` and the
    values of ``children`` that succeeded, in order, and their sum."""
    result = run.result
    values = fan_out.expected_values(children)
    return (
        isinstance(result, dict)
        and result.get("group") == fan_out.group_id
        and result.get("status") == status.value
        and result.get("values") == values
        and result.get("sum") == sum(v for v in values if v is not None)
    )


def _judge_parent(fan_out: FanOut, found: Found, figures: GroupFigures) -> None:
    """Never resumed twice; once joined, resumed once if it released for the group."""
    released, resumed, same = group_waits(found.events, fan_out.group_id)
    figures.resumes += resumed
    joined = _joined(found)
    figures.joined_before_wait += joined and not released
    if not same or resumed > 1 or (joined and resumed != (1 if released else 0)):
        figures.not_resumed_once.append(fan_out.first_run)


def _judge_callback(fan_out: FanOut, found: Found, executions: list[Execution]) -> bool:
    """Each callback exists once its join was done, was triggered by its group, did not
    end otherwise than succeeded (one still running is stuck), and no callback of the
    trigger ran under another run id."""
    for run, done in ((found.run, _done(fan_out, found)), (found.first, _joined(found))):
        if run is None:
            if done:
                return False
            continue
        if run.joined_group != fan_out.group_id:
            return False
        if run.status.is_terminal and run.status is not RunStatus.SUCCEEDED:
            return False
    return fan_out.resent or all(e.run in fan_out.callbacks for e in executions if e.kind == THEN)


def _children_as_designed(fan_out: FanOut, found: Found, started: int) -> bool:
    """Each first child: a broken one failed; another succeeded, or was cancelled when
    its group failed; none missing but those the group never started."""
    failing = fan_out.mode in (FAILS, RETRIED)
    for index, child in enumerate(found.children):
        if child is None:
            if index < started:
                return False
        elif index in fan_out.broken:
            if child.status is not RunStatus.FAILED:
                return False
        elif child.status is not RunStatus.SUCCEEDED and not (
            failing and child.status is RunStatus.CANCELLED
        ):
            return False
    return True


def _failed_first(fan_out: FanOut, found: Found) -> bool:
    """The first join's outcome of a failed group: the parent failed with
    ``GroupFailed``, or the first callback succeeded with the failed view."""
    first = found.first
    if first is None or not first.status.is_terminal:
        return first is None or fan_out.shape == THEN  # reported as lost or stuck
    if fan_out.shape == MAP:
        failure = first.failure
        return (
            first.status is RunStatus.FAILED
            and failure is not None
            and failure.type.endswith("GroupFailed")
        )
    return first.status is not RunStatus.SUCCEEDED or result_right(
        fan_out, first, found.children, GroupStatus.FAILED
    )


def outcome_right(fan_out: FanOut, found: Found) -> bool:
    """The outcome the fan-out's mode gives (see the module's doc); a group that has
    not joined for good is reported as unjoined instead."""
    group = found.group
    if group is None or not _done(fan_out, found):
        return True
    if fan_out.mode == SUCCEEDS:
        return group.status is GroupStatus.SUCCEEDED and group.generation == 0
    if fan_out.mode == TOLERATES:
        return (
            group.status is GroupStatus.SUCCEEDED
            and (group.failed, group.cancelled) == (len(fan_out.broken), 0)
            and _children_as_designed(fan_out, found, len(fan_out.values))
        )
    if fan_out.mode == FAILS:
        return (
            group.status is GroupStatus.FAILED
            and group.generation == 0
            and _children_as_designed(fan_out, found, min(group.started, group.total))
            and _failed_first(fan_out, found)
        )
    unsuccessful = {
        i
        for i, child in enumerate(found.children)
        if child is not None and child.status in (RunStatus.FAILED, RunStatus.CANCELLED)
    }
    return (
        group.status is GroupStatus.SUCCEEDED
        and group.generation == 1
        and sorted(i for i, _ in group.redriven) == sorted(unsuccessful)
        and all(c is not None and c.status is RunStatus.SUCCEEDED for c in found.current)
        and _children_as_designed(fan_out, found, len(fan_out.values))
        and _failed_first(fan_out, found)
    )


def _judge(
    fan_out: FanOut, found: Found, executions: list[Execution], figures: GroupFigures
) -> None:
    group = found.group
    if group is None or not _done(fan_out, found):
        figures.unjoined.append(fan_out.group_id)
    if group is None or not counts_match(group, found.current):
        figures.miscounted.append(fan_out.group_id)
    if not children_in_place(fan_out, found, executions):
        figures.stray_children.append(fan_out.group_id)
    if fan_out.shape == MAP:
        _judge_parent(fan_out, found, figures)
    elif not _judge_callback(fan_out, found, executions):
        figures.callbacks_not_once.append(fan_out.run_id)
    if not outcome_right(fan_out, found):
        figures.wrong_outcomes.append(fan_out.group_id)
    run = found.run
    status = GroupStatus.FAILED if fan_out.mode == FAILS else GroupStatus.SUCCEEDED
    if (
        run is not None
        and run.status is RunStatus.SUCCEEDED
        and not result_right(fan_out, run, found.current, status)
    ):
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
        figures.modes[fan_out.mode] = figures.modes.get(fan_out.mode, 0) + 1
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
        "mode": fan_out.mode,
        "broken": sorted(fan_out.broken),
        "group": fan_out.group_id,
        "run": fan_out.run_id,
        "record": None
        if group is None
        else {
            "started": group.started,
            "lanes": dict(group.lanes),
            "succeeded": group.succeeded,
            "failed": group.failed,
            "cancelled": group.cancelled,
            "total": group.total,
            "generation": group.generation,
            "redriven": list(group.redriven),
            "stopped_at": None if group.stopped_at is None else group.stopped_at.isoformat(),
            "joined_at": None if group.joined_at is None else group.joined_at.isoformat(),
        },
        "children": [None if c is None else str(c.status) for c in found.children],
        "reruns": {i: None if r is None else str(r.status) for i, r in found.reruns.items()},
        "run_status": None if found.run is None else str(found.run.status),
        "first_status": None if found.first is None else str(found.first.status),
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
        "wrong group outcome": figures.wrong_outcomes,
    }


def _violation_count(figures: GroupFigures) -> int:
    return sum(len(ids) for ids in violations(figures).values())
