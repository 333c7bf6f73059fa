"""The chaos suite's group judge (chaos/fanout.py) holds each fan-out to the outcome of
its mode: a failed group must close (no child left running) before it joins, a group
that tolerates its broken children succeeds with exactly those failed, a retried group
joins again with every item's child succeeded; the ledger counts the failures and
cancellations a mode designs as such, not as lost runs."""

from __future__ import annotations

from datetime import UTC, datetime

from chaos.app import MAP
from chaos.fanout import FAILS, RETRIED, TOLERATES, FanOut, Found, judge, judged
from runlane_sqs.core import machine
from runlane_sqs.core.groups import Group, child_run_id, redrive_run_id
from runlane_sqs.core.model import Failure, Run, RunStatus

NOW = datetime(2030, 1, 1, tzinfo=UTC)
GROUP = "g" * 32
PARENT = "p" * 32


def run(run_id: str, status: RunStatus, index: int | None = None, **changes: object) -> Run:
    new, _ = machine.new_run(
        run_id=run_id, environment="t", task="x", queue="q", payload=None, now=NOW
    )
    return new.with_changes(status=status, group_id=GROUP, group_index=index, **changes)


def child(index: int, status: RunStatus) -> Run:
    return run(child_run_id(GROUP, index), status, index)


def group(**changes: object) -> Group:
    record = Group(id=GROUP, environment="t", total=3, window=2, tolerate=0, created_at=NOW)
    return record.with_changes(joined_at=NOW, parent_run_id=PARENT, **changes)


GROUP_FAILED = Failure(type="runlane_sqs.core.groups.GroupFailed", message="failed")


def fan_out(mode: str, broken: frozenset[int] = frozenset({0})) -> FanOut:
    return FanOut(0, MAP, GROUP, PARENT, (1, 2, 3), mode=mode, broken=broken, first_run=PARENT)


def test_a_failed_group_that_closed_before_it_joined_is_as_designed() -> None:
    children = [child(0, RunStatus.FAILED), child(1, RunStatus.CANCELLED), None]
    found = Found(
        group(started=2, failed=1, cancelled=1),
        run(PARENT, RunStatus.FAILED, failure=GROUP_FAILED),
        children,
        None,
        first=run(PARENT, RunStatus.FAILED, failure=GROUP_FAILED),
    )
    figures = judge([(fan_out(FAILS), found)], {})
    assert figures.violating_runs == []
    ledger = judged([(fan_out(FAILS), found)])
    assert child_run_id(GROUP, 2) not in ledger.children  # never started: no run
    assert ledger.designed[child_run_id(GROUP, 1)] == {"cancelled"}
    assert ledger.designed[PARENT] == {"failed"}


def test_a_failed_group_that_joined_with_a_child_still_running_is_miscounted() -> None:
    children = [child(0, RunStatus.FAILED), child(1, RunStatus.CANCEL_REQUESTED), None]
    found = Found(
        group(started=2, failed=1, lanes={1: 1}),
        run(PARENT, RunStatus.FAILED, failure=GROUP_FAILED),
        children,
        None,
        first=run(PARENT, RunStatus.FAILED, failure=GROUP_FAILED),
    )
    figures = judge([(fan_out(FAILS), found)], {})
    assert figures.miscounted == [GROUP] and figures.violating_runs == [PARENT]


def test_a_tolerating_group_with_a_cancelled_child_has_the_wrong_outcome() -> None:
    children = [
        child(0, RunStatus.FAILED),
        child(1, RunStatus.CANCELLED),
        child(2, RunStatus.SUCCEEDED),
    ]
    tolerating = fan_out(TOLERATES)
    found = Found(
        group(started=3, tolerate=2, failed=1, cancelled=1, succeeded=1),
        run(PARENT, RunStatus.SUCCEEDED),
        children,
        None,
        first=run(PARENT, RunStatus.SUCCEEDED),
    )
    assert judge([(tolerating, found)], {}).wrong_outcomes == [GROUP]


def test_a_retried_group_whose_rerun_failed_again_has_the_wrong_outcome() -> None:
    rerun = run(redrive_run_id(GROUP, 0, 1), RunStatus.SUCCEEDED, 0)
    children = [
        child(0, RunStatus.FAILED),
        child(1, RunStatus.SUCCEEDED),
        child(2, RunStatus.CANCELLED),
    ]
    # item 2's child was cancelled after the rerun started: it is not rerun, and counts
    found = Found(
        group(started=4, generation=1, redriven=((0, 1),), succeeded=2, cancelled=1),
        None,
        children,
        None,
        first=run(PARENT, RunStatus.FAILED, failure=GROUP_FAILED),
        reruns={0: rerun},
    )
    figures = judge([(fan_out(RETRIED), found)], {})
    assert figures.wrong_outcomes == [GROUP]
