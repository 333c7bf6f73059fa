"""Rate limits' arithmetic (runlane_sqs/core/rates.py): reservations never let more than
``rate + burst`` runs start in any window of ``per`` (even when each starts up to its
grace late), runs start in the order they reserved their starts, an idle scope starts a run
at once, and two limits hold together; a worker's claim lead follows its slowest recent
claims; a run sleeping for its start is due that lead before it, and a claim back too late
for its start is given back in the same write."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runlane_sqs.core import machine
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.model import EventType, RunStatus
from runlane_sqs.core.rates import (
    CLAIM_LEAD,
    MAX_CLAIM_LEAD,
    SHORT_WAIT,
    ClaimLead,
    Rate,
    RateLimit,
    RateRecord,
    RateView,
    Reserve,
    check_cost,
    far_ahead,
    key_rate_scope,
    next_start,
    reserve_starts,
    start_at,
    task_rate_scope,
    to_epoch_us,
    view_of,
    wait_for_rate,
)

SECOND_US = 1_000_000


def claim(rates: list[Rate], tats: dict[str, int | None], now: int, cost: int = 1) -> int:
    """One claim's start: its start reserved as the message path reserves it
    (:func:`reserve_starts`), each as a store's conditional update would (``tats`` kept)."""
    taking = reserve_starts(rates, cost=cost, now_us=now)
    request = next(taking)
    while True:
        scope = request.rate.scope
        if isinstance(request, Reserve):
            tats[scope], result = next_start(
                request.rate, tats.get(scope), cost=cost, not_before_us=request.not_before_us
            )
        else:
            tats[scope], result = start_at(
                request.rate, tats.get(scope), cost=cost, at_us=request.at_us
            )
        try:
            request = taking.send(result)
        except StopIteration as done:
            return int(done.value)


def starts(rates: list[Rate], arrivals: list[int], cost: int = 1) -> list[int]:
    """Each arrival's start, one claim after another."""
    tats: dict[str, int | None] = {}
    return [claim(rates, tats, now, cost) for now in arrivals]


def most_in_a_window(times: list[int], window: int) -> int:
    ordered = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(ordered):
        while at - ordered[first] >= window:
            first += 1
        most = max(most, last - first + 1)
    return most


arrival_lists = st.lists(st.integers(0, 5 * SECOND_US), min_size=1, max_size=120).map(sorted)


@settings(max_examples=200, deadline=None)
@given(
    arrivals=arrival_lists,
    rate=st.integers(1, 20),
    burst=st.integers(0, 5),
)
def test_no_window_of_per_holds_more_than_rate_plus_burst_starts(
    arrivals: list[int], rate: int, burst: int
) -> None:
    limit = RateLimit(rate, per=1, burst=burst).rate_in(task_rate_scope("t", SECOND_US))
    found = starts([limit], arrivals)
    assert most_in_a_window(found, SECOND_US) <= rate + burst
    assert all(start >= now for start, now in zip(found, arrivals, strict=True))
    assert found == sorted(found)  # first come, first served


@settings(max_examples=200, deadline=None)
@given(
    arrivals=arrival_lists,
    rate=st.integers(1, 20),
    burst=st.integers(0, 5),
    lateness=st.lists(st.floats(0, 1), min_size=120, max_size=120),
)
def test_runs_starting_up_to_the_grace_late_still_keep_every_window(
    arrivals: list[int], rate: int, burst: int, lateness: list[float]
) -> None:
    limit = RateLimit(rate, per=1, burst=burst).rate_in(task_rate_scope("t", SECOND_US))
    late = [int(share * limit.grace_us) for share in lateness]
    found = [start + d for start, d in zip(starts([limit], arrivals), late, strict=False)]
    assert most_in_a_window(found, SECOND_US) <= rate + burst


