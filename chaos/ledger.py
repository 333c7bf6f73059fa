"""Counting from the outside: the ground-truth log the handlers wrote (one ``start`` and
one ``end`` line per execution), the signals the harness sent and the runs' final
statuses become the suite's figures. Pure: no I/O but reading the log.

Words:

- an *execution* is one call of a handler (a ``start`` line, with or without ``end``);
- an execution is *explained* by a fault when it started in a worker before that
  worker was SIGKILLed and never recorded an end or recorded it less than a lease
  duration before the kill (the outcome write may still have been in flight), or
  before it was SIGSTOPped (a zombie: whatever it did after the stop, its lease was
  given to another worker), or while DynamoDB was down (restarting) for longer than
  a lease can be sure to survive (a third of it);
- a run *needs* one execution per designed ``fail``, ``release`` or ``wait`` (a parent
  released for its group) end outside the explained ones, plus one for its success;
  every other execution is *extra*;
- a *double success* is a run with two unexplained executions that both ended ``ok``;
- *lost*: triggered, but missing from storage, or terminal without succeeding (other
  than in a status its design gives it: a broken child fails, a sibling in a failed
  group may be cancelled, the parent of a failed group fails), or ``succeeded``
  without any execution having ended ``ok``; *stuck*: not terminal after the drain.
  The children of fan-outs (``chaos/fanout.py``) are counted like triggered runs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.fleet import Signalled

OK = "ok"
DESIGNED_ENDS = frozenset({"fail", "release", "wait"})
SUCCEEDED = "succeeded"
CANCELLED = "cancelled"
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


@dataclass
class Execution:
    run: str
    pid: int
    attempt: int
    started: float
    ended: float | None = None
    outcome: str | None = None
    trigger: int | None = None
    """The index of the trigger it belongs to (a fan-out's children share theirs)."""
    kind: str | None = None
    item: int | None = None
    """A fan-out's child: the index of its item."""
    key: str | None = None
    """A run triggered with an ordering key: the key, and its place among the key's runs."""
    seq: int | None = None
    tenant: str | None = None
    """A run of the task with a per-tenant concurrency limit: its tenant."""


def read_log(path: Path) -> dict[str, list[Execution]]:
    """Executions per run id, in start order (a torn last line is skipped)."""
    executions: dict[str, Execution] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                record: dict[str, Any] = json.loads(line)
            except ValueError:
                continue
            key = record["x"]
            if record["e"] == "start":
                executions[key] = Execution(
                    record["run"],
                    record["pid"],
                    record["attempt"],
                    record["t"],
                    trigger=record.get("i"),
                    kind=record.get("kind"),
                    item=record.get("item"),
                    key=record.get("key"),
                    seq=record.get("seq"),
                    tenant=record.get("tenant"),
                )
            elif key in executions:
                executions[key].ended = record["t"]
                executions[key].outcome = record["outcome"]
    per_run: dict[str, list[Execution]] = defaultdict(list)
    for execution in sorted(executions.values(), key=lambda e: e.started):
        per_run[execution.run].append(execution)
    return per_run


def in_flight(per_run: Mapping[str, list[Execution]]) -> dict[int, int]:
    """Executions without an end, per worker pid."""
    counts: dict[int, int] = defaultdict(int)
    for executions in per_run.values():
        for execution in executions:
            if execution.ended is None:
                counts[execution.pid] += 1
    return counts


@dataclass(frozen=True)
class Faults:
    """The faults that take a lease away from a worker that did nothing wrong."""

    signals: list[Signalled]
    outages: list[tuple[float, float]]
    """(began, ended) of each time DynamoDB was down (restarts), wall-clock."""
    lease_seconds: float


def explained(execution: Execution, faults: Faults) -> bool:
    """Whether a fault explains this execution being done again."""
    return by_signal(execution, faults.signals, faults.lease_seconds) or by_outage(
        execution, faults.outages, faults.lease_seconds
    )


def by_outage(
    execution: Execution, outages: Iterable[tuple[float, float]], lease_seconds: float
) -> bool:
    """DynamoDB was down long enough for a lease to expire (docs/operations.md, "How
    long an outage a lease survives": a third of the lease whenever the outage begins)
    while this execution ran or while its outcome write (at most a lease after its end)
    was going out."""
    for began, ended in outages:
        if ended - began < lease_seconds / 3:
            continue
        if execution.started < ended and (
            execution.ended is None or execution.ended > began - lease_seconds
        ):
            return True
    return False


def by_signal(execution: Execution, signals: Iterable[Signalled], lease_seconds: float) -> bool:
    """Whether a SIGKILL or SIGSTOP of its worker explains this execution being done
    again: it started before the signal and, for a kill, either never ended or ended
    within one lease duration before it (its outcome write may not have landed)."""
    for sent in signals:
        if sent.pid != execution.pid or execution.started >= sent.at:
            continue
        if sent.action == "stop":
            return True
        if sent.action == "kill" and (
            execution.ended is None or execution.ended > sent.at - lease_seconds
        ):
            return True
    return False


@dataclass
class Figures:
    runs: int = 0
    children: int = 0
    """Runs the fan-outs started: judged like triggered runs, not counted in ``runs``."""
    lost: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    double_successes: list[str] = field(default_factory=list)
    executions: int = 0
    extra_explained: int = 0
    extra_unexplained: int = 0
    unexplained_runs: list[str] = field(default_factory=list)
    extra_by_outage: int = 0
    """Of ``extra_explained``: runs re-executed because DynamoDB was down (restarting)
    for longer than the lease."""
    zombie_completions: int = 0
    """Executions in a frozen worker that ended ``ok`` after it was resumed."""
    recovery_leases: list[float | None] = field(default_factory=list)
    """Per kill: the longest time (in lease durations) until an execution it cut short
    started again elsewhere; ``None`` when the killed worker had nothing in flight."""


def violating(figures: Figures) -> list[str]:
    """The run ids behind any violation, each once, in order of kind."""
    found: dict[str, None] = {}
    for runs in (figures.lost, figures.stuck, figures.double_successes, figures.unexplained_runs):
        found.update(dict.fromkeys(runs))
    return list(found)


def _zombie_ok(execution: Execution, signals: Iterable[Signalled]) -> bool:
    """It started in a worker before that worker was frozen and ended ``ok`` after."""
    return execution.outcome == OK and any(
        s.action == "stop" and s.pid == execution.pid and execution.started < s.at for s in signals
    )


def _run_figures(executions: list[Execution], faults: Faults, figures: Figures) -> int:
    """Adds one run's double success and explained executions; returns its unexplained
    extra executions."""
    plain = [e for e in executions if not explained(e, faults)]
    oks = [e for e in plain if e.outcome == OK]
    if len(oks) > 1:
        figures.double_successes.append(executions[0].run)
    figures.zombie_completions += sum(1 for e in executions if _zombie_ok(e, faults.signals))
    needed = sum(1 for e in plain if e.outcome in DESIGNED_ENDS)
    needed += 1 if any(e.outcome == OK for e in executions) else 0
    extra = max(0, len(executions) - needed)
    explained_extra = min(extra, len(executions) - len(plain))
    figures.extra_explained += explained_extra
    if explained_extra and any(
        by_outage(e, faults.outages, faults.lease_seconds) for e in executions
    ):
        figures.extra_by_outage += explained_extra
    return extra - explained_extra


def _recovery(
    per_run: Mapping[str, list[Execution]],
    kill: Signalled,
    lease_seconds: float,
    statuses: Mapping[str, str | None],
) -> float | None:
    """The longest wait, in leases, until a run the kill cut short started again (a run
    that ended cancelled, as a child of a failed group does, needs no new start)."""
    worst: float | None = None
    for run_id, executions in per_run.items():
        cut = [e for e in executions if e.pid == kill.pid and e.started < kill.at and not e.ended]
        if not cut or statuses.get(run_id) == CANCELLED:
            continue
        later = [e.started for e in executions if e.started > kill.at]
        wait = (min(later) - kill.at) / lease_seconds if later else float("inf")
        worst = wait if worst is None else max(worst, wait)
    return worst


def count(
    triggered: Mapping[int, str],
    statuses: Mapping[str, str | None],
    per_run: Mapping[str, list[Execution]],
    faults: Faults,
    children: Iterable[str] = (),
    designed: Mapping[str, frozenset[str]] | None = None,
) -> Figures:
    """The figures for ``triggered`` runs (index -> run id) and the fan-outs'
    ``children`` (run ids) with their final ``statuses`` (``None``: missing from
    storage); ``designed`` gives the terminal statuses other than ``succeeded`` a run
    may end in by design."""
    designed = designed or {}
    children = list(children)
    figures = Figures(runs=len(triggered), children=len(children))
    for run_id in [*triggered.values(), *children]:
        status = statuses.get(run_id)
        executions = per_run.get(run_id, [])
        figures.executions += len(executions)
        never_ran = not any(e.outcome == OK for e in executions)
        expected = status in designed.get(run_id, ())
        unsuccessful = status != SUCCEEDED or never_ran
        if status is None or (status in TERMINAL and unsuccessful and not expected):
            figures.lost.append(run_id)
        elif status not in TERMINAL:
            figures.stuck.append(run_id)
        if executions and (unexplained := _run_figures(executions, faults, figures)):
            figures.extra_unexplained += unexplained
            figures.unexplained_runs.append(run_id)
    figures.recovery_leases = [
        _recovery(per_run, s, faults.lease_seconds, statuses)
        for s in faults.signals
        if s.action == "kill"
    ]
    return figures
