"""Rate limits with three real worker processes (docs/rate-limits.md), on the moto
server and on DynamoDB Local + LocalStack: 200 ready runs under 10 starts a second all
start, none failed or retried, none sooner than the limit allows, no one-second window
holds more than 10 starts, and each run is refused about once; two limits at once (10 a
second in all, 2 per tenant) hold together for five tenants. The figures are printed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import pytest

from runlane_sqs import EventType, Run, Runlane, RunStatus
from tests.apps.rated_worker import KEYED, PER_TENANT, RATE, TASK, register
from tests.emulators import WorkerProcess, wait_until

pytestmark = pytest.mark.integration
WORKERS = 3
SECOND = timedelta(seconds=1)


def _run_all(
    app: Runlane, runs: Sequence[Run], start_worker: Callable[..., WorkerProcess]
) -> tuple[list[datetime], list[int]]:
    """Start three workers of four threads, wait for every run, and return each run's
    start and how often its claim was refused for the limits."""
    for _ in range(WORKERS):
        start_worker("--app", "tests.apps.rated_worker:app", "--concurrency", "4")

    pending = [r.id for r in runs]

    def all_done() -> bool:
        # each poll reads only from the first run not seen succeeded on, so the test's own
        # reads do not load the emulator the workers share
        while pending and app.runs.get_stored(pending[0]).status is RunStatus.SUCCEEDED:
            pending.pop(0)
        return not pending

    wait_until(all_done, len(runs) / RATE * 2 + 30, "every run to succeed")
    stored = [app.runs.get_stored(r.id) for r in runs]
    assert all((r.attempt, r.failures) == (1, 0) for r in stored)  # none failed or retried
    histories = [app.runs.events(r.id) for r in runs]
    starts = [next(e.at for e in h if e.type is EventType.STARTED) for h in histories]
    refusals = [sum(e.type is EventType.WAITING_FOR_RATE for e in h) for h in histories]
    return starts, refusals


def most_in_a_second(starts: Sequence[datetime]) -> int:
    """The most starts in any window of one second (``[t, t + 1 s)``)."""
    ordered = sorted(starts)
    return max(sum(1 for t in ordered if s <= t < s + SECOND) for s in ordered)


def test_three_workers_start_no_more_than_the_rate_in_any_second(
    make_app: Callable[..., Runlane], start_worker: Callable[..., WorkerProcess]
) -> None:
    app = register(make_app())
    app.provision()
    runs = app.trigger_many(TASK, range(200))

    starts, refusals = _run_all(app, runs, start_worker)

    took = (max(starts) - min(starts)).total_seconds()
    print(
        f"\n200 runs at {RATE}/s, {WORKERS} workers: starts over {took:.1f} s, "
        f"most in a second {most_in_a_second(starts)}, refused claims per run "
        f"{sum(refusals) / len(runs):.2f} (most {max(refusals)})"
    )
    assert most_in_a_second(starts) <= RATE
    # never faster than the limit; about 21 s here (the limit less its grace, and a start
    # lost to each run that came late for its reservation: 24-25 s on the moto server of
    # a free machine, 30 s on a loaded one). How close to its rate a limit runs is the
    # bench's figure (bench/rates.py); this bound only catches runs left asleep.
    assert 190 / RATE <= took <= len(runs) / RATE * 2
    # once for nearly every run (all but the first wait for a reserved start); more only for
    # a run its worker handed a thread too late (measured 1.06 to 1.18 on the moto server)
    assert sum(refusals) / len(runs) <= 2


def test_a_global_and_a_per_tenant_limit_hold_together(
    make_app: Callable[..., Runlane], start_worker: Callable[..., WorkerProcess]
) -> None:
    app = register(make_app())
    app.provision()
    tenants = [f"tenant-{n}" for n in range(5)]
    runs = app.trigger_many(KEYED, [{"tenant": t, "n": n} for n in range(12) for t in tenants])

    starts, refusals = _run_all(app, runs, start_worker)

    by_tenant = {
        t: [s for s, r in zip(starts, runs, strict=True) if r.concurrency_key == t] for t in tenants
    }
    took = (max(starts) - min(starts)).total_seconds()
    print(
        f"\n60 runs of 5 tenants at {RATE}/s and {PER_TENANT}/s each: starts over {took:.1f} s,"
        f" most in a second {most_in_a_second(starts)} (a tenant: "
        f"{max(most_in_a_second(s) for s in by_tenant.values())}), refused claims per run "
        f"{sum(refusals) / len(runs):.2f}"
    )
    assert most_in_a_second(starts) <= RATE
    assert all(most_in_a_second(s) <= PER_TENANT for s in by_tenant.values())
    assert took >= 11 / PER_TENANT * 0.95  # each tenant's 12 runs take 11 spacings
    assert sum(refusals) / len(runs) <= 1.5