@pytest.mark.parametrize(
    ("limit", "grace_us"),
    [
        (RateLimit(10, per=1), 50_000),
        (RateLimit(1, per=timedelta(milliseconds=100)), 5_000),
        (RateLimit(600, per=60), 50_000),
    ],
)
def test_the_grace_is_a_twentieth_of_per_at_most_50_ms(limit: RateLimit, grace_us: int) -> None:
    rate = limit.rate_in("rate#t")
    assert rate.grace_us == grace_us
    assert rate.interval_us == -(-(limit.per_us + grace_us) // limit.rate)


@settings(max_examples=100, deadline=None)
@given(arrivals=arrival_lists)
def test_two_limits_hold_together(arrivals: list[int]) -> None:
    wide = RateLimit(10, per=1).rate_in(task_rate_scope("t", SECOND_US))
    tenant = RateLimit(3, per=1, burst=1).rate_in(key_rate_scope("t", SECOND_US, "acme"))
    found = starts([wide, tenant], arrivals)
    assert most_in_a_window(found, SECOND_US) <= 3 + 1
    assert all(start >= now for start, now in zip(found, arrivals, strict=True))


@settings(max_examples=100, deadline=None)
@given(arrivals=arrival_lists, keys=st.lists(st.sampled_from("abc"), min_size=120))
def test_a_global_and_a_per_key_limit_hold_for_every_key_and_in_all(
    arrivals: list[int], keys: list[str]
) -> None:
    """Each run reserves the global start, then its key's at that start (or from the key's
    next place): no window breaks either limit, whatever the interleaving of keys."""
    wide = RateLimit(10, per=1).rate_in(task_rate_scope("t", SECOND_US))
    tats: dict[str, int | None] = {}
    by_key: dict[str, list[int]] = {}
    every: list[int] = []
    for now, key in zip(arrivals, keys, strict=False):
        tenant = RateLimit(2, per=1).rate_in(key_rate_scope("t", SECOND_US, key))
        begun = claim([wide, tenant], tats, now)
        by_key.setdefault(key, []).append(begun)
        every.append(begun)
    assert most_in_a_window(every, SECOND_US) <= 10
    assert all(most_in_a_window(s, SECOND_US) <= 2 for s in by_key.values())


def test_a_limit_that_cannot_start_the_run_then_says_when_it_can() -> None:
    wide = RateLimit(10, per=1).rate_in(task_rate_scope("t", SECOND_US))
    tenant = RateLimit(1, per=1).rate_in(key_rate_scope("t", SECOND_US, "acme"))
    tats: dict[str, int | None] = {tenant.scope: 2 * SECOND_US}
    start = claim([wide, tenant], tats, 0)
    assert start == 2 * SECOND_US  # the tenant's next start; the wide reservation at 0 is left
    assert tats[tenant.scope] == 2 * SECOND_US + tenant.interval_us
    assert tats[wide.scope] == 2 * SECOND_US + wide.interval_us
    assert start_at(tenant, 5, cost=1, at_us=3) == (5, 5)  # nothing changes when refused


def test_an_operator_sees_the_next_start_what_may_start_now_and_what_is_reserved() -> None:
    limit = RateLimit(10, per=1, burst=2).rate_in(task_rate_scope("t", SECOND_US))
    interval = limit.interval_us

    def seen(tat: int, now: int) -> RateView:
        return view_of(RateRecord(limit.scope, tat, interval, limit.tolerance_us), now)

    assert seen(0, SECOND_US) == RateView(SECOND_US, 3, 0)  # idle: 1 + burst at once
    assert seen(SECOND_US + interval, SECOND_US) == RateView(SECOND_US, 2, 1)
    ahead = SECOND_US + 5 * interval  # five reserved: the burst is spent
    assert seen(ahead, SECOND_US) == RateView(ahead - 2 * interval, 0, 5)


def test_an_idle_scope_starts_at_once_and_a_busy_one_spaces_runs() -> None:
    limit = RateLimit(10, per=1, burst=2).rate_in(task_rate_scope("t", SECOND_US))
    assert starts([limit], [0] * 5) == [0, 0, 0, 105_000, 210_000]  # 50 ms grace / 10
    assert starts([limit], [0, 0, 0, 10 * SECOND_US]) == [0, 0, 0, 10 * SECOND_US]


def test_a_run_costs_its_units_in_every_limit() -> None:
    limit = RateLimit(10, per=1).rate_in(task_rate_scope("t", SECOND_US))
    assert starts([limit], [0, 0, 0], cost=3) == [0, 315_000, 630_000]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RateLimit(0), "rate is from 1"),
        (lambda: RateLimit(1.5), "rate is a whole number"),  # type: ignore[arg-type]
        (lambda: RateLimit(True), "rate is a whole number"),
        (lambda: RateLimit(10, burst=-1), "burst is from 0"),
        (lambda: RateLimit(10, per=0), "per is from"),
        (lambda: RateLimit(10, per=timedelta(days=2)), "per is from"),
        (lambda: RateLimit(1_000_000, per=timedelta(milliseconds=1)), "less than a microsecond"),
        (lambda: RateLimit(10, per_key="tenant"), "per_key is True or False"),  # type: ignore[arg-type]
        (lambda: check_cost(0), "cost is from 1"),
    ],
)
def test_bad_limits_are_refused(make: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make()  # type: ignore[operator]


def test_a_claim_back_too_late_for_its_start_is_given_back_asleep_until_the_next() -> None:
    """A run early for its start sleeps until its worker's lead before it, when it is
    claimed again; a claimed run (its write came back too late for its start) is given back in
    the same write, fenced on its lease: ``lease_expired`` (``before_start``, reason
    ``rate``), then ``waiting_for_rate``, no lease or slot left."""
    now = datetime(2030, 1, 1, tzinfo=UTC)
    run, _ = machine.new_run(
        run_id="r1", environment="e", task="t", queue="q", payload=None, now=now
    )
    start = now + timedelta(milliseconds=700)
    policy = machine.RepublishPolicy()
    lead = timedelta(milliseconds=300)

    asleep = wait_for_rate(run, to_epoch_us(start), ["s"], now=now, lead=lead, republish=policy)

    assert (asleep.fence, asleep.after.rate_start) == (None, start)
    assert asleep.after.due_at == start - lead
    claim = machine.claim_lease(run, now=now, owner="w", token="k", duration=timedelta(minutes=1))
    assert isinstance(claim, machine.Transition)
    claimed = claim.after

    given_back = wait_for_rate(
        claimed, to_epoch_us(start), ["s"], now=now, lead=lead, republish=policy
    )

    assert (given_back.before, given_back.fence) == (claimed, "k")
    assert [(e.seq, e.type) for e in given_back.events] == [
        (claimed.seq + 1, EventType.LEASE_EXPIRED),
        (claimed.seq + 2, EventType.WAITING_FOR_RATE),
    ]
    assert given_back.events[0].data == {"worker": "w", "before_start": True, "reason": "rate"}
    after = given_back.after
    assert (after.status, after.lease, after.slots, after.attempt) == (
        RunStatus.QUEUED,
        None,
        (),
        1,
    )
    assert (after.rate_start, after.due_at, after.seq) == (
        start,
        start - lead,
        claimed.seq + 2,
    )


def test_a_claim_lead_grows_with_a_slow_claim_at_once_and_shrinks_slowly() -> None:
    """A worker starts at ``CLAIM_LEAD``; one claim that took 400 ms makes its lead 800 ms at
    once (twice the slowest claim), faster claims take 3% off each time, never below
    ``CLAIM_LEAD``, and however slow the store, the lead stays within ``MAX_CLAIM_LEAD``."""
    lead = ClaimLead()
    assert lead.lead == CLAIM_LEAD

    lead.took(timedelta(milliseconds=400))
    assert lead.lead == timedelta(milliseconds=800)
    lead.took(timedelta(milliseconds=10))
    assert lead.lead == timedelta(milliseconds=776)
    for _ in range(100):
        lead.took(timedelta(milliseconds=10))
    assert lead.lead == CLAIM_LEAD

    lead.took(timedelta(minutes=1))
    assert lead.lead == MAX_CLAIM_LEAD


def test_a_start_beyond_the_lead_and_a_short_wait_is_far_ahead() -> None:
    lead = timedelta(milliseconds=300)
    edge = to_epoch_us(datetime(2030, 1, 1, tzinfo=UTC))
    now = edge - (lead + SHORT_WAIT) // timedelta(microseconds=1)
    assert not far_ahead(edge, now, lead)
    assert far_ahead(edge + 1, now, lead)
