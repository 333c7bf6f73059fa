"""Bad input against the real backend: clear errors, nothing written, nothing executed.

Triggers with a missing table or queue, an unknown task, a payload that is not JSON
or too large, or a malformed key fail before any write. Wakeups that are malformed,
forged, stale or unknown are deleted by a draining worker and execute nothing; a wakeup
of another environment is left on the queue for that environment's workers, and a
wakeup for a task this worker does not register for one that does (until the run is
parked, see test_parking.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runlane_sqs import (
    InvalidKeyError,
    InvalidPayloadError,
    ManualClock,
    MissingResourceError,
    PayloadTooLarge,
    Runlane,
    RunlaneError,
    RunStatus,
    TaskContext,
    UnknownTaskError,
)
from runlane_sqs.adapters.provision import provision_table
from runlane_sqs.core import machine
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.wakeup import Wakeup
from tests.emulators import queue_counts, queue_url, scan_items
from tests.wakeups import forged_bodies, send_bodies

TASK = "bad_input.work"
EMPTY = {"visible": 0, "in_flight": 0, "delayed": 0}


class Calls:
    """A handler that records every run it is called for."""

    def __init__(self) -> None:
        self.run_ids: list[str] = []

    def __call__(self, ctx: TaskContext, payload: Any) -> Any:
        self.run_ids.append(ctx.run_id)
        return payload


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC))


@pytest.fixture
def app(make_app: Callable[..., Runlane], calls: Calls, clock: ManualClock) -> Runlane:
    app = make_app(clock=clock)
    app.task(calls, name=TASK)
    return app


def _body(run_id: str, environment: str, at: datetime) -> str:
    return Wakeup(
        environment=environment, run_id=run_id, queue="default", requested_at=at
    ).to_json()


def _take_published(sqs: Any, url: str) -> None:
    """Delete what the triggers published, so only the test's messages remain."""
    sqs.purge_queue(QueueUrl=url)
    assert queue_counts(sqs, url) == EMPTY


# --- missing resources -----------------------------------------------------------------


def test_trigger_without_the_table_says_how_to_create_it(
    app: Runlane, sqs: Any, dynamodb: Any
) -> None:
    url = sqs.create_queue(QueueName=app.config.sqs_queue_name("default"))["QueueUrl"]

    with pytest.raises(MissingResourceError) as error:
        app.trigger(TASK, {"n": 1})

    message = str(error.value)
    assert repr(app.config.table) in message
    assert "does not exist" in message
    assert "provision()" in message
    assert dynamodb.list_tables()["TableNames"] == []
    assert queue_counts(sqs, url) == EMPTY


def test_trigger_without_the_queue_says_how_to_create_it(
    app: Runlane, sqs: Any, dynamodb: Any
) -> None:
    provision_table(app.client("dynamodb"), app.config.table)

    for trigger in (
        lambda: app.trigger(TASK, {"n": 1}),
        lambda: app.trigger_many(TASK, [{"n": 1}, {"n": 2}]),
    ):
        with pytest.raises(MissingResourceError) as error:
            trigger()
        message = str(error.value)
        assert repr(app.config.sqs_queue_name("default")) in message
        assert "provision()" in message

    assert scan_items(dynamodb, app.config.table) == []
    assert sqs.list_queues().get("QueueUrls", []) == []


# --- bad triggers ----------------------------------------------------------------------


def _not_json() -> object:
    return {"when": datetime(2030, 1, 1, tzinfo=UTC)}


