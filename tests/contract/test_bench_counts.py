"""The benchmark's request counts per scenario, against in-process moto.

The DynamoDB requests of each scenario are deterministic, so they are asserted exactly;
so are the SQS sends. Receives and deletes depend on timing (how many wakeups one
receive finds) and are not asserted. ``bench/cost.py`` drives the scenarios with the
sync worker's ``drain()``, as ``make bench`` does.
"""

from __future__ import annotations

import uuid

import boto3
import pytest

from bench.cost import SCENARIOS, CostResult, measure_scenario
from bench.limits import measure_case
from bench.targets import evaluate
from runlane_sqs import Runlane
from tests.contract.bench_support import REGION

RUNS = 3

# Per run: (DynamoDB requests by operation, SQS sends by operation).
EXPECTED: dict[str, tuple[dict[str, int], dict[str, float]]] = {
    # trigger PutItem; claim (on the wakeup's hint, no read) and outcome UpdateItem
    "plain": ({"PutItem": 1, "UpdateItem": 2}, {"SendMessageBatch": 1 / RUNS}),
    "plain_single": ({"PutItem": 1, "UpdateItem": 2}, {"SendMessage": 1}),
    # two tags: the same requests as plain (their index entries ride on the PutItem)
    "tagged": ({"PutItem": 1, "UpdateItem": 2}, {"SendMessageBatch": 1 / RUNS}),
    # two attempts: a second wakeup (with its hint), claim and outcome
    "retry": ({"PutItem": 1, "UpdateItem": 4}, {"SendMessage": 2}),
    "release": ({"PutItem": 1, "UpdateItem": 4}, {"SendMessage": 2}),
    # tokens.create and trigger; attempt 1 reads the token, releases and reads it again;
    # complete decides the token without reading it, finds the waiter on the waits
    # index, reads and resumes it
    "token_wait": (
        {"PutItem": 2, "GetItem": 3, "UpdateItem": 7, "Query": 1},
        {"SendMessage": 2},
    ),
}


def make_app(session: boto3.Session) -> Runlane:
    tag = uuid.uuid4().hex[:8]
    return Runlane(
        table=f"bench-{tag}",
        environment="bench",
        queue_prefix=f"bench-{tag}-",
        session=session,
        region=REGION,
    )


def measure(name: str) -> CostResult:
    scenario = next(s for s in SCENARIOS if s.name == name)
    return measure_scenario(scenario, make_app, RUNS, backend="moto", drain_wait_seconds=0)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_requests_per_scenario(aws: None, name: str) -> None:
    result = measure(name)
    dynamodb, sends = EXPECTED[name]
    counts = result.counts

    assert dict(counts.service("dynamodb")) == {op: n * RUNS for op, n in dynamodb.items()}
    sqs = counts.service("sqs")
    assert {op: sqs[op] for op in sends} == {op: round(n * RUNS) for op, n in sends.items()}
    assert set(sqs) <= {*sends, "ReceiveMessage", "DeleteMessageBatch"}
    assert "GetQueueUrl" not in sqs  # looked up once, before counting


def test_plain_run_meets_the_request_budget(aws: None) -> None:
    per_run = measure("plain").to_json()["per_run"]

    assert per_run["dynamodb_writes"] == 3
    assert per_run["dynamodb_reads"] == 0


# Per run on queue ``billing`` (bench/limits.py), one worker thread so no claim finds the
# limit reached: without a limit as "plain"; with one, the claim reads the run and takes
# the slot in one transaction, the outcome frees it in another, and the attempt's end
# looks for a waiter to wake on the waits index.
LIMITED: dict[int | None, dict[str, int]] = {
    None: {"PutItem": 1, "UpdateItem": 2},
    1: {"PutItem": 1, "GetItem": 1, "TransactWriteItems": 2, "Query": 1},
}


@pytest.mark.parametrize("limit", list(LIMITED))
def test_requests_per_run_with_and_without_a_concurrency_limit(
    aws: None, limit: int | None
) -> None:
    result = measure_case(
        limit, make_app, RUNS, lambda done: None, concurrency=1, handler_seconds=0
    )

    assert result.status == "ok"
    assert (result.waits, result.runs_waited, result.most_at_once) == (0, 0, 1)
    assert dict(result.counts.service("dynamodb")) == {
        op: n * RUNS for op, n in LIMITED[limit].items()
    }
    sqs = result.counts.service("sqs")
    assert (sqs["SendMessageBatch"], sqs["SendMessage"]) == (1, 0)  # one batch of RUNS runs


def test_what_tags_add_is_tagged_less_plain_where_index_units_are_reported() -> None:
    cost = [
        {"scenario": "plain", "per_run": {"write_units": 8.0}},
        {"scenario": "tagged", "per_run": {"write_units": 10.0}},
    ]
    [local] = [t for t in evaluate({"backend": "aws-local", "cost": cost}) if "tags" in t.name]
    [moto] = [t for t in evaluate({"backend": "moto", "cost": cost}) if "tags" in t.name]
    assert (local.measured, local.met) == (2.0, True)
    assert (moto.measured, moto.met) == (None, None)  # moto reports no index units
