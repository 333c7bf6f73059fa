"""Requests per plain run against DynamoDB and SQS, counted with botocore event hooks.

Provisioning and the one-off ``GetQueueUrl`` lookup are excluded: the counters are
attached after both. ``pytest -s`` prints the measured figures.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from runlane_sqs import Runlane, RunStatus
from tests.emulators import REPO_ROOT, count_requests

# The budget per plain run (trigger -> claim -> success) is the table in
# docs/performance.md (rows dynamodb_writes, dynamodb_reads, sqs_requests; column
# "budget"). These figures apply only when that file is absent.
DEFAULT_BUDGET = {
    "dynamodb writes": 3.0,  # PutItem (trigger) + UpdateItem (claim) + UpdateItem (outcome)
    "dynamodb reads": 0.0,  # none: the claim is conditioned on the wakeup's hint
    "sqs requests": 1.2,  # batched send, receive and delete (asserted for trigger_many)
}
PERFORMANCE_DOC = REPO_ROOT / "docs" / "performance.md"

RUNS = 50
TASK = "budget.plain"
DYNAMODB_WRITES = ("PutItem", "UpdateItem", "TransactWriteItems", "DeleteItem", "BatchWriteItem")
DYNAMODB_READS = ("GetItem", "Query", "TransactGetItems", "BatchGetItem", "Scan")


def _cells(line: str) -> list[str]:
    stripped = line.strip()
    if not stripped.startswith("|"):
        return []
    return [
        " ".join(c.replace("*", "").replace("`", "").split())
        for c in stripped.strip("|").split("|")
    ]


def _number(text: str) -> float | None:
    match = re.search(r"\d+(?:\.\d+)?", text)
    return float(match.group()) if match else None


def documented_budget() -> dict[str, float] | None:
    """The per-run budget rows of docs/performance.md's table (``None`` without the file).

    A row counts when its first cell names the service and the quantity (for example
    "dynamodb_writes"); its value is taken from the column headed "budget" (or "max"),
    else from the first cell holding a number. The first matching row wins.
    """
    if not PERFORMANCE_DOC.exists():
        return None
    figures: dict[str, float] = {}
    column: int | None = None
    for line in PERFORMANCE_DOC.read_text().splitlines():
        cells = _cells(line)
        if not cells:
            column = None
            continue
        headers = [c.lower() for c in cells]
        if column is None and any(h.startswith(("budget", "max")) for h in headers):
            column = next(i for i, h in enumerate(headers) if h.startswith(("budget", "max")))
            continue
        label = cells[0].lower()
        values = [cells[column]] if column is not None and column < len(cells) else cells[1:]
        number = next((n for c in values if (n := _number(c)) is not None), None)
        for name in DEFAULT_BUDGET:
            service, kind = name.split()
            if number is not None and service in label and kind.rstrip("s") in label:
                figures.setdefault(name, number)
    return figures


@pytest.fixture(scope="module")
def budget() -> dict[str, float]:
    documented = documented_budget()
    if documented is None:
        return dict(DEFAULT_BUDGET)
    missing = sorted(set(DEFAULT_BUDGET) - set(documented))
    assert not missing, f"{PERFORMANCE_DOC} has no budget row for {missing}"
    return documented


@dataclass
class Measured:
    dynamodb: Counter[str]
    sqs: Counter[str]

    def writes(self) -> float:
        return sum(self.dynamodb[op] for op in DYNAMODB_WRITES) / RUNS

    def reads(self) -> float:
        return sum(self.dynamodb[op] for op in DYNAMODB_READS) / RUNS

    def sqs_requests(self) -> float:
        return sum(self.sqs.values()) / RUNS

    def report(self, label: str) -> str:
        return (
            f"{label}: per run DynamoDB writes {self.writes():.2f}, reads {self.reads():.2f}, "
            f"SQS requests {self.sqs_requests():.2f} "
            f"(DynamoDB {dict(self.dynamodb)}, SQS {dict(self.sqs)})"
        )


def _measure(
    app: Runlane, trigger: Callable[[Runlane], list[Any]], queue: str = "default"
) -> Measured:
    app.queue("billing", concurrency_limit=RUNS)  # a limit on another queue costs nothing
    app.task(lambda ctx, payload: {"n": payload["n"]}, name=TASK, queue=queue)
    app.provision()
    app.transport.check_queue(queue)  # the queue URL lookup happens once per process
    measured = Measured(count_requests(app.client("dynamodb")), count_requests(app.client("sqs")))

    runs = trigger(app)
    assert app.worker(concurrency=10).drain() == RUNS
    snapshot = Measured(Counter(measured.dynamodb), Counter(measured.sqs))

    assert len(runs) == RUNS
    assert {app.runs.get(run.id).status for run in runs} == {RunStatus.SUCCEEDED}
    assert "GetQueueUrl" not in snapshot.sqs
    return snapshot


def _trigger_many(app: Runlane) -> list[Any]:
    return app.trigger_many(TASK, [{"n": n} for n in range(RUNS)])


def _trigger_each(app: Runlane) -> list[Any]:
    return [app.trigger(TASK, {"n": n}) for n in range(RUNS)]


def test_request_budget_with_trigger_many(
    make_app: Callable[..., Runlane],
    budget: dict[str, float],
    capsys: pytest.CaptureFixture[str],
) -> None:
    measured = _measure(make_app(), _trigger_many)
    with capsys.disabled():
        print(f"\nbudget per run: {budget}\n" + measured.report("trigger_many x50"))

    assert measured.writes() <= budget["dynamodb writes"], measured.report("trigger_many")
    assert measured.reads() <= budget["dynamodb reads"], measured.report("trigger_many")
    assert measured.sqs_requests() <= budget["sqs requests"], measured.report("trigger_many")


def test_request_budget_with_single_triggers(
    make_app: Callable[..., Runlane],
    budget: dict[str, float],
    capsys: pytest.CaptureFixture[str],
) -> None:
    measured = _measure(make_app(), _trigger_each)
    with capsys.disabled():
        print("\n" + measured.report("trigger x50"))

    assert measured.writes() <= budget["dynamodb writes"], measured.report("trigger")
    assert measured.reads() <= budget["dynamodb reads"], measured.report("trigger")


def test_a_limited_run_with_a_free_slot_costs_a_read_and_two_transactions(
    make_app: Callable[..., Runlane], capsys: pytest.CaptureFixture[str]
) -> None:
    """A claim that takes a slot reads the run first and writes the claim and the slot in
    one transaction; the outcome frees it in another, and the worker looks for a run
    waiting for the freed slot (one ``Query`` of the waits index) (docs/design/storage.md,
    "Concurrency limits"). The limit is never reached here, so no run waits."""
    measured = _measure(make_app(), _trigger_many, queue="billing")
    with capsys.disabled():
        print("\n" + measured.report("limited trigger_many x50"))
    per_run = {op: count / RUNS for op, count in measured.dynamodb.items()}
    assert per_run == {"PutItem": 1.0, "GetItem": 1.0, "TransactWriteItems": 2.0, "Query": 1.0}


def test_an_ordered_run_alone_in_its_line_costs_a_read_two_transactions_and_a_query(
    make_app: Callable[..., Runlane], capsys: pytest.CaptureFixture[str]
) -> None:
    """A trigger with an ordering key reads the key's order record and writes the run, the
    record and its place in one transaction; the claim is the plain claim; the end leaves
    the line in the outcome's transaction and looks for the next place (one ``Query``),
    finding none (docs/design/storage.md, "Ordered runs")."""

    def alone(app: Runlane) -> list[Any]:
        return [app.trigger(TASK, {"n": n}, ordering_key=f"acct-{n}") for n in range(RUNS)]

    measured = _measure(make_app(), alone)
    with capsys.disabled():
        print("\n" + measured.report("ordered, one run per key x50"))
    per_run = {op: count / RUNS for op, count in measured.dynamodb.items()}
    assert per_run == {"GetItem": 1.0, "TransactWriteItems": 2.0, "UpdateItem": 1.0, "Query": 1.0}


def test_runs_in_one_line_add_the_wake_of_the_next_run(
    make_app: Callable[..., Runlane], capsys: pytest.CaptureFixture[str]
) -> None:
    """Fifty runs of one key: each end also reads the next run and wakes it (one
    ``GetItem``, one ``UpdateItem``) and publishes its wakeup alone; nothing else."""

    def one_line(app: Runlane) -> list[Any]:
        return [app.trigger(TASK, {"n": n}, ordering_key="acct-1") for n in range(RUNS)]

    measured = _measure(make_app(), one_line)
    with capsys.disabled():
        print("\n" + measured.report("ordered, one key x50"))
    woken = RUNS - 1
    assert dict(measured.dynamodb) == {
        "GetItem": RUNS + woken,
        "TransactWriteItems": 2 * RUNS,
        "UpdateItem": RUNS + woken,
        "Query": RUNS,
    }
    assert measured.sqs["SendMessage"] + measured.sqs["SendMessageBatch"] == RUNS