BAD_TRIGGERS: dict[str, tuple[dict[str, Any], type[RunlaneError], str]] = {
    "unknown task": ({"task": "bad_input.nope"}, UnknownTaskError, "bad_input.nope"),
    "payload not JSON": ({"payload": _not_json()}, InvalidPayloadError, "not JSON-serialisable"),
    "payload NaN": ({"payload": {"x": float("nan")}}, InvalidPayloadError, "not JSON"),
    "payload object": ({"payload": object()}, InvalidPayloadError, "not JSON"),
    "payload too large": ({"payload": "x" * 70_000}, PayloadTooLarge, "the limit is 65536"),
    "empty idempotency key": ({"idempotency_key": ""}, InvalidKeyError, "must not be empty"),
    "blank singleton key": ({"singleton_key": "   "}, InvalidKeyError, "must not be empty"),
    "padded key": ({"idempotency_key": " k "}, InvalidKeyError, "whitespace"),
    "control characters": ({"idempotency_key": "a\nb"}, InvalidKeyError, "control"),
    "key too long": ({"singleton_key": "k" * 257}, InvalidKeyError, "the limit is 256"),
    "key not a string": ({"idempotency_key": 42}, InvalidKeyError, "must be a string"),
}


@pytest.mark.parametrize("case", list(BAD_TRIGGERS))
def test_a_bad_trigger_fails_clearly_and_writes_nothing(
    case: str, app: Runlane, sqs: Any, dynamodb: Any
) -> None:
    arguments, error_type, phrase = BAD_TRIGGERS[case]
    app.provision()
    task = arguments.pop("task", TASK)
    payload = arguments.pop("payload", {"ok": True})

    with pytest.raises(error_type) as error:
        app.trigger(task, payload, **arguments)

    assert phrase in str(error.value)
    assert scan_items(dynamodb, app.config.table) == []
    assert queue_counts(sqs, queue_url(sqs, app)) == EMPTY


def test_one_bad_payload_in_trigger_many_writes_none_of_them(
    app: Runlane, sqs: Any, dynamodb: Any
) -> None:
    app.provision()

    with pytest.raises(InvalidPayloadError):
        app.trigger_many(TASK, [{"n": 1}, {"n": 2}, _not_json(), {"n": 4}])

    assert scan_items(dynamodb, app.config.table) == []
    assert queue_counts(sqs, queue_url(sqs, app)) == EMPTY


# --- wakeups that must not execute anything -------------------------------------------


def test_malformed_and_forged_wakeups_are_deleted_and_execute_nothing(
    app: Runlane, calls: Calls, sqs: Any
) -> None:
    app.provision()
    url = queue_url(sqs, app)
    run = app.trigger(TASK, {"n": 1})
    _take_published(sqs, url)
    forged = forged_bodies(run.id, app.config.environment)
    send_bodies(sqs, url, list(forged.values()))
    assert queue_counts(sqs, url)["visible"] == len(forged)

    assert app.worker(concurrency=2).drain() == 0

    assert calls.run_ids == []
    assert queue_counts(sqs, url) == EMPTY
    stored = app.runs.get(run.id)
    assert (stored.status, stored.attempt, stored.seq) == (RunStatus.QUEUED, 0, 1)


def test_a_wakeup_for_a_run_of_another_environment_is_left_on_a_shared_queue_unexecuted(
    app: Runlane, make_app: Callable[..., Runlane], calls: Calls, sqs: Any
) -> None:
    other = make_app(environment="other", queue_prefix=app.config.sqs_queue_prefix)
    other.task(calls, name=TASK)
    app.provision()
    foreign = other.trigger(TASK, {"env": "other"})
    url = queue_url(sqs, app)
    assert queue_counts(sqs, url)["visible"] == 1

    assert app.worker().drain() == 0

    assert calls.run_ids == []
    assert queue_counts(sqs, url) == {**EMPTY, "visible": 1}
    assert other.runs.get(foreign.id).status is RunStatus.QUEUED
    assert app.store.get_run(foreign.id) is None


def _finish(app: Runlane, run_id: str) -> None:
    assert app.worker().drain() == 1
    assert app.runs.get(run_id).status is RunStatus.SUCCEEDED


def _claim(app: Runlane, run_id: str) -> None:
    decision = machine.claim_lease(
        app.runs.get(run_id),
        now=app.clock.now(),
        owner="worker-elsewhere",
        token="f" * 32,
        duration=app.config.lease_duration,
    )
    assert isinstance(decision, Transition)
    app.store.apply(decision)


