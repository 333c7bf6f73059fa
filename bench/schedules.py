"""Schedules: what a maintenance pass costs with 1,000 schedules of which 10 are due, and
what one materialized occurrence costs.

One app registers 1,000 schedules (100 with ``--smoke``) on a table with nothing else in
it: all but 10 are daily cron schedules (09:00 in Paris, not due during the measurement),
10 are hourly. The app's
clock is moved by hand, so the 10 become due at once. Three passes are counted:

- ``first sync``: the first pass stores the 1,000 schedules (a one-off per deploy that
  changes definitions);
- ``none due``: a pass a minute later with nothing due: the steady cost of schedules;
- ``10 due``: the pass when the hourly ones are due: it creates their runs.

The runs made are not worked on, so nothing but the schedules differs between the last
two passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3

from bench.backends import Backend
from bench.counting import Counts, RequestCounter
from runlane_sqs import ManualClock, Schedule
from runlane_sqs.engine.reports import JOB_SCHEDULES

TASK = "bench.scheduled"
DUE = 10
START = datetime(2030, 1, 1, 0, 5, tzinfo=UTC)
"""Five minutes past midnight UTC: the midnight occurrence is no longer on time, the
hourly schedules are next due at 01:00."""


@dataclass
class PassCost:
    name: str
    created: int = 0
    seconds: float = 0.0
    counts: Counts = field(default_factory=Counts)

    def to_json(self) -> dict[str, Any]:
        c = self.counts
        return {
            "pass": self.name,
            "runs_created": self.created,
            "requests": dict(sorted(c.requests.items())),
            "dynamodb_requests": c.dynamodb_requests,
            "sqs_requests": c.sqs_requests,
            "items_read": c.items_read,
            "read_units": round(c.read_units, 2),
            "write_units": round(c.write_units, 2),
            "index_write_units": round(c.index_write_units, 2),
        }


def _schedules(total: int) -> list[Schedule]:
    daily = [
        Schedule.cron(f"bench.daily.{n:04d}", "0 9 * * *", tz="Europe/Paris", payload={"n": n})
        for n in range(total - DUE)
    ]
    hourly = [Schedule.every(f"bench.hourly.{n:02d}", 3600, payload={"n": n}) for n in range(DUE)]
    return daily + hourly


def measure_schedules(backend: Backend, total: int) -> list[PassCost]:
    session = boto3.Session()
    counter = RequestCounter(session)
    clock = ManualClock(START)
    app = backend.app(session, clock=clock)
    app.task(lambda ctx, payload: None, name=TASK, schedules=_schedules(total))
    app.provision()
    app.transport.check_queue("default")
    results = []
    for name, advance in (("first sync", 0), ("none due", 60), ("10 due", 3270)):
        clock.advance(advance)
        counter.reset()
        started = datetime.now(UTC)
        report = app.maintenance.run_pass()
        cost = PassCost(name, created=report.jobs[JOB_SCHEDULES].acted, counts=counter.snapshot())
        cost.seconds = (datetime.now(UTC) - started).total_seconds()
        results.append(cost)
    if results[2].created != DUE:
        raise RuntimeError(f"the due pass created {results[2].created} runs, not {DUE}")
    return results


def per_occurrence(idle: PassCost, due: PassCost) -> dict[str, float]:
    """What the due pass cost beyond the idle one, per occurrence it materialized."""
    extra = due.counts.minus(idle.counts)
    return {
        "dynamodb_requests": extra.dynamodb_requests / DUE,
        "sqs_requests": extra.sqs_requests / DUE,
        "write_units": extra.write_units / DUE,
        "index_write_units": extra.index_write_units / DUE,
        "read_units": extra.read_units / DUE,
    }
