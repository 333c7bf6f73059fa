"""Rate limits with three real worker processes (docs/rate-limits.md), on the moto
server and on DynamoDB Local + LocalStack: 200 ready runs under 10 starts a second all
start, none failed or retried, none sooner than the limit allows, no one-second window
holds more than 10 starts, and each run is refused about once; two limits at once (10 a
second in all, 2 per tenant) hold together for five tenants; and counted where the
handlers are entered (each returns its entry time), a limit of 5 a second and one of 2 a
second per tenant hold. The figures are printed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from runlane_sqs import EventType, RateLimit, Run, RunEvent, Runlane, RunStatus
from tests.apps.rated_worker import (
    ENTER,
    ENTER_KEYED,
    ENTER_KEYED_LIMIT,
    ENTER_LIMIT,
    KEYED,
    PER_TENANT,
    RATE,
    TASK,
    register,
)
from tests.emulators import WorkerProcess, wait_until

pytestmark = pytest.mark.integration
WORKERS = 3
SECOND = timedelta(seconds=1)


def _run_all(
    app: Runlane, runs: Sequence[Run], start_worker: Callable[..., WorkerProcess]
) -> tuple[list[datetime], list[int], int]:
    """Start three workers of four threads, wait for every run, and return each run's
    start, how often it was refused for the limits before a claim (a claim given back
    also sleeps: not counted) and the claims given back."""
    histories = _succeed(app, runs, start_worker)
    starts = [[e.at for e in h if e.type is EventType.STARTED][-1] for h in histories]
    given_back = [len(_given_back(h)) for h in histories]
    waits = [sum(e.type is EventType.WAITING_FOR_RATE for e in h) for h in histories]
    refusals = [w - g for w, g in zip(waits, given_back, strict=True)]
    return starts, refusals, sum(given_back)


def _succeed(
    app: Runlane, runs: Sequence[Run], start_worker: Callable[..., WorkerProcess]
) -> list[list[RunEvent]]:
    """Start three workers of four threads, wait for every run to succeed and return
    their histories. None failed or was retried: each attempt but the last was a claim
    given back unrun, back too late for its reserved start."""
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
    histories = [app.runs.events(r.id) for r in runs]
    for run, history in zip(runs, histories, strict=True):
        stored = app.runs.get_stored(run.id)
        assert (stored.attempt, stored.failures) == (1 + len(_given_back(history)), 0)
    return histories


def _given_back(history: Sequence[RunEvent]) -> list[RunEvent]:
    """The claims of a run given back because they came back too late for its start."""
    return [
        e for e in history if e.type is EventType.LEASE_EXPIRED and e.data.get("reason") == "rate"
    ]


def most_in_a_second(starts: Sequence[datetime]) -> int:
    """The most starts in any window of one second (``[t, t + 1 s)``)."""
    return most_in(starts, SECOND)


def most_in(times: Sequence[datetime], window: timedelta) -> int:
    """The most of ``times`` in any window ``[t, t + window)``."""
    ordered = sorted(times)
    return max(sum(1 for t in ordered if s <= t < s + window) for s in ordered)


def shortest_span(times: Sequence[datetime], n: int) -> timedelta:
    """The shortest time from one of ``times`` to the ``n``-th after it."""
    ordered = sorted(times)
    return min(b - a for a, b in zip(ordered, ordered[n:], strict=False))


def test_three_workers_start_no_more_than_the_rate_in_any_second(
    make_app: Callable[..., Runlane], start_worker: Callable[..., WorkerProcess]
) -> None:
    app = register(make_app())
    app.provision()
    runs = app.trigger_many(TASK, range(200))

    starts, refusals, given_back = _run_all(app, runs, start_worker)

    took = (max(starts) - min(starts)).total_seconds()
    print(
        f"\n200 runs at {RATE}/s, {WORKERS} workers: starts over {took:.1f} s, "
        f"most in a second {most_in_a_second(starts)}, refused claims per run "
        f"{sum(refusals) / len(runs):.2f} (most {max(refusals)}), claims given back "
        f"{given_back}"
    )
    assert most_in_a_second(starts) <= RATE
    # never faster than the limit; about 21 s here (the limit less its grace, and a start
    # lost to each run that came late for its reservation or whose claim was given back:
    # 25.5 s on DynamoDB Local + LocalStack, 30 to 32 s on the moto server of a loaded
    # machine). How close to its rate a limit runs is the bench's figure
    # (bench/rates.py); this bound only catches runs left asleep.
    assert 190 / RATE <= took <= len(runs) / RATE * 2
    # once for nearly every run (all but the first wait for a reserved start); more only for
    # a run its worker handed a thread too late (measured 1.06 to 1.18 on the moto server;
    # a claim given back, 20 to 25% of them there, is counted apart)
    assert sum(refusals) / len(runs) <= 2


def test_a_global_and_a_per_tenant_limit_hold_together(
    make_app: Callable[..., Runlane], start_worker: Callable[..., WorkerProcess]
) -> None:
    app = register(make_app())
    app.provision()
    tenants = [f"tenant-{n}" for n in range(5)]
    runs = app.trigger_many(KEYED, [{"tenant": t, "n": n} for n in range(12) for t in tenants])

    starts, refusals, given_back = _run_all(app, runs, start_worker)

    by_tenant = {
        t: [s for s, r in zip(starts, runs, strict=True) if r.concurrency_key == t] for t in tenants
    }
    took = (max(starts) - min(starts)).total_seconds()
    print(
        f"\n60 runs of 5 tenants at {RATE}/s and {PER_TENANT}/s each: starts over {took:.1f} s,"
        f" most in a second {most_in_a_second(starts)} (a tenant: "
        f"{max(most_in_a_second(s) for s in by_tenant.values())}), refused claims per run "
        f"{sum(refusals) / len(runs):.2f}, claims given back {given_back}"
    )
    assert most_in_a_second(starts) <= RATE
    assert all(most_in_a_second(s) <= PER_TENANT for s in by_tenant.values())
    assert took >= 11 / PER_TENANT * 0.95  # each tenant's 12 runs take 11 spacings
    assert sum(refusals) / len(runs) <= 1.5


@pytest.mark.parametrize(
    ("task", "limit", "tenants"),
    [(ENTER, ENTER_LIMIT, ["acme"]), (ENTER_KEYED, ENTER_KEYED_LIMIT, ["acme", "globex"])],
    ids=["task", "per-key"],
)
def test_handlers_are_entered_no_faster_than_the_limit(
    make_app: Callable[..., Runlane],
    start_worker: Callable[..., WorkerProcess],
    task: str,
    limit: RateLimit,
    tenants: list[str],
) -> None:
    """20 ready runs; each handler returns when it was entered (``time.time()``, first
    thing, by the worker's clock). Counted there, no window of ``per`` less the grace
    holds more than ``rate + burst`` entries of one scope (docs/rate-limits.md, "How
    exact": the grace left is room for the few milliseconds between the worker's check
    and the handler's first line), and no handler was entered before the ``started`` its
    run records."""
    app = register(make_app())
    app.provision()
    payloads = [{"tenant": t, "n": n} for n in range(20 // len(tenants)) for t in tenants]
    runs = app.trigger_many(task, payloads)

    histories = _succeed(app, runs, start_worker)

    entered = [_entered(app.runs.get_stored(r.id)) for r in runs]
    started = [[e.at for e in h if e.type is EventType.STARTED][-1] for h in histories]
    keys = [
        [at for at, r in zip(entered, runs, strict=True) if r.concurrency_key == t] for t in tenants
    ]
    scopes = keys if limit.per_key else [entered]  # the entries of each scope
    assert isinstance(limit.per, timedelta)
    window = limit.per - timedelta(microseconds=limit.rate_in("scope").grace_us)
    most = limit.rate + limit.burst
    lag = [e - s for e, s in zip(entered, started, strict=True)]
    print(
        f"\n{len(runs)} runs under {limit}: most entries in a window of per "
        f"{max(most_in(s, limit.per) for s in scopes)}, of per less the grace "
        f"{max(most_in(s, window) for s in scopes)}; shortest span of {most + 1} entries "
        f"{min(shortest_span(s, most) for s in scopes).total_seconds() * 1000:.0f} ms; "
        f"entry {min(lag).total_seconds() * 1000:.1f} to {max(lag).total_seconds() * 1000:.1f}"
        f" ms after started; claims given back {sum(len(_given_back(h)) for h in histories)}"
    )
    assert max(most_in(s, window) for s in scopes) <= most
    assert min(lag) >= timedelta(0)


def _entered(run: Run) -> datetime:
    """When ``run``'s handler was entered, as it returned it."""
    assert isinstance(run.result, dict)
    entered = run.result["entered"]
    assert isinstance(entered, float)
    return datetime.fromtimestamp(entered, UTC)