@pytest.mark.parametrize("state", ["terminal", "running", "not due"])
def test_a_stale_wakeup_is_deleted_and_leaves_the_run_as_it_was(
    state: str, app: Runlane, calls: Calls, sqs: Any
) -> None:
    app.provision()
    url = queue_url(sqs, app)
    delay = timedelta(hours=1) if state == "not due" else None
    run = app.trigger(TASK, {"state": state}, delay=delay)
    if state == "terminal":
        _finish(app, run.id)
    elif state == "running":
        _take_published(sqs, url)
        _claim(app, run.id)
    before = app.runs.get(run.id)
    executed_before = list(calls.run_ids)
    send_bodies(sqs, url, [_body(run.id, app.config.environment, app.clock.now())] * 2)

    assert app.worker().drain() == 0

    assert calls.run_ids == executed_before
    assert queue_counts(sqs, url) == EMPTY
    after = app.runs.get(run.id)
    assert (after.status, after.seq, after.attempt, after.lease) == (
        before.status,
        before.seq,
        before.attempt,
        before.lease,
    )


def test_a_wakeup_for_a_task_this_worker_does_not_register_stays_on_the_queue(
    app: Runlane, make_app: Callable[..., Runlane], calls: Calls, sqs: Any, clock: ManualClock
) -> None:
    """At its first receive; the third parks the run (test_parking.py)."""
    producer = make_app(clock=clock)
    producer.task(calls, name=TASK)
    producer.task(lambda ctx, payload: payload, name="bad_input.elsewhere")
    producer.provision()
    run = producer.trigger("bad_input.elsewhere", {"for": "another worker"})
    url = queue_url(sqs, app)

    assert app.worker().drain() == 0

    counts = queue_counts(sqs, url)
    assert counts["visible"] + counts["in_flight"] == 1
    stored = app.runs.get(run.id)
    assert (stored.status, stored.attempt) == (RunStatus.QUEUED, 0)
    assert calls.run_ids == []


def test_wakeup_bodies_name_no_payload_or_state(app: Runlane, sqs: Any) -> None:
    app.provision()
    run = app.trigger(TASK, {"secret": "s3cr3t"})
    message = sqs.receive_message(QueueUrl=queue_url(sqs, app), WaitTimeSeconds=0)["Messages"][0]
    body = json.loads(message["Body"])
    assert set(body) == {"version", "environment", "run_id", "queue", "requested_at", "hint"}
    # what the claim checks: the run's sequence, attempt and task, and when maintenance
    # first looks at it (its due time plus the lease duration), where the claim leaves it
    lease_ms = int(app.config.lease_duration.total_seconds() * 1000)
    created_ms = int(run.created_at.timestamp() * 1000)
    assert body["hint"] == {"seq": 1, "attempt": 0, "task": TASK, "at": created_ms + lease_ms}
    assert body["run_id"] == run.id
    assert "s3cr3t" not in message["Body"]


def test_skipped_wakeups_do_not_count_toward_max_runs(app: Runlane, calls: Calls, sqs: Any) -> None:
    """``drain(max_runs=N)`` stops after N executed runs; the forged
    wakeups ahead of the real ones are deleted without counting."""
    app.provision()
    url = queue_url(sqs, app)
    decoy = app.trigger(TASK, {"decoy": True})
    _take_published(sqs, url)
    send_bodies(sqs, url, list(forged_bodies(decoy.id, app.config.environment).values()))
    runs = app.trigger_many(TASK, [{"n": n} for n in range(3)])
    real = {run.id for run in runs}

    assert app.worker().drain(max_runs=2) == 2

    assert len(calls.run_ids) == 2 and set(calls.run_ids) < real
    statuses = sorted(app.runs.get(run_id).status.value for run_id in real)
    assert statuses == ["queued", "succeeded", "succeeded"]

    assert app.worker().drain() == 1
    assert set(calls.run_ids) == real
    assert queue_counts(sqs, url) == EMPTY
    assert app.runs.get(decoy.id).status is RunStatus.QUEUED
