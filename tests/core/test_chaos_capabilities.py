"""The chaos suite's capability checks (chaos/capabilities.py) find what they are for: a
run of an ordering key that started before the run ahead of it succeeded, and a tenant
with more executions in flight than its limit; they leave out what a fault explains (an
execution of a killed worker) and runs whose predecessor never succeeded; a schedule
occurrence created twice or missed, and more starts in a second than a rate."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from chaos.capabilities import CapabilityFigures, check, rate_figures, schedule_figures
from chaos.fleet import Signalled
from chaos.ledger import Execution, Faults

NO_FAULTS = Faults(signals=[], outages=[], lease_seconds=5.0)


def ordered(run: str, seq: int, started: float, ended: float, outcome: str = "ok") -> Execution:
    return Execution(run, 1, 1, started, ended, outcome, key="k", seq=seq)


def keyed(run: str, started: float, ended: float, pid: int = 1) -> Execution:
    return Execution(run, pid, 1, started, ended, "ok", tenant="t")


def test_runs_of_a_key_one_after_another_in_order_hold() -> None:
    per_run = {
        "a": [ordered("a", 0, 0.0, 1.0)],
        "b": [ordered("b", 1, 1.5, 2.0, "fail"), ordered("b", 1, 2.5, 3.0)],
        "c": [ordered("c", 2, 3.2, 4.0)],
    }
    figures = check(per_run, NO_FAULTS, key_limit=2)
    assert (figures.ordered_runs, figures.ordering_keys, figures.out_of_order) == (3, 1, [])


def test_a_run_that_starts_before_the_one_ahead_succeeded_is_out_of_order() -> None:
    per_run = {
        "a": [ordered("a", 0, 0.0, 1.0, "release"), ordered("a", 0, 2.0, 3.0)],
        "b": [ordered("b", 1, 1.5, 2.5)],  # after a's release, before its success
    }
    assert check(per_run, NO_FAULTS, key_limit=2).out_of_order == ["b"]


def test_a_run_behind_one_that_never_succeeded_is_not_judged_here() -> None:
    per_run = {
        "a": [ordered("a", 0, 0.0, 1.0, "fail")],
        "b": [ordered("b", 1, 0.5, 2.0)],
    }
    assert check(per_run, NO_FAULTS, key_limit=2).out_of_order == []


def test_three_executions_of_a_tenant_at_once_are_over_a_limit_of_two() -> None:
    per_run = {
        "a": [keyed("a", 0.0, 3.0)],
        "b": [keyed("b", 1.0, 4.0)],
        "c": [keyed("c", 2.0, 5.0)],
        "d": [keyed("d", 5.0, 6.0)],  # starts as c ends: not at once
    }
    figures = check(per_run, NO_FAULTS, key_limit=2)
    assert (figures.keyed_runs, figures.most_at_once) == (4, 3)
    assert sorted(figures.over_limit) == ["a", "b", "c"]


def test_an_execution_of_a_killed_worker_does_not_count_against_the_limit() -> None:
    per_run = {
        "a": [keyed("a", 0.0, 9.0, pid=7)],  # its worker was killed at 2 s
        "b": [keyed("b", 1.0, 4.0)],
        "c": [keyed("c", 2.5, 5.0)],
    }
    killed = Faults([Signalled("kill", 7, 2.0)], [], lease_seconds=5.0)
    assert check(per_run, killed, key_limit=2).over_limit == []
    assert check(per_run, NO_FAULTS, key_limit=2).over_limit == ["a", "b", "c"]


def test_a_schedule_occurrence_created_twice_or_missed_is_found() -> None:
    start, step = datetime(2030, 1, 1, tzinfo=UTC), timedelta(seconds=2)
    every = [start + k * step for k in range(5)]
    figures = CapabilityFigures()
    schedule_figures(figures, every, step)
    assert (figures.occurrences, figures.duplicate_occurrences, figures.missed_occurrences) == (
        5,
        [],
        [],
    )
    broken = CapabilityFigures()
    schedule_figures(broken, [every[0], every[1], every[1], every[3], every[4]], step)
    assert broken.duplicate_occurrences == [every[1].isoformat()]
    assert broken.missed_occurrences == [every[2].isoformat()]


def test_more_starts_in_a_second_than_the_rate_is_found() -> None:
    spaced = [k * 0.21 for k in range(20)]  # under 5 a second
    figures = CapabilityFigures()
    rate_figures(figures, spaced, rate=5)
    assert (figures.rated_starts, figures.most_started_in_a_second) == (20, 5)
    assert not figures.rate_exceeded
    bunched = CapabilityFigures()
    rate_figures(bunched, [*spaced, 0.5], rate=5)
    assert bunched.most_started_in_a_second == 6 and bunched.rate_exceeded
