"""Rate limits: what a task's ``RateLimit`` costs per run, how many claims it refuses at
saturation, and how close to its rate the runs start (docs/rate-limits.md).

Three cases of the same ``runs`` runs (100; 20 with ``--smoke``), each produced and
worked as the concurrency limits' cases are (:func:`bench.limits.produce_and_work`: a
fresh app on a counting session, a producer keeping at most 40 runs ahead, one sync
worker of 8 threads in this process, a handler that sleeps 10 ms):

- ``unlimited``: the task without a rate limit;
- ``rate 1,000/s``: a limit the worker never reaches, so no run is refused: what a
  reservation costs a run that starts at once;
- ``rate 25/s``: a limit below what the worker does, so runs wait for their reserved
  starts: the refused claims per run, the rate the runs start at against the limit, and
  the most starts in any one-second window (at most 25).

Afterwards (not counted) each run's history is read: its ``started`` event's time and
its ``waiting_for_rate`` events (claims that found the run early for its limit).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bench.limits import (
    QUEUE,
    TASK,
    UNLIMITED,
    WARMUP_RUNS,
    WORKER_CONCURRENCY,
    AppFactory,
    Handler,
    LimitResult,
    Progress,
    produce_and_work,
    read_histories,
)
from runlane_sqs import EventType, RateLimit, Runlane

RATES: tuple[int | None, ...] = (None, 1_000, 25)
"""The cases: no limit, one the worker never reaches, and one below what it does."""
SECOND = timedelta(seconds=1)


def rate_case_name(rate: int | None) -> str:
    return UNLIMITED if rate is None else f"rate {rate:,}/s"


@dataclass
class RateResult(LimitResult):
    """A case's figures (:class:`LimitResult`'s) and its rate limit's."""

    rate: int | None = None
    refused_claims: int = 0
    """``waiting_for_rate`` events: claims that found the run early for its limit."""
    starts_per_second: float | None = None
    """(runs - 1) over the time from the first start to the last."""
    most_in_a_second: int = 0
    """The most ``started`` events in any window ``[t, t + 1 s)``."""

    def to_json(self) -> dict[str, Any]:
        return {
            **super().to_json(),
            "rate": self.rate,
            "refused_claims_per_run": self.per_run(self.refused_claims),
            "starts_per_second": self.starts_per_second,
            "of_the_rate": self.starts_per_second / self.rate
            if self.rate and self.starts_per_second
            else None,
            "most_in_a_second": self.most_in_a_second,
        }


def measure_rate_case(
    rate: int | None, make_app: AppFactory, runs: int, progress: Progress
) -> RateResult:
    """One case: ``runs`` runs of a task limited to ``rate`` starts a second (``None``:
    no limit), produced and worked in this process."""

    def define(app: Runlane, handler: Handler) -> None:
        limits = [] if rate is None else [RateLimit(rate, per=1)]
        app.task(handler, name=TASK, queue=QUEUE, rate_limits=limits)

    result = RateResult(rate_case_name(rate), None, WORKER_CONCURRENCY, runs, rate=rate)
    app, ids = produce_and_work(result, define, make_app, progress)
    read_histories(app, ids, result)
    starts: list[datetime] = []
    for run_id in ids:
        events = app.runs.events(run_id)
        result.refused_claims += sum(e.type is EventType.WAITING_FOR_RATE for e in events)
        starts += [e.at for e in events if e.type is EventType.STARTED]
    starts.sort()
    if len(starts) > 1 and starts[-1] > starts[0]:
        result.starts_per_second = (len(starts) - 1) / (starts[-1] - starts[0]).total_seconds()
    result.most_in_a_second = most_in_a_window(starts, SECOND)
    if rate is not None and result.most_in_a_second > rate and result.status == "ok":
        result.status = f"failed: {result.most_in_a_second} starts in one second, limit {rate}"
    return result


def most_in_a_window(times: list[datetime], window: timedelta) -> int:
    """The most of the sorted ``times`` in any ``[t, t + window)``."""
    most, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= window:
            first += 1
        most = max(most, last - first + 1)
    return most


def measure_rates(
    make_app: AppFactory,
    runs: int,
    progress: Callable[[str], Progress],
    *,
    warmup: int = WARMUP_RUNS,
) -> list[RateResult]:
    """Every case in :data:`RATES`, after an unreported warm-up of the first two."""
    for rate in RATES[:2]:
        measure_rate_case(rate, make_app, min(runs, warmup), lambda done: None)
    return [
        measure_rate_case(rate, make_app, runs, progress(rate_case_name(rate))) for rate in RATES
    ]
