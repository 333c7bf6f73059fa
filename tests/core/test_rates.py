"""Rate limits' arithmetic (runlane_sqs/core/rates.py): reservations never let more than
``rate + burst`` runs start in any window of ``per`` (even when each starts up to its
grace late), runs start in the order they reserved their starts, an idle scope starts a run
at once, and two limits hold together."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.rates import (
    Rate,
    RateLimit,
    RateRecord,
    RateView,
    Reserve,
    check_cost,
    key_rate_scope,
    next_start,
    reserve_starts,
    start_at,
    task_rate_scope,
    view_of,
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
