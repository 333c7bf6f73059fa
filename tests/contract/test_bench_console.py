"""The console benchmark (bench/console.py) against in-process moto: the runs it seeds
are the mix it reports, every page it loads answers, and what one load costs does not
grow with the table, as ``make bench ARGS="--only console"`` checks at 100 and 100,000
runs."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from bench.backends import Backend
from bench.console import (
    MOTO_LOAD_LIMIT_SECONDS,
    PAGES,
    ConsoleResult,
    Seeder,
    measure_console,
    moto_load_skip,
    seed_mix,
)
from bench.maintenance_scale import MOTO_SEED_LIMIT_SECONDS, moto_skip
from bench.targets import console_targets
from runlane_sqs.adapters.dynamodb.runs import run_from_wire
from runlane_sqs.core.model import RunStatus

IN_PROCESS = Backend("moto", {}, "in-process moto", authoritative_capacity=False)
NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)


def test_the_seeded_runs_are_the_mix_reported() -> None:
    mix = seed_mix(100)
    seeder = Seeder(NOW, mix)

    runs = [run_from_wire(item) for item in seeder.items()]

    assert mix == {"failed": 5, "cancelled": 2, "queued": 1, "running": 1, "succeeded": 91}
    assert Counter(run.status.value for run in runs) == mix
    shown = next(run for run in runs if run.id == seeder.shown_run)
    assert (shown.status, shown.attempt) == (RunStatus.FAILED, 2)
    created = [NOW - run.created_at for run in runs]
    assert all(timedelta(0) < ago <= timedelta(days=7) for ago in created)
    recent = sum(ago <= timedelta(hours=2) for ago in created)
    assert 50 < recent < 100  # three in four in the last two hours, the rest older
    assert sum(ago <= timedelta(hours=1) for ago in created) < recent


def test_a_mix_keeps_one_run_of_each_status_at_small_sizes() -> None:
    assert seed_mix(10) == {
        "failed": 1,
        "cancelled": 1,
        "queued": 1,
        "running": 1,
        "succeeded": 6,
    }
    with pytest.raises(ValueError, match="too few"):
        seed_mix(3)


def test_page_loads_cost_the_same_requests_at_both_sizes(aws: None) -> None:
    small, large = measure_console(IN_PROCESS, [20, 120], 2, lambda size: lambda done: None)

    assert (small.status, large.status) == ("ok", "ok")
    pages = {row.table_runs: {p.page: p for p in row.pages} for row in (small, large)}
    assert list(pages[20]) == [page.name for page in PAGES]
    for name in pages[20]:
        few, many = pages[20][name], pages[120][name]
        assert (few.status_code, many.status_code) == (200, 200), name
        assert few.counts.requests == many.counts.requests, name
        assert "dynamodb.Scan" not in few.counts.requests, name
        assert len(few.ms) == 2 and not few.varied, name
    runs = pages[120]["/runs"].to_json()
    assert runs["requests"]["dynamodb.BatchGetItem"] == 1  # the page's 25 runs, in one read
    assert runs["items_read"] > pages[20]["/runs"].to_json()["items_read"]
    run = pages[120]["/runs/{id}"].to_json()
    assert run["items_read"] >= 1 and run["sqs_requests"] == 0
    targets = console_targets([small.to_json(), large.to_json()])
    assert [t.met for t in targets] == [True, True, True]


def test_a_target_is_not_measured_when_the_large_size_was_skipped() -> None:
    rate = 100.0
    skipped = moto_skip(IN_PROCESS, 100_000, rate)
    assert skipped is not None and skipped.startswith("skipped on moto")
    assert moto_skip(IN_PROCESS, int(rate * MOTO_SEED_LIMIT_SECONDS), rate) is None
    rows = [ConsoleResult(100).to_json(), ConsoleResult(100_000, status=skipped).to_json()]

    targets = console_targets(rows)

    assert [t.met for t in targets] == [None, None, None]
    assert targets[0].note == f"100,000: {skipped}"


def test_moto_skips_a_size_whose_page_loads_are_projected_too_long() -> None:
    per_run = MOTO_LOAD_LIMIT_SECONDS / 10_000  # as if 10,000 runs took the whole limit
    aws_local = Backend("aws-local", {}, "DynamoDB Local", authoritative_capacity=True)

    skipped = moto_load_skip(IN_PROCESS, 100_000, per_run)

    assert skipped is not None and skipped.startswith("skipped on moto")
    assert moto_load_skip(IN_PROCESS, 10_000, per_run) is None
    assert moto_load_skip(aws_local, 100_000, per_run) is None
    assert moto_load_skip(IN_PROCESS, 100_000, None) is None  # the first size
