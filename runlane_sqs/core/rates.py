"""Rate limits: how many runs may *start* per interval, across the whole fleet.

A limit has a *scope*: ``rate#queue#{queue}`` (every run of a queue),
``rate#task#{task}#{per}`` (every run of a task) or ``rate#key#{task}#{per}#{key}`` (a
task's runs with the same key: a tenant, an API account), ``per`` in microseconds (a task
may have one limit per interval, and one per key). Each scope keeps one number in storage,
its *theoretical arrival time* (TAT) as the generic cell rate algorithm (GCRA) keeps it:
runs are spaced ``interval = (per + grace) / rate`` apart, and a run may start up to
``tolerance = burst * interval`` ahead of that spacing.

A run *starts* when its handler is entered: at its reserved start or up to ``grace``
after it (its worker's own delay: a busy thread), never before; one that comes later
reserves again. The ``grace`` in the spacing is what keeps every window of ``per`` within
``rate + burst`` starts even then: ``grace`` is ``per / 20``, at most 50 ms, so a
saturated scope runs at about 95% of its limit for ``per`` of a second and at its limit
for a minute (docs/rate-limits.md, "How exact").

A claim *reserves a start* in each scope of its run (:func:`next_start`): one atomic
update that never conflicts with another claim, its worker's *claim lead* ahead of now at
the earliest (:class:`ClaimLead`: learnt from how long that worker's recent claims took,
from :data:`CLAIM_LEAD` up to :data:`MAX_CLAIM_LEAD`). A run whose start is at most the
lead and :data:`SHORT_WAIT` ahead is claimed at once and its handler waits for the start,
so the claim's write is over when the handler enters; a claim that came back later than
the grace after its start is given back, to sleep until a start reserved again. A run
whose start is later sleeps until then, released without a lease, no attempt or retry
counted, and is claimed again the lead before its start without reserving again. So a run
is refused once at most while its worker keeps up, and runs start in the order they
reserved (first come, first served). A run under several limits reserves in the narrowest
one, then in each other one at that very start (:func:`start_at`); a limit that cannot
start it then says when it could, and the first reservation is made again from that time
(:func:`reserve_starts`).

Times are whole microseconds since the Unix epoch. Nothing here performs I/O or reads
a clock.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from runlane_sqs.core.clock import EPOCH, ONE_MS, Duration, to_timedelta, truncate_ms
from runlane_sqs.core.errors import ConfigurationError, StorageUnavailable
from runlane_sqs.core.machine import (
    RepublishPolicy,
    Transition,
    eager_wake_at,
    followed_by,
    transition,
    withdraw_claim,
)
from runlane_sqs.core.model import EventType, Run

RATE_SCOPE = "rate"
MAX_RATE = 1_000_000
"""Most starts per interval."""
MAX_BURST = 100_000
SHORTEST_PER = timedelta(milliseconds=1)
LONGEST_PER = timedelta(days=1)
MAX_COST = 10_000
"""Most units one run may cost."""
ONE_US = timedelta(microseconds=1)
MAX_GRACE = timedelta(milliseconds=50)
"""The longest a run may start after its place (see the module's docs)."""
GRACE_SHARE = 20
"""A limit's grace is at most ``per / GRACE_SHARE``."""
CLAIM_LEAD = timedelta(milliseconds=100)
"""The least a claim reserves its run's start ahead of now, and a worker's lead before it
has seen a claim: room for the reservation to return and the claim's write, before the
handler is entered at that start. The price is the lead in latency for a limited run whose
limits are idle (docs/rate-limits.md, "How exact")."""
MAX_CLAIM_LEAD = timedelta(seconds=2)
"""The most a claim reserves ahead, however slow its store has been."""
LEAD_MARGIN = 2.0
"""A worker's lead is this many times its slowest recent claim..."""
LEAD_DECAY = 0.97
"""...and shrinks by this factor with each faster one."""
SHORT_WAIT = timedelta(milliseconds=200)
"""How much earlier than its lead a claim may be made before its run's reserved start:
the attempt's thread waits the rest after the claim's write, then enters the handler. A
run whose start is further ahead sleeps until the lead before it (no thread tied up), then
is claimed."""
GIVEN_BACK_FOR_RATE = "rate"
"""The ``reason`` of the ``lease_expired`` event of a claim given back because its write
came back later than the grace after its reserved start (:func:`wait_for_rate`)."""


@dataclass(slots=True)
class ClaimLead:
    """How far ahead of now one worker's claims reserve their runs' starts: :data:`LEAD_MARGIN`
    times the longest a recent claim took from its first reservation to its write's answer,
    shrinking by :data:`LEAD_DECAY` with each faster claim, from :data:`CLAIM_LEAD` to
    :data:`MAX_CLAIM_LEAD`. So a worker on a slow store claims earlier instead of coming
    back after its runs' starts (docs/rate-limits.md, "How exact")."""

    lead_us: int = CLAIM_LEAD // ONE_US

    @property
    def lead(self) -> timedelta:
        return timedelta(microseconds=self.lead_us)

    def took(self, claim: timedelta) -> None:
        """A claim took ``claim`` from its first reservation to its write's answer."""
        wanted = max(int(claim / ONE_US * LEAD_MARGIN), int(self.lead_us * LEAD_DECAY))
        self.lead_us = min(MAX_CLAIM_LEAD // ONE_US, max(CLAIM_LEAD // ONE_US, wanted))


def queue_rate_scope(queue: str) -> str:
    return f"{RATE_SCOPE}#queue#{queue}"


def task_rate_scope(task: str, per_us: int) -> str:
    return f"{RATE_SCOPE}#task#{task}#{per_us}"


def key_rate_scope(task: str, per_us: int, key: str) -> str:
    return f"{RATE_SCOPE}#key#{task}#{per_us}#{key}"


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``rate`` runs start per ``per`` (a duration or seconds), plus ``burst``
    more at once after a quiet spell; with ``per_key``, per key of the run (its
    ``concurrency_key``: each tenant or account has its own limit)."""

    rate: int
    per: Duration = 1
    burst: int = 0
    per_key: bool = False

    def __post_init__(self) -> None:
        _whole(self.rate, "rate", 1, MAX_RATE)
        _whole(self.burst, "burst", 0, MAX_BURST)
        per = to_timedelta(self.per, "per")
        if not SHORTEST_PER <= per <= LONGEST_PER:
            raise ConfigurationError(
                f"a rate limit's per is from {SHORTEST_PER} to {LONGEST_PER}, not {per}"
            )
        if per // self.rate < ONE_US:
            raise ConfigurationError(
                f"a rate limit of {self.rate} per {per} spaces runs less than a microsecond "
                "apart; give a longer per"
            )
        if not isinstance(self.per_key, bool):
            raise ConfigurationError(
                f"a rate limit's per_key is True or False, not {self.per_key!r}"
            )
        object.__setattr__(self, "per", per)

    @property
    def per_us(self) -> int:
        assert isinstance(self.per, timedelta)
        return self.per // ONE_US

    def rate_in(self, scope: str) -> Rate:
        """This limit as a claim in ``scope`` applies it."""
        assert isinstance(self.per, timedelta)
        per_us = self.per // ONE_US
        grace = min(MAX_GRACE // ONE_US, per_us // GRACE_SHARE)
        interval = -(-(per_us + grace) // self.rate)  # rounded up: never over the limit
        return Rate(scope, interval, interval * self.burst, grace)


def _whole(value: object, what: str, lowest: int, highest: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"a rate limit's {what} is a whole number, not {value!r}")
    if not lowest <= value <= highest:
        raise ConfigurationError(
            f"a rate limit's {what} is from {lowest} to {highest}, not {value}"
        )
    return value


def check_cost(cost: object) -> int:
    """What one run costs in every rate limit it is under: 1 by default."""
    return _whole(cost, "cost", 1, MAX_COST)


@dataclass(frozen=True, slots=True)
class Rate:
    """One rate limit of a run, as its claim applies it."""

    scope: str
    interval_us: int
    """The spacing between two runs of cost 1."""
    tolerance_us: int
    """How far ahead of its place a run may start (``burst * interval``)."""
    grace_us: int = 0
    """How long after its place a run may still start."""


def next_start(rate: Rate, tat_us: int | None, *, cost: int, not_before_us: int) -> tuple[int, int]:
    """One reservation in ``rate``'s scope for a run of ``cost`` that may start at
    ``not_before_us`` at the earliest: ``(the scope's TAT after it, its start)``. An idle
    scope (no record, or its TAT before that time) starts the run then; a busy one moves
    its TAT on by the run's cost and starts it after the runs before it. Stores do this
    in one atomic update, so claims never conflict."""
    increment = cost * rate.interval_us
    if tat_us is None or tat_us < not_before_us:
        return not_before_us + increment, not_before_us
    return tat_us + increment, start_after(
        rate, tat_us + increment, now_us=not_before_us, cost=cost
    )


def start_after(rate: Rate, tat_after_us: int, *, now_us: int, cost: int) -> int:
    """The start reserved by the update that moved ``rate``'s TAT to ``tat_after_us`` (a
    busy scope: the TAT was at least ``now_us`` before)."""
    return max(now_us, tat_after_us - cost * rate.interval_us - rate.tolerance_us)


def start_at(rate: Rate, tat_us: int | None, *, cost: int, at_us: int) -> tuple[int, int | None]:
    """A reservation in ``rate``'s scope starting exactly at ``at_us``, if the scope allows
    a start then (its TAT, less its tolerance, not after it): ``(the TAT after it,
    None)``; else ``(the TAT unchanged, the earliest start it allows)``."""
    increment = cost * rate.interval_us
    if tat_us is None or tat_us < at_us:
        return at_us + increment, None
    if tat_us - rate.tolerance_us <= at_us:
        return tat_us + increment, None
    return tat_us, tat_us - rate.tolerance_us


def by_scarcity(rates: Sequence[Rate]) -> tuple[Rate, ...]:
    """A run's limits in the order its claim reserves: the narrowest spacing first
    (usually the limit every run shares). Its reservation is the one left and made again
    when another limit cannot start the run then, and it is the cheapest to lose."""
    return tuple(sorted(rates, key=lambda r: r.interval_us))


@dataclass(frozen=True, slots=True)
class Reserve:
    """Reserve the next start in ``rate``'s scope for a run of ``cost``, at
    ``not_before_us`` (µs since the epoch) or later, without reading first
    (:func:`next_start`, done by a store). Result: its start."""

    rate: Rate
    cost: int
    not_before_us: int


@dataclass(frozen=True, slots=True)
class ReserveAt:
    """Reserve a start in ``rate``'s scope exactly at ``at_us``, if the scope allows it
    (:func:`start_at`, done by a store). Result: ``None`` when reserved, else the
    earliest start the scope allows (nothing changed)."""

    rate: Rate
    cost: int
    at_us: int


MAX_ROUNDS = 10
"""Rounds of reserving a run's start until every limit allows it: one unless another run
reserved in the same scope in between (docs/rate-limits.md, "What happens at the
limit")."""


def reserve_starts(
    rates: Sequence[Rate], *, cost: int, now_us: int
) -> Generator[Reserve | ReserveAt, int | None, int]:
    """Reserve a run's start under ``rates`` (yielding each request, sent its result) and
    return its start. The narrowest limit is reserved first (:class:`Reserve`); every
    other limit is asked for a reservation at that very start (:class:`ReserveAt`). One
    that cannot start the run then says when it could: the first reservation is left
    (lost to its scope, never given twice) and made again from that time. Raises
    :class:`StorageUnavailable` if the limits never agree."""
    first, *others = by_scarcity(rates)
    start: int | None = now_us
    for _ in range(MAX_ROUNDS):
        assert start is not None
        start = yield Reserve(first, cost, start)
        assert start is not None
        for rate in others:
            later = yield ReserveAt(rate, cost, start)
            if later is not None:
                start = later
                break
        else:
            return start
    raise StorageUnavailable(
        f"the reservations of {', '.join(r.scope for r in rates)} kept moving apart"
    )


def far_ahead(start_us: int, now_us: int, lead: timedelta) -> bool:
    """Whether a run's reserved start ``start_us`` is too far after ``now_us`` to claim
    the run now (more than ``lead`` and :data:`SHORT_WAIT`): it sleeps until then."""
    return start_us - now_us > (lead + SHORT_WAIT) // ONE_US


def past_grace(rates: Sequence[Rate], start_us: int, now_us: int) -> bool:
    """Whether ``now_us`` is later than ``rates``' shortest grace after the reserved start
    ``start_us``: a handler may not be entered then (a run is entered from its start to
    that grace after it, never before)."""
    return now_us > start_us + min(r.grace_us for r in rates)


@dataclass(frozen=True, slots=True)
class RateRecord:
    """A scope's record as stored: its TAT and the limit of the claim that last moved it."""

    scope: str
    tat_us: int
    interval_us: int
    tolerance_us: int


@dataclass(frozen=True, slots=True)
class RateView:
    """What an operator sees of one scope at ``now``: derived from its record alone."""

    next_start_us: int
    """The earliest start a claim made now would get."""
    available: int
    """Runs of cost 1 that could start at once, one after another."""
    reserved_ahead: int
    """Units whose spacing reaches beyond now: the runs waiting for their start and the
    last one to start while its spacing lasts, for a cost of 1."""


def view_of(record: RateRecord, now_us: int) -> RateView:
    """A scope's state at ``now_us`` (see :class:`RateView`)."""
    interval, tolerance = record.interval_us, record.tolerance_us
    tat = max(record.tat_us, now_us)
    available = (now_us + tolerance - tat) // interval + 1
    return RateView(
        next_start_us=max(now_us, record.tat_us - tolerance),
        available=max(0, available),
        reserved_ahead=-(-(tat - now_us) // interval),
    )


def to_epoch_us(at: datetime) -> int:
    return (at - EPOCH) // ONE_US


def from_epoch_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def start_time(start_us: int) -> datetime:
    """A reserved start as a run keeps it: whole milliseconds, rounded up (never early)."""
    at = from_epoch_us(start_us)
    floor = truncate_ms(at)
    return floor if floor == at else floor + ONE_MS


def wait_for_rate(
    run: Run,
    start_us: int,
    scopes: Sequence[str],
    *,
    now: datetime,
    lead: timedelta,
    republish: RepublishPolicy,
) -> Transition:
    """``run`` sleeps until ``start_us``, reserved under its rate limits (in ``scopes``),
    without a lease, an attempt or a retry counted: a claim found it early for its start.
    It is due ``lead`` (its worker's claim lead) before that start, when its claim is made
    again without reserving again. The caller publishes its wakeup (``wake_at`` covers a
    lost publish; a start more than 15 minutes ahead is published by maintenance when due).

    A claimed ``run`` (leased) is one whose claim's write came back later than the grace
    after its start, so its handler was not entered: the claim is given back unrun in
    the same write (:func:`~runlane_sqs.core.machine.withdraw_claim`, reason
    :data:`GIVEN_BACK_FOR_RATE`; its attempt is counted, as for every claim given back)."""
    if run.lease is not None:
        given_back = withdraw_claim(run, token=run.lease.token, now=now, reason=GIVEN_BACK_FOR_RATE)
        waiting = wait_for_rate(
            given_back.after, start_us, scopes, now=now, lead=lead, republish=republish
        )
        return followed_by(given_back, waiting)
    start, now = start_time(start_us), truncate_ms(now)
    data = {"start": start.isoformat(), "scopes": list(scopes)}
    due = truncate_ms(start - lead)
    return transition(
        run,
        now,
        [(EventType.WAITING_FOR_RATE, data)],
        None,
        due_at=due,
        wake_at=eager_wake_at(due, now, republish),
        publishes=0,
        rate_start=start,
    )
