"""The fan-out benchmark (bench/fanout.py) on the test backend, at a smoke size: a map
whose window holds every child, so the requests that do not depend on timing are
asserted exactly; its parent resumes once, the join's timings and the items' sizes are
read, and its targets are evaluated. ``make bench-smoke`` runs the same code at 50
children.
"""

from __future__ import annotations

import pytest

from bench.backends import Backend
from bench.fanout import MAX_IN_FLIGHT, item_bytes, measure_fanout
from bench.targets import fanout_targets

CHILDREN = 12
BASELINE_RUNS = 3


@pytest.fixture
def bench_backend(backend_env: dict[str, str]) -> Backend:
    return Backend("test", backend_env, "the test backend", authoritative_capacity=False)


def test_a_map_costs_one_count_and_one_group_read_per_child_and_resumes_once(
    bench_backend: Backend,
) -> None:
    assert CHILDREN <= MAX_IN_FLIGHT  # every child starts when the group opens

    result = measure_fanout(
        bench_backend, CHILDREN, BASELINE_RUNS, 1, lambda done: None, drain_wait_seconds=0
    ).to_json()

    requests = result["requests"]
    # the children and the parent are triggered once each; each child is claimed and
    # ended as a plain run is, then counted by one more UpdateItem (none refused: the
    # window holds every child); the group is opened by its item chunk's PutItem and
    # the record's transaction with the parent's lease check
    assert requests["dynamodb.PutItem"] == CHILDREN + 1 + 1
    assert requests["dynamodb.TransactWriteItems"] == 1
    assert result["refused"] == {}
    rest = requests["dynamodb.UpdateItem"] - 3 * CHILDREN
    assert rest == 6  # the parent claimed, released, resumed, claimed, succeeded; the join
    # each finisher reads its group; the opening reads the item chunk, the join the parent
    assert requests["dynamodb.GetItem"] >= CHILDREN + 2
    assert result["plain_requests_per_run"]["dynamodb.UpdateItem"] == 2
    assert result["extra_requests_per_child"]["dynamodb.PutItem"] == pytest.approx(1 / CHILDREN)
    # one more child costs one more write than a plain run (its count); the parent's own
    # extra is fixed: its release, resume and second attempt, the opening, the join
    assert result["marginal_extra_per_child"]["dynamodb_writes"] == pytest.approx(1.0)
    assert result["parent_extra_per_map"]["dynamodb_writes"] == pytest.approx(6.0)
    assert result["parent_resumes"] == 1
    assert len(result["join_samples_ms"]) == 1
    assert result["resume_start_ms"] >= result["join_ms"] >= 0  # stored order, not speed
    assert result["parent_item_bytes"] > result["child_item_bytes"] > 0
    assert result["rss_peak"] > 0
    resumes = fanout_targets(result)[2]
    assert (resumes.measured, resumes.met) == (1, True)


def test_item_sizes_follow_dynamodb_rules() -> None:
    item = {
        "pk": {"S": "RUN#é"},  # 2 + 6 bytes
        "n": {"N": "12345"},  # 1 + 3 + 1
        "ok": {"BOOL": True},  # 2 + 1
        "m": {"M": {"a": {"S": "xy"}}},  # 1 + 3 + (1 + 1 + 2)
        "l": {"L": [{"N": "0"}, {"NULL": True}]},  # 1 + 3 + (1 + 2) + (1 + 1)
    }

    assert item_bytes(item) == 8 + 5 + 3 + 8 + 9
