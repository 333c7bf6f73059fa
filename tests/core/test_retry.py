"""Retry policy arithmetic: a pure function from (policy, attempt, failure) to a decision."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.retry import NO_RETRY, Backoff, RetryPolicy, qualified_name

NOW = datetime(2030, 1, 1, tzinfo=UTC)
FAST = settings(database=None, deadline=None, max_examples=200)


class TransientError(Exception):
    pass


class PermanentError(Exception):
    pass


class VeryPermanentError(PermanentError):
    pass


# max_attempts ------------------------------------------------------------------------


def test_max_attempts_counts_the_first_attempt() -> None:
    policy = RetryPolicy(max_attempts=3, backoff="fixed", delay=10)
    assert policy.decide(1, NOW).retry_at == NOW + timedelta(seconds=10)
    assert policy.decide(2, NOW).retry_at == NOW + timedelta(seconds=10)
    third = policy.decide(3, NOW)
    assert third.retry_at is None
    assert not third.will_retry
    assert policy.decide(4, NOW).retry_at is None


def test_one_attempt_means_no_retry() -> None:
    assert not RetryPolicy(max_attempts=1).decide(1, NOW).will_retry
    assert not NO_RETRY.decide(1, NOW).will_retry
    assert NO_RETRY.max_attempts == 1


# backoff -----------------------------------------------------------------------------


def test_fixed_backoff_waits_the_same_delay_every_time() -> None:
    policy = RetryPolicy(max_attempts=10, backoff=Backoff.FIXED, delay=7)
    assert [policy.delay_after(n) for n in range(1, 8)] == [timedelta(seconds=7)] * 7


def test_exponential_backoff_doubles_from_the_first_delay() -> None:
    policy = RetryPolicy(max_attempts=10, backoff="exponential", delay=2, max_delay=3600)
    assert [policy.delay_after(n).total_seconds() for n in range(1, 7)] == [
        2,
        4,
        8,
        16,
        32,
        64,
    ]
    assert policy.decide(3, NOW, rand=0).retry_at == NOW + timedelta(seconds=8)


def test_exponential_backoff_is_the_default() -> None:
    assert RetryPolicy().backoff is Backoff.EXPONENTIAL


def test_exponential_backoff_is_capped_at_max_delay() -> None:
    policy = RetryPolicy(max_attempts=10, delay=10, max_delay=60)
    assert [policy.delay_after(n).total_seconds() for n in range(1, 7)] == [
        10,
        20,
        40,
        60,
        60,
        60,
    ]


def test_zero_delay_retries_at_once() -> None:
    policy = RetryPolicy(max_attempts=2, delay=0, backoff="fixed")
    assert policy.decide(1, NOW).retry_at == NOW


@pytest.mark.parametrize("attempt", [64, 65, 1_000, 10**6, 10**18])
def test_very_large_attempt_numbers_give_the_cap(attempt: int) -> None:
    policy = RetryPolicy(max_attempts=10**19, delay=1, max_delay=timedelta(days=2))
    assert policy.delay_after(attempt) == timedelta(days=2)
    assert policy.decide(attempt, NOW, rand=0).retry_at == NOW + timedelta(days=2)


def test_exponential_delay_is_never_shorter_than_the_first_delay_for_long_waits() -> None:
    # PRODUCT: delays of any length; docstring: retry n waits delay * 2**(n-1), capped.
    policy = RetryPolicy(
        max_attempts=5, delay=timedelta(days=365 * 20), max_delay=timedelta(days=365 * 100)
    )
    assert policy.delay_after(1) == timedelta(days=365 * 20)
    assert policy.delay_after(2) == timedelta(days=365 * 40)
    assert policy.delay_after(10) == timedelta(days=365 * 100)


@FAST
@given(
    delay=st.floats(min_value=0, max_value=86_400, allow_nan=False),
    extra=st.floats(min_value=0, max_value=86_400, allow_nan=False),
    attempt=st.integers(min_value=1, max_value=10**6),
    backoff=st.sampled_from(list(Backoff)),
)
def test_delay_is_between_delay_and_max_delay(
    delay: float, extra: float, attempt: int, backoff: Backoff
) -> None:
    policy = RetryPolicy(max_attempts=2, backoff=backoff, delay=delay, max_delay=delay + extra)
    wait = policy.delay_after(attempt)
    assert policy.delay - timedelta(microseconds=1) <= wait <= policy.max_delay


# jitter ------------------------------------------------------------------------------


def test_jitter_with_rand_zero_is_the_full_delay() -> None:
    policy = RetryPolicy(max_attempts=3, backoff="fixed", delay=100, jitter=0.5)
    assert policy.delay_after(1, rand=0.0) == timedelta(seconds=100)


def test_jitter_half_with_rand_near_one_is_about_half() -> None:
    policy = RetryPolicy(max_attempts=3, backoff="fixed", delay=100, jitter=0.5)
    assert policy.delay_after(1, rand=0.5) == timedelta(seconds=75)
    wait = policy.delay_after(1, rand=0.999_999)
    assert timedelta(seconds=50) <= wait < timedelta(seconds=50.001)


def test_jitter_applies_after_the_cap() -> None:
    policy = RetryPolicy(max_attempts=9, delay=10, max_delay=60, jitter=0.5)
    assert policy.delay_after(8, rand=0.5) == timedelta(seconds=45)


@FAST
@given(
    jitter=st.floats(min_value=0, max_value=1),
    rand=st.floats(min_value=0, max_value=1, exclude_max=True),
    attempt=st.integers(min_value=1, max_value=100),
)
def test_jitter_stays_within_its_fraction(jitter: float, rand: float, attempt: int) -> None:
    policy = RetryPolicy(max_attempts=2, delay=3, max_delay=600, jitter=jitter)
    full = policy.delay_after(attempt, rand=0.0)
    wait = policy.delay_after(attempt, rand=rand)
    tolerance = timedelta(microseconds=1)
    assert full * (1 - jitter) - tolerance <= wait <= full
    assert wait >= timedelta(0)


def test_decide_draws_jitter_itself_when_not_given() -> None:
    policy = RetryPolicy(max_attempts=2, backoff="fixed", delay=100, jitter=0.5)
    for _ in range(50):
        retry_at = policy.decide(1, NOW).retry_at
        assert retry_at is not None
        assert NOW + timedelta(seconds=50) <= retry_at <= NOW + timedelta(seconds=100)


# non-retryable -----------------------------------------------------------------------


def test_non_retryable_types_match_by_isinstance() -> None:
    policy = RetryPolicy(max_attempts=5, non_retryable=(PermanentError, KeyError))
    assert not policy.is_retryable(PermanentError("no"))
    assert not policy.is_retryable(VeryPermanentError("subclass"))
    assert not policy.is_retryable(KeyError("k"))
    assert policy.is_retryable(TransientError("try again"))
    assert policy.is_retryable(LookupError("the base class is not listed"))


def test_a_non_retryable_failure_stops_even_with_attempts_left() -> None:
    policy = RetryPolicy(max_attempts=5, non_retryable=(PermanentError,))
    assert (
        policy.decide(1, NOW, retryable=policy.is_retryable(VeryPermanentError())).retry_at is None
    )
    assert policy.decide(1, NOW, retryable=policy.is_retryable(TransientError())).will_retry


def test_failures_are_recorded_under_their_qualified_name() -> None:
    assert qualified_name(VeryPermanentError()) == f"{__name__}.VeryPermanentError"
    assert qualified_name(ValueError()) == "builtins.ValueError"


# configuration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"max_attempts": -3},
        {"jitter": -0.01},
        {"jitter": 1.01},
        {"jitter": float("nan")},
        {"delay": 10, "max_delay": 5},
        {"backoff": "linear"},
        {"backoff": ""},
        {"delay": -1},
        {"delay": timedelta(seconds=-1)},
        {"delay": float("inf")},
        {"delay": "5"},
        {"max_delay": -5},
    ],
    ids=repr,
)
def test_invalid_configuration_is_refused(options: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(**options)  # type: ignore[arg-type]


def test_durations_are_seconds_or_timedeltas() -> None:
    in_seconds = RetryPolicy(max_attempts=3, delay=1.5, max_delay=120)
    as_timedelta = RetryPolicy(
        max_attempts=3, delay=timedelta(milliseconds=1500), max_delay=timedelta(minutes=2)
    )
    assert in_seconds == as_timedelta
    assert in_seconds.delay == timedelta(seconds=1.5)
    assert in_seconds.max_delay == timedelta(minutes=2)
    assert in_seconds.delay_after(2) == timedelta(seconds=3)


def test_backoff_accepts_the_enum_or_its_value() -> None:
    assert RetryPolicy(backoff="fixed").backoff is Backoff.FIXED
    assert RetryPolicy(backoff=Backoff.FIXED).backoff is Backoff.FIXED


def test_policy_is_immutable() -> None:
    policy = RetryPolicy(max_attempts=3)
    with pytest.raises(AttributeError):
        policy.max_attempts = 5  # type: ignore[misc]
