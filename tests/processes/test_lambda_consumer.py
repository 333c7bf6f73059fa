"""The Lambda consumer over the in-memory app: SQS event-source batches in, partial batch
responses out, time moved by hand through the fake context's clock."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from tenacity import wait_none

from runlane_sqs import (
    EventType,
    MissingResourceError,
    Run,
    Runlane,
    RunStatus,
    StorageUnavailable,
    TaskContext,
)
from runlane_sqs.adapters.memory.objects import InMemoryObjects
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.core.groups import callback_run_id, child_run_id, next_group_id
from runlane_sqs.core.machine import HintedClaim
from runlane_sqs.core.wakeup import Wakeup, parse_wakeup
from runlane_sqs.lambdas.consumer import NotAnSqsEvent, logical_queue, sqs_handler
from runlane_sqs.ports.transport import ReceivedWakeup
from runlane_sqs.runtime.budget import MAX_TRIES
from runlane_sqs.testing import InMemoryRunStore, ManualClock
from tests.otel import Recorded, recorded  # noqa: F401 (a fixture)

ACCOUNT = "123456789012"
STANDARD_ARN = f"arn:aws:sqs:us-east-1:{ACCOUNT}:runlane-test-default"
FIFO_ARN = f"arn:aws:sqs:us-east-1:{ACCOUNT}:runlane-test-ordered.fifo"
MARGIN_SECONDS = 10.0
INVOCATION_THREADS = ("runlane-heartbeat", "runlane-lambda-deadline")


class FlakyStore:
    """The in-memory store, except that the first request of a message's path (the
    claim on the wakeup's hint, or the read) for the runs in ``down_for`` is throttled,
    and a claim on the hint takes ``slow_claim`` seconds of the test's clock."""

    def __init__(self, inner: InMemoryRunStore) -> None:
        self.inner = inner
        self.down_for: set[str] = set()
        self.refused: Counter[str] = Counter()
        self.table_missing = False
        self.slow_claim: tuple[ManualClock, float] | None = None

    def _refuse(self, run_id: str) -> None:
        if self.table_missing:
            self.refused[run_id] += 1
            raise MissingResourceError("DynamoDB table 'runlane' does not exist")
        if run_id in self.down_for:
            self.refused[run_id] += 1
            raise StorageUnavailable(f"throttled reaching run {run_id}")

    def get_run(self, run_id: str) -> Run | None:
        self._refuse(run_id)
        return self.inner.get_run(run_id)

    def claim_hinted(self, claim: HintedClaim) -> Run:
        self._refuse(claim.run_id)
        claimed = self.inner.claim_hinted(claim)
        if self.slow_claim is not None:
            clock, seconds = self.slow_claim
            clock.advance(seconds)
        return claimed

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class FakeContext:
    """A Lambda context whose deadline is on the test's clock."""

    def __init__(self, clock: ManualClock, budget_seconds: float, request_id: str) -> None:
        self.clock = clock
        self.deadline = clock.now() + timedelta(seconds=budget_seconds)
        self.aws_request_id = request_id
        self.function_name = "runlane-consumer"

    def get_remaining_time_in_millis(self) -> int:
        left = (self.deadline - self.clock.now()).total_seconds()
        return max(0, int(left * 1000))


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor retries a throttled read up to four times with real exponential
    backoff (about 1.4 s); keep the retries, drop the waiting."""
    monkeypatch.setattr("runlane_sqs.runtime.budget.BACKOFF", wait_none())


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store() -> FlakyStore:
    return FlakyStore(InMemoryRunStore("test"))


@pytest.fixture
def transport(clock: ManualClock) -> InMemoryTransport:
    return InMemoryTransport(clock)


@pytest.fixture
def app(clock: ManualClock, store: FlakyStore, transport: InMemoryTransport) -> Runlane:
    return Runlane(environment="test", clock=clock, store=store, transport=transport)  # type: ignore[arg-type]


@pytest.fixture
def calls(app: Runlane, clock: ManualClock) -> list[Any]:
    """Register ``work`` (records its payload; ``{"takes": s}`` moves the clock ``s``)."""
    seen: list[Any] = []

    @app.task(name="work")
    def work(ctx: TaskContext, payload: Any) -> Any:
        seen.append(payload)
        clock.advance(payload.get("takes", 0))
        return {"done": payload["n"]}

    return seen


def sqs_record(
    message: ReceivedWakeup, arn: str = STANDARD_ARN, group: str | None = None
) -> dict[str, Any]:
    """The record an event source mapping delivers for ``message``."""
    attributes = {
        "ApproximateReceiveCount": str(message.receive_count),
        "SentTimestamp": "1893456000000",
        "SenderId": "AIDAEXAMPLE",
        "ApproximateFirstReceiveTimestamp": "1893456000001",
    }
    if group is not None:
        attributes |= {
            "MessageGroupId": group,
            "MessageDeduplicationId": message.message_id,
            "SequenceNumber": "18849496460467696128",
        }
    return {
        "messageId": message.message_id,
        "receiptHandle": message.receipt,
        "body": message.body,
        "attributes": attributes,
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(message.body.encode()).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": arn,
        "awsRegion": "us-east-1",
    }


def trigger_and_receive(
    app: Runlane, transport: InMemoryTransport, payloads: list[dict[str, Any]]
) -> tuple[list[Run], list[ReceivedWakeup]]:
    runs = [app.trigger("work", p) for p in payloads]
    messages = transport.receive("default", 10, 0)
    by_run = {parse_wakeup(m.body).run_id: m for m in messages}
    return runs, [by_run[r.id] for r in runs]


def reported(response: dict[str, Any]) -> list[str]:
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]


def status(app: Runlane, run: Run) -> RunStatus:
    """The stored status, read past any throttling."""
    store = app.store.inner if isinstance(app.store, FlakyStore) else app.store
    stored = store.get_run(run.id)
    assert stored is not None
    return stored.status


def invocation_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name in INVOCATION_THREADS]


def test_standard_batch_reports_exactly_the_record_that_hit_a_transient_error(
    app: Runlane,
    clock: ManualClock,
    store: FlakyStore,
    transport: InMemoryTransport,
    calls: list[Any],
) -> None:
    runs, messages = trigger_and_receive(app, transport, [{"n": 1}, {"n": 2}, {"n": 3}])
    store.down_for.add(runs[1].id)
    handler = sqs_handler(app, safety_margin_seconds=MARGIN_SECONDS)
    event = {"Records": [sqs_record(m) for m in messages]}

    response = handler(event, FakeContext(clock, 60, "req-1"))

    assert reported(response) == [messages[1].message_id]
    assert store.refused[runs[1].id] == MAX_TRIES  # retried, then left for redelivery
    assert [status(app, r) for r in runs] == [
        RunStatus.SUCCEEDED,
        RunStatus.QUEUED,
        RunStatus.SUCCEEDED,
    ]
    assert calls == [{"n": 1}, {"n": 3}]

    store.down_for.clear()  # DynamoDB recovers; SQS redelivers the reported record
    again = handler({"Records": [sqs_record(messages[1])]}, FakeContext(clock, 60, "req-2"))

    assert reported(again) == []
    assert status(app, runs[1]) is RunStatus.SUCCEEDED
    assert calls == [{"n": 1}, {"n": 3}, {"n": 2}]


def test_the_apps_hooks_run_around_each_attempt_of_a_batch(
    app: Runlane, clock: ManualClock, transport: InMemoryTransport, calls: list[Any]
) -> None:
    """docs/hooks.md: the Lambda consumer calls them as the workers do."""
    seen: list[tuple[str, str, int, object]] = []
    app.hooks.before_attempt(lambda ctx: seen.append(("before", ctx.run_id, ctx.attempt, None)))
    app.hooks.after_attempt(
        lambda ctx, outcome: seen.append(("after", ctx.run_id, ctx.attempt, outcome.result))
    )
    runs, messages = trigger_and_receive(app, transport, [{"n": 1}, {"n": 2}])
    handler = sqs_handler(app, safety_margin_seconds=MARGIN_SECONDS)

    response = handler({"Records": [sqs_record(m) for m in messages]}, FakeContext(clock, 60, "r"))

    assert reported(response) == []
    assert seen == [
        ("before", runs[0].id, 1, None),
        ("after", runs[0].id, 1, {"done": 1}),
        ("before", runs[1].id, 1, None),
        ("after", runs[1].id, 1, {"done": 2}),
    ]


def test_stale_unknown_and_malformed_records_are_not_reported(
    app: Runlane, clock: ManualClock, transport: InMemoryTransport, calls: list[Any]
) -> None:
    handler = sqs_handler(app, safety_margin_seconds=MARGIN_SECONDS)
    _, messages = trigger_and_receive(app, transport, [{"n": 1}])
    done = handler({"Records": [sqs_record(messages[0])]}, FakeContext(clock, 60, "req-1"))
    assert reported(done) == []
    forged = [
        ReceivedWakeup("default", "not json", "rh-1", "m-malformed"),
        ReceivedWakeup(
            "default",
            Wakeup("test", "0" * 32, "default", clock.now()).to_json(),
            "rh-3",
            "m-unknown",
        ),
        messages[0],  # a duplicate of a wakeup whose run already succeeded
    ]

    response = handler(
        {"Records": [sqs_record(m) for m in forged]}, FakeContext(clock, 60, "req-2")
    )

    assert reported(response) == []
    assert calls == [{"n": 1}]


def test_a_task_this_function_does_not_register_is_reported(
    app: Runlane, clock: ManualClock, transport: InMemoryTransport
) -> None:
    other = Runlane(environment="test", clock=clock, store=app.store, transport=transport)
    other.task(lambda ctx, payload: None, name="elsewhere")
    run = other.trigger("elsewhere", {})
    [message] = transport.receive("default", 10, 0)

    response = sqs_handler(app)({"Records": [sqs_record(message)]}, FakeContext(clock, 60, "r"))

    assert reported(response) == [message.message_id]
    assert status(app, run) is RunStatus.QUEUED


def test_fifo_failure_reports_the_rest_of_its_group_and_other_groups_continue(
    app: Runlane,
    clock: ManualClock,
    store: FlakyStore,
    transport: InMemoryTransport,
    calls: list[Any],
) -> None:
    runs, messages = trigger_and_receive(
        app, transport, [{"n": "a1"}, {"n": "b1"}, {"n": "a2"}, {"n": "b2"}, {"n": "a3"}]
    )
    a1, b1, a2, b2, a3 = messages
    groups = {a1: "A", a2: "A", a3: "A", b1: "B", b2: "B"}
    store.down_for.add(runs[2].id)  # a2
    event = {"Records": [sqs_record(m, FIFO_ARN, groups[m]) for m in messages]}

    response = sqs_handler(app)(event, FakeContext(clock, 60, "req-1"))

    assert reported(response) == [a2.message_id, a3.message_id]
    assert calls == [{"n": "a1"}, {"n": "b1"}, {"n": "b2"}]
    assert [status(app, r) for r in runs] == [
        RunStatus.SUCCEEDED,
        RunStatus.SUCCEEDED,
        RunStatus.QUEUED,
        RunStatus.SUCCEEDED,
        RunStatus.QUEUED,
    ]
    assert store.refused[runs[4].id] == 0  # a3 was not even read


def test_near_the_deadline_the_rest_is_reported_and_a_later_invocation_completes_it(
    app: Runlane, clock: ManualClock, transport: InMemoryTransport, calls: list[Any]
) -> None:
    runs, messages = trigger_and_receive(
        app, transport, [{"n": 1, "takes": 55}, {"n": 2}, {"n": 3}]
    )
    handler = sqs_handler(app, safety_margin_seconds=MARGIN_SECONDS)
    event = {"Records": [sqs_record(m) for m in messages]}

    first = handler(event, FakeContext(clock, 60, "req-1"))  # 5 s left after the first

    assert reported(first) == [messages[1].message_id, messages[2].message_id]
    assert [status(app, r) for r in runs] == [
        RunStatus.SUCCEEDED,
        RunStatus.QUEUED,
        RunStatus.QUEUED,
    ]
    # made visible again at once, not after the queue's visibility timeout
    redelivered_ids = {m.message_id for m in transport.receive("default", 10, 0)}
    assert redelivered_ids == {messages[1].message_id, messages[2].message_id}

    redelivered = {"Records": [sqs_record(m) for m in messages[1:]]}
    second = handler(redelivered, FakeContext(clock, 60, "req-2"))

    assert reported(second) == []
    assert all(status(app, r) is RunStatus.SUCCEEDED for r in runs)
    assert calls == [{"n": 1, "takes": 55}, {"n": 2}, {"n": 3}]


def test_a_run_claimed_past_the_safety_margin_is_given_back_unrun(
    app: Runlane,
    clock: ManualClock,
    store: FlakyStore,
    transport: InMemoryTransport,
    calls: list[Any],
) -> None:
    """The claim started with 12 s left and came back with 4 s left (a slow, throttled
    write): the handler does not start, the run is runnable at once with a fresh wakeup,
    and the record is not reported (that wakeup replaces it)."""
    [run], [message] = trigger_and_receive(app, transport, [{"n": 1}])
    store.slow_claim = (clock, 8.0)
    handler = sqs_handler(app, safety_margin_seconds=MARGIN_SECONDS)

    response = handler({"Records": [sqs_record(message)]}, FakeContext(clock, 12, "req-1"))

    assert reported(response) == [] and calls == []
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.QUEUED and stored.lease is None
    expired = app.runs.events(run.id)[-1]
    assert expired.data == {"worker": "lambda-req-1", "before_start": True, "reason": "deadline"}
    store.slow_claim = None
    [fresh] = transport.receive("default", 10, 0)
    assert reported(handler({"Records": [sqs_record(fresh)]}, FakeContext(clock, 60, "r2"))) == []
    assert calls == [{"n": 1}] and status(app, run) is RunStatus.SUCCEEDED


def test_an_invocation_without_time_left_starts_nothing(
    app: Runlane, clock: ManualClock, transport: InMemoryTransport, calls: list[Any]
) -> None:
    _, messages = trigger_and_receive(app, transport, [{"n": 1}, {"n": 2}])
    handler = sqs_handler(app, safety_margin_seconds=MARGIN_SECONDS)

    response = handler(
        {"Records": [sqs_record(m) for m in messages]}, FakeContext(clock, 9, "req-1")
    )

    assert reported(response) == [m.message_id for m in messages]
    assert calls == []
    assert len(transport.receive("default", 10, 0)) == 2  # visible again at once


def test_records_reported_for_another_reason_wait_out_the_visibility_timeout(
    app: Runlane,
    clock: ManualClock,
    store: FlakyStore,
    transport: InMemoryTransport,
    calls: list[Any],
) -> None:
    """Only records left unstarted for lack of time are made visible again at once; one
    reported because storage is unavailable keeps its backoff."""
    runs, messages = trigger_and_receive(app, transport, [{"n": 1}])
    store.down_for.add(runs[0].id)

    response = sqs_handler(app)({"Records": [sqs_record(messages[0])]}, FakeContext(clock, 60, "r"))

    assert reported(response) == [messages[0].message_id]
    assert transport.receive("default", 10, 0) == []


def test_no_state_is_kept_between_invocations(
    app: Runlane,
    clock: ManualClock,
    store: FlakyStore,
    transport: InMemoryTransport,
    calls: list[Any],
) -> None:
    """An invocation that stopped at its deadline and failed a FIFO group leaves nothing
    behind: the next one starts every record, the group included, as a new worker."""
    runs, messages = trigger_and_receive(
        app, transport, [{"n": "a1", "takes": 55}, {"n": "a2"}, {"n": "b1"}]
    )
    a1, a2, b1 = messages
    store.down_for.add(runs[0].id)
    handler = sqs_handler(app, safety_margin_seconds=MARGIN_SECONDS)
    fifo = {a1: "A", a2: "A", b1: "B"}

    first = handler(
        {"Records": [sqs_record(m, FIFO_ARN, fifo[m]) for m in messages]},
        FakeContext(clock, 60, "req-1"),
    )
    assert reported(first) == [a1.message_id, a2.message_id]
    assert invocation_threads() == []

    store.down_for.clear()
    clock.advance(1)
    second = handler(
        {"Records": [sqs_record(m, FIFO_ARN, fifo[m]) for m in (a1, a2)]},
        FakeContext(clock, 60, "req-2"),
    )  # a1 takes 55 s of this invocation's 60: a2 is reported again, for the next one

    assert reported(second) == [a2.message_id]
    assert invocation_threads() == []
    third = handler({"Records": [sqs_record(a2, FIFO_ARN, "A")]}, FakeContext(clock, 60, "req-3"))
    assert reported(third) == []
    assert all(status(app, r) is RunStatus.SUCCEEDED for r in runs)
    workers = [e.data["worker"] for r in runs for e in app.runs.events(r.id) if "worker" in e.data]
    assert sorted(workers) == ["lambda-req-1", "lambda-req-2", "lambda-req-3"]


def test_a_missing_table_reports_the_whole_batch_after_one_try(
    app: Runlane,
    clock: ManualClock,
    store: FlakyStore,
    transport: InMemoryTransport,
    calls: list[Any],
) -> None:
    _, messages = trigger_and_receive(app, transport, [{"n": 1}, {"n": 2}, {"n": 3}])
    store.table_missing = True

    response = sqs_handler(app)(
        {"Records": [sqs_record(m) for m in messages]}, FakeContext(clock, 60, "r")
    )

    assert reported(response) == [m.message_id for m in messages]
    assert sum(store.refused.values()) == 1  # the rest was not even tried
    assert calls == []


def test_heartbeats_run_only_during_the_invocation(
    app: Runlane, clock: ManualClock, transport: InMemoryTransport
) -> None:
    seen: list[list[str]] = []

    @app.task(name="look")
    def look(ctx: TaskContext, payload: Any) -> None:
        seen.append(invocation_threads())

    app.trigger("look", {})
    [message] = transport.receive("default", 10, 0)

    response = sqs_handler(app)({"Records": [sqs_record(message)]}, FakeContext(clock, 60, "r"))

    assert reported(response) == []
    assert [sorted(names) for names in seen] == [sorted(INVOCATION_THREADS)]
    assert invocation_threads() == []


def test_an_attempt_still_running_at_the_safety_margin_is_cancelled(
    app: Runlane, clock: ManualClock, transport: InMemoryTransport
) -> None:
    """The deadline timer runs on real time: 0.2 s after the start here."""

    @app.task(name="patient")
    def patient(ctx: TaskContext, payload: Any) -> str:
        return "cancelled" if ctx.cancellation.wait(timeout=30) else "not cancelled"

    run = app.trigger("patient", {})
    [message] = transport.receive("default", 10, 0)
    context = FakeContext(clock, MARGIN_SECONDS + 0.2, "r")

    response = sqs_handler(app, safety_margin_seconds=MARGIN_SECONDS)(
        {"Records": [sqs_record(message)]}, context
    )

    assert reported(response) == []
    assert app.runs.get(run.id).result == "cancelled"


def test_async_handlers_run_and_can_await_the_deadline_cancellation(
    app: Runlane, clock: ManualClock, transport: InMemoryTransport
) -> None:
    """``async def`` handlers run to completion in the invocation; one that awaits
    ``ctx.until_cancelled()`` returns when the safety margin is reached."""

    @app.task(name="fetch")
    async def fetch(ctx: TaskContext, payload: Any) -> Any:
        await asyncio.sleep(0)
        return {"fetched": payload["n"]}

    @app.task(name="patient")
    async def patient(ctx: TaskContext, payload: Any) -> str:
        await asyncio.wait_for(ctx.until_cancelled(), timeout=30)
        return "cancelled"

    fetched = app.trigger("fetch", {"n": 7})
    waiting = app.trigger("patient", {})
    messages = transport.receive("default", 10, 0)
    context = FakeContext(clock, MARGIN_SECONDS + 0.2, "r")

    response = sqs_handler(app, safety_margin_seconds=MARGIN_SECONDS)(
        {"Records": [sqs_record(m) for m in messages]}, context
    )

    assert reported(response) == []
    assert app.runs.get(fetched.id).result == {"fetched": 7}
    assert app.runs.get(waiting.id).result == "cancelled"


def test_the_handler_never_deletes_messages_itself(
    app: Runlane, clock: ManualClock, transport: InMemoryTransport, calls: list[Any]
) -> None:
    _, messages = trigger_and_receive(app, transport, [{"n": 1}, {"n": 2}])

    response = sqs_handler(app)(
        {"Records": [sqs_record(m) for m in messages]}, FakeContext(clock, 60, "r")
    )

    assert reported(response) == []
    assert transport.depth("default") == 2  # Lambda deletes what was not reported


@pytest.mark.parametrize(
    "event",
    [{}, {"Records": "x"}, {"Records": [{"messageId": "m"}]}, {"detail-type": "Scheduled Event"}],
)
def test_an_event_that_is_not_an_sqs_batch_is_refused(app: Runlane, event: Any) -> None:
    with pytest.raises(NotAnSqsEvent):
        sqs_handler(app)(event, FakeContext(ManualClock(), 60, "r"))


def test_logical_queue_names(clock: ManualClock) -> None:
    app = Runlane(
        environment="test",
        clock=clock,
        store=InMemoryRunStore("test"),
        transport=InMemoryTransport(clock),
        queue_prefix="prod-",
        queue_urls={"ordered": "https://sqs.us-east-1.amazonaws.com/1/prod-ordered.fifo"},
    )
    assert logical_queue(app, "arn:aws:sqs:us-east-1:1:prod-emails") == "emails"
    assert logical_queue(app, "arn:aws:sqs:us-east-1:1:prod-ordered.fifo") == "ordered"
    assert logical_queue(app, "arn:aws:sqs:us-east-1:1:other") == "other"


# one broken record fails alone (issue 13, item 7) ----------------------------------------


def broken_garbage_attributes(record: dict[str, Any]) -> None:
    record["attributes"] = "garbage"


def broken_no_attributes(record: dict[str, Any]) -> None:
    del record["attributes"]


def broken_receive_count(record: dict[str, Any]) -> None:
    record["attributes"]["ApproximateReceiveCount"] = "x"


def broken_negative_receive_count(record: dict[str, Any]) -> None:
    record["attributes"]["ApproximateReceiveCount"] = "-3"


def broken_overlong_receive_count(record: dict[str, Any]) -> None:
    record["attributes"]["ApproximateReceiveCount"] = "9" * 5000  # past int()'s digit limit


@pytest.mark.parametrize(
    "break_record",
    [
        broken_garbage_attributes,
        broken_no_attributes,
        broken_receive_count,
        broken_negative_receive_count,
        broken_overlong_receive_count,
    ],
)
def test_an_unreadable_receive_count_counts_as_the_first_receive(
    app: Runlane,
    clock: ManualClock,
    transport: InMemoryTransport,
    calls: list[Any],
    caplog: pytest.LogCaptureFixture,
    break_record: Any,
) -> None:
    runs, messages = trigger_and_receive(app, transport, [{"n": 1}, {"n": 2}, {"n": 3}])
    records = [sqs_record(m) for m in messages]
    break_record(records[1])

    response = sqs_handler(app)({"Records": records}, FakeContext(clock, 60, "r"))

    assert reported(response) == []
    assert calls == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert all(status(app, r) is RunStatus.SUCCEEDED for r in runs)
    [warning] = [r for r in caplog.records if r.levelname == "WARNING"]
    assert warning.getMessage() == (
        f"record {messages[1].message_id} has no readable ApproximateReceiveCount; "
        "counting this as its first receive"
    )


def without_message_id(record: dict[str, Any]) -> object:
    del record["messageId"]
    return record


@pytest.mark.parametrize(
    "unreportable",
    [
        without_message_id,
        lambda record: record | {"messageId": None},
        lambda record: record | {"messageId": ""},
        lambda record: record | {"messageId": 42},
        lambda record: record | {"messageId": "m-1\n2030-01-01 ERROR forged log line"},
        lambda record: "garbage",
        lambda record: None,
    ],
    ids=["missing", "None", "empty", "number", "control", "a string record", "a null record"],
)
def test_a_record_without_a_usable_message_id_is_logged_and_the_others_run(
    app: Runlane,
    clock: ManualClock,
    transport: InMemoryTransport,
    calls: list[Any],
    caplog: pytest.LogCaptureFixture,
    unreportable: Any,
) -> None:
    """It cannot be reported (an empty or unknown itemIdentifier fails the whole batch),
    so it is left out of the response: the rest of the batch is unaffected."""
    runs, messages = trigger_and_receive(app, transport, [{"n": 1}, {"n": 2}, {"n": 3}])
    records = [sqs_record(m) for m in messages]
    records[1] = unreportable(records[1])

    response = sqs_handler(app)({"Records": records}, FakeContext(clock, 60, "r"))

    assert response == {"batchItemFailures": []}
    assert calls == [{"n": 1}, {"n": 3}]
    assert [status(app, r) for r in runs] == [
        RunStatus.SUCCEEDED,
        RunStatus.QUEUED,
        RunStatus.SUCCEEDED,
    ]
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == [
        "record 1 of the batch has no usable messageId: it cannot be reported for "
        "redelivery and is not handled"
    ]


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("eventSourceARN", None, "it has no usable eventSourceARN"),
        ("eventSourceARN", 7, "it has no usable eventSourceARN"),
        ("receiptHandle", None, "it has no usable receiptHandle"),
        ("receiptHandle", "", "it has no usable receiptHandle"),
        ("body", None, "its body is missing or not a string"),
        ("body", {"run_id": "x"}, "its body is missing or not a string"),
        ("eventSource", "aws:s3", "its eventSource is not 'aws:sqs'"),
    ],
)
def test_a_record_with_a_broken_envelope_is_reported_and_the_others_run(
    app: Runlane,
    clock: ManualClock,
    transport: InMemoryTransport,
    calls: list[Any],
    caplog: pytest.LogCaptureFixture,
    field: str,
    value: object,
    problem: str,
) -> None:
    runs, messages = trigger_and_receive(app, transport, [{"n": 1}, {"n": 2}, {"n": 3}])
    records = [sqs_record(m) for m in messages]
    if value is None:
        del records[1][field]
    else:
        records[1][field] = value

    response = sqs_handler(app)({"Records": records}, FakeContext(clock, 60, "r"))

    assert response == {"batchItemFailures": [{"itemIdentifier": messages[1].message_id}]}
    assert calls == [{"n": 1}, {"n": 3}]
    assert status(app, runs[1]) is RunStatus.QUEUED
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == [f"reporting record {messages[1].message_id}: {problem}"]


def test_a_broken_fifo_record_holds_back_the_rest_of_its_group(
    app: Runlane, clock: ManualClock, transport: InMemoryTransport, calls: list[Any]
) -> None:
    _, messages = trigger_and_receive(app, transport, [{"n": "a1"}, {"n": "a2"}, {"n": "b1"}])
    a1, a2, b1 = messages
    records = [sqs_record(m, FIFO_ARN, g) for m, g in ((a1, "A"), (a2, "A"), (b1, "B"))]
    del records[0]["receiptHandle"]

    response = sqs_handler(app)({"Records": records}, FakeContext(clock, 60, "r"))

    assert reported(response) == [a1.message_id, a2.message_id]
    assert calls == [{"n": "b1"}]


def test_a_forged_receive_count_parks_only_a_run_whose_task_is_not_registered(
    app: Runlane, clock: ManualClock, transport: InMemoryTransport, calls: list[Any]
) -> None:
    """A receive count is only read to park runs of tasks this function does not register;
    a huge one parks such a run at once (as the third receive would) and changes nothing
    for a run whose task it registers."""
    other = Runlane(environment="test", clock=clock, store=app.store, transport=transport)
    other.task(lambda ctx, payload: None, name="elsewhere")
    stranger = other.trigger("elsewhere", {})
    known = app.trigger("work", {"n": 1})
    by_run = {parse_wakeup(m.body).run_id: m for m in transport.receive("default", 10, 0)}
    records = [sqs_record(by_run[stranger.id]), sqs_record(by_run[known.id])]
    for record in records:
        record["attributes"]["ApproximateReceiveCount"] = "9999999999"

    response = sqs_handler(app)({"Records": records}, FakeContext(clock, 60, "r"))

    assert reported(response) == []
    assert status(app, stranger) is RunStatus.PARKED
    assert status(app, known) is RunStatus.SUCCEEDED
    assert calls == [{"n": 1}]
    assert app.runs.get(known.id).attempt == 1


def test_an_invocation_traces_its_attempts_as_a_worker_does_and_flushes_at_its_end(
    clock: ManualClock,
    store: FlakyStore,
    transport: InMemoryTransport,
    recorded: Recorded,  # noqa: F811
) -> None:
    app = Runlane(
        environment="test",
        clock=clock,
        store=store,  # type: ignore[arg-type]
        transport=transport,
        telemetry=recorded.telemetry(),
    )

    @app.task(name="work")
    def work(ctx: TaskContext, payload: Any) -> Any:
        return ctx.trace_id

    runs, messages = trigger_and_receive(app, transport, [{"n": 1}])
    flushed: list[bool] = []
    app.engine.observer.flush = lambda: flushed.append(True)  # type: ignore[method-assign]
    handler = sqs_handler(app, safety_margin_seconds=MARGIN_SECONDS)
    response = handler({"Records": [sqs_record(m) for m in messages]}, FakeContext(clock, 60, "r"))

    assert reported(response) == []
    (trigger,) = recorded.spans("trigger work")
    (attempt,) = recorded.spans("attempt work")
    assert attempt.parent is not None
    assert (attempt.parent.trace_id, attempt.parent.span_id) == (
        trigger.context.trace_id,
        trigger.context.span_id,
    )
    assert attempt.attributes is not None
    assert attempt.attributes["messaging.message.id"] == messages[0].message_id
    assert app.runs.get(runs[0].id).result == f"{trigger.context.trace_id:032x}"
    assert flushed == [True]


def test_a_map_a_group_with_a_callback_and_a_chain_complete_through_lambda_invocations(
    app: Runlane, clock: ManualClock, transport: InMemoryTransport, calls: list[Any]
) -> None:
    """Each invocation handles what the queue holds; the children a finishing child
    starts and the parent it resumes arrive as wakeups for later invocations."""

    @app.task(name="parent")
    def parent(ctx: TaskContext, payload: Any) -> Any:
        results = ctx.map("work", [{"n": n} for n in range(5)], max_in_flight=2)
        return [r["done"] for r in results.results()]

    @app.task(name="then")
    def then(ctx: TaskContext, payload: Any) -> Any:
        joined = ctx.joined_group()
        assert joined is not None
        return joined.succeeded

    @app.task(name="next")
    def next_step(ctx: TaskContext, payload: Any) -> Any:
        return {"got": payload}

    run = app.trigger("parent")
    chord = app.group([("work", {"n": "x"}), ("work", {"n": "y"})], then=("then", None))
    chain = app.chain(("work", {"n": "c"}), "next")
    handler = sqs_handler(app, safety_margin_seconds=MARGIN_SECONDS)
    for number in range(30):
        messages = transport.receive("default", 10, 0)
        if not messages:
            break
        response = handler(
            {"Records": [sqs_record(m) for m in messages]},
            FakeContext(clock, 60, f"req-{number}"),
        )
        assert reported(response) == []
    assert app.runs.get(run.id).result == [0, 1, 2, 3, 4]
    resumes = [e for e in app.runs.events(run.id) if e.type is EventType.RESUMED]
    assert len(resumes) == 1
    assert app.runs.get(callback_run_id(chord.id)).result == 2
    last = app.runs.get(child_run_id(next_group_id(chain.id), 0))
    assert last.result == {"got": {"done": "c"}}


def test_a_5_mb_payload_and_result_round_trip_through_the_consumer(
    clock: ManualClock, store: FlakyStore, transport: InMemoryTransport
) -> None:
    objects = InMemoryObjects("runlane-lambda-values")
    app = Runlane(
        environment="test",
        clock=clock,
        store=store,  # type: ignore[arg-type]
        transport=transport,
        objects=objects,
        payload_bucket=objects.bucket,
    )

    @app.task(name="work")
    def work(ctx: TaskContext, payload: Any) -> Any:
        return {"rows": payload["rows"][::-1]}

    payload = {"rows": [f"row {n:07d} " + "x" * 990 for n in range(5000)]}
    [run], [message] = trigger_and_receive(app, transport, [payload])
    handler = sqs_handler(app, safety_margin_seconds=MARGIN_SECONDS)

    response = handler({"Records": [sqs_record(message)]}, FakeContext(clock, 60, "req-1"))

    assert reported(response) == []
    done = app.runs.get(run.id)
    assert (done.status, done.payload) == (RunStatus.SUCCEEDED, payload)
    assert done.result == {"rows": payload["rows"][::-1]}
    assert objects.requests == {"put": 2, "get": 3}  # the consumer reads one, runs.get two
