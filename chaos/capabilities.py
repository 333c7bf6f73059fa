"""The invariants of the capabilities in the mix, checked from the ground-truth log
(chaos/ledger.py): pure, no I/O.

- **Ordering** (runs triggered with an ordering key): a run of a key starts only after
  the run before it in trigger order succeeded, so the key's runs run one at a time, in
  order. A run whose predecessor never succeeded is not judged here (that run is lost,
  and counted so).
- **Concurrency** (the runs of :data:`chaos.app.KEYED_TASK`): at no moment more
  executions of one tenant in flight than its ``key_limit``. An execution a fault
  explains (its worker was killed or frozen, or DynamoDB was down long enough for its
  lease to expire) is left out: its slot was rightly given to another run while its
  handler, cut off from storage, went on.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

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
        for _, step, run_id in edges:
            running[run_id] += step
            if not running[run_id]:
                del running[run_id]
            now = sum(running.values())
            figures.most_at_once = max(figures.most_at_once, now)
            if now > key_limit:
                figures.over_limit.extend(r for r in running if r not in figures.over_limit)
