"""The invariants of the capabilities in the mix, checked from the ground-truth log
(chaos/ledger.py) and, for schedules and rate limits, from what the harness read from
storage: pure, no I/O.

- **Ordering** (runs triggered with an ordering key): a run of a key starts only after
  the run before it in trigger order succeeded, so the key's runs run one at a time, in
  order. A run whose predecessor never succeeded is not judged here (that run is lost,
  and counted so).
- **Schedules** (:data:`chaos.app.TICK`): each occurrence created once, none missed.
- **Rate limits** (:data:`chaos.app.RATED_TASK`): no one-second window with more starts
  than the rate, by the runs' ``started`` events (the workers' clocks, as the limit
  measures them).
- **Concurrency** (the runs of :data:`chaos.app.KEYED_TASK`): at no moment more
  executions of one tenant in flight than its ``key_limit``. An execution a fault
  explains (its worker was killed or frozen, or DynamoDB was down long enough for its
  lease to expire) is left out: its slot was rightly given to another run while its
  handler, cut off from storage, went on.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from chaos.ledger import OK, Execution, Faults, explained


@dataclass
class CapabilityFigures:
    ordered_runs: int = 0
    ordering_keys: int = 0
    out_of_order: list[str] = field(default_factory=list)
    """Runs that started before the run ahead of them in their key succeeded."""
    keyed_runs: int = 0
    most_at_once: int = 0
    """The most executions of one tenant in flight at once (unexplained ones)."""
    over_limit: list[str] = field(default_factory=list)
    """Runs in flight when a tenant had more than its limit."""
    occurrences: int = 0
    """Runs the schedule created (its occurrences)."""
    duplicate_occurrences: list[str] = field(default_factory=list)
    """Occurrences (ISO times) with more than one run."""
    missed_occurrences: list[str] = field(default_factory=list)
    """Occurrences between the first and the last created that have no run."""
    rated_starts: int = 0
    most_started_in_a_second: int = 0
    """The most ``started`` events of the rate-limited task in any ``[t, t + 1 s)``."""
    rate_exceeded: bool = False


def check(
    per_run: Mapping[str, list[Execution]], faults: Faults, key_limit: int
) -> CapabilityFigures:
    figures = CapabilityFigures()
    _ordering(per_run, figures)
    _concurrency(per_run, faults, key_limit, figures)
    return figures


def _ordering(per_run: Mapping[str, list[Execution]], figures: CapabilityFigures) -> None:
    lines: dict[str, dict[int, str]] = defaultdict(dict)
    for run_id, executions in per_run.items():
        first = executions[0]
        if first.key is not None and first.seq is not None:
            lines[first.key][first.seq] = run_id
    figures.ordering_keys = len(lines)
    for line in lines.values():
        figures.ordered_runs += len(line)
        ordered = [line[seq] for seq in sorted(line)]
        for ahead, behind in itertools.pairwise(ordered):
            succeeded = [e.ended for e in per_run[ahead] if e.outcome == OK and e.ended]
            if not succeeded:
                continue
            if per_run[behind][0].started < min(succeeded):
                figures.out_of_order.append(behind)


def _concurrency(
    per_run: Mapping[str, list[Execution]],
    faults: Faults,
    key_limit: int,
    figures: CapabilityFigures,
) -> None:
    by_tenant: dict[str, list[Execution]] = defaultdict(list)
    for executions in per_run.values():
        if executions[0].tenant is None:
            continue
        figures.keyed_runs += 1
        for execution in executions:
            if execution.ended is not None and not explained(execution, faults):
                by_tenant[str(execution.tenant)].append(execution)
    for executions in by_tenant.values():
        edges = sorted(
            [(e.started, 1, e.run) for e in executions]
            + [(e.ended or e.started, -1, e.run) for e in executions],
            key=lambda edge: (edge[0], edge[1]),  # an end before a start at the same time
        )
        running: dict[str, int] = defaultdict(int)
        for _, delta, run_id in edges:
            running[run_id] += delta
            if not running[run_id]:
                del running[run_id]
            now = sum(running.values())
            figures.most_at_once = max(figures.most_at_once, now)
            if now > key_limit:
                figures.over_limit.extend(r for r in running if r not in figures.over_limit)


def schedule_figures(
    figures: CapabilityFigures, occurrences: list[datetime], interval: timedelta
) -> None:
    """Each occurrence (a run's ``scheduled_for``) at most once, and every occurrence on
    the schedule's grid between the first and the last there (its catch-up policy is
    ``all``: an outage delays occurrences, it never drops them)."""
    figures.occurrences = len(occurrences)
    seen = Counter(occurrences)
    figures.duplicate_occurrences = sorted(at.isoformat() for at, n in seen.items() if n > 1)
    if not seen:
        return
    at, last = min(seen), max(seen)
    while at < last:
        if at not in seen:
            figures.missed_occurrences.append(at.isoformat())
        at += interval


def rate_figures(figures: CapabilityFigures, starts: list[float], rate: int) -> None:
    """The most starts (epoch seconds) in any one-second window, against ``rate``."""
    ordered = sorted(starts)
    figures.rated_starts = len(ordered)
    most = 0
    for first, start in enumerate(ordered):
        last = bisect.bisect_left(ordered, start + 1.0)
        most = max(most, last - first)
    figures.most_started_in_a_second = most
    figures.rate_exceeded = most > rate
