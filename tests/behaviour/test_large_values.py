"""Large values, on every backend and with both workers: claim checks in the payload
bucket (docs/payloads.md).

With a ``payload_bucket``, a payload, result, step result, signal payload or token value
over ``inline_limit`` is written to the bucket first and its record keeps a reference
(bucket, key, size, SHA-256); readers fetch the object and check it. A small value is
kept in its record as before, with no request to the bucket. An object that is missing
or does not match its reference fails the attempt that reads it, without retry, naming
the run and the reference; the operator API says the same, and still reads the run
without its values.
"""

from __future__ import annotations

import hashlib
import io
import tracemalloc
from dataclasses import replace
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber
from tenacity import wait_none

from runlane_sqs import (
    ConfigurationError,
    ManualClock,
    PayloadTooLarge,
    Run,
    Runlane,
    RunStatus,
    StorageUnavailable,
    TaskContext,
    ValueUnreadable,
)
from runlane_sqs.adapters.dynamodb.keys import run_key
from runlane_sqs.adapters.dynamodb.objects import DynamoObjectRecords
from runlane_sqs.adapters.memory.objects import InMemoryObjects
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.adapters.s3 import S3Objects
from runlane_sqs.core import machine
from runlane_sqs.core.errors import ObjectUnreadable
from runlane_sqs.core.model import new_run_id
from runlane_sqs.core.values import (
    PIN_DURATION,
    RELEASE_GRACE,
    Holder,
    Reference,
    Sealed,
    ValueField,
    ValuePlace,
    generation_of,
    object_key,
    run_references,
)
from runlane_sqs.runtime import budget
from runlane_sqs.testing import InMemoryRunStore, in_memory_app
from tests.backends import ONLY_AWS, ONLY_MEMORY, Backend
from tests.workers import WorkerKind

BUCKET = "runlane-test-values"
KIB = 1024
MIB = 1024 * KIB


def blob(size: int, seed: str = "x") -> dict[str, Any]:
    """A payload of about ``size`` bytes as JSON, its text varied by ``seed``."""
    unit = hashlib.sha256(seed.encode()).hexdigest()
    return {"seed": seed, "blob": (unit * (size // len(unit) + 1))[:size]}


class Tasks:
    """Handlers that echo, step and wait with large values."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def register(self, app: Runlane) -> None:
        app.task(self.echo, name="large.echo")
        app.task(self.steps, name="large.steps")
        app.task(self.signal, name="large.signal")
        app.task(self.token, name="large.token")
        app.task(self.waits_for_run, name="large.waits_for_run")

    def echo(self, ctx: TaskContext, payload: Any) -> Any:
        self.calls.append("echo")
        return {"got": len(payload["blob"]), "back": payload["blob"][::-1]}

    def steps(self, ctx: TaskContext, payload: Any) -> Any:
        def produce() -> Any:
            self.calls.append("produce")
            return blob(payload["size"], "step")

        value = ctx.step("big", produce)
        if ctx.attempt == 1:
            raise RuntimeError("fails after its step, once")
        return {"step_seed": value["seed"], "step_size": len(value["blob"])}

    def signal(self, ctx: TaskContext, payload: Any) -> Any:
        received = ctx.wait_for_signal(payload["key"])
        return {"signal_size": len(received.payload["blob"])}

    def token(self, ctx: TaskContext, payload: Any) -> Any:
        decided = ctx.wait_for_token(payload["token"])
        return {"token_size": len(decided.value["blob"])}

    def waits_for_run(self, ctx: TaskContext, payload: Any) -> Any:
        outcome = ctx.wait_for_run(payload["run"])
        return {"other_size": outcome.result["got"]}


@pytest.fixture
def tasks() -> Tasks:
    return Tasks()


@pytest.fixture
def app(backend: Backend, tasks: Tasks) -> Runlane:
    from tests.behaviour.worker_support import RETRY_AT_ONCE  # noqa: PLC0415

    def register(app: Runlane) -> None:
        tasks.register(app)
        app.task(tasks.steps, name="large.steps_retried", retry=RETRY_AT_ONCE)

    return backend.app(register=register, payload_bucket=BUCKET)


def sealed(value: Any) -> Sealed:
    assert isinstance(value, Sealed), f"expected a reference, found {type(value).__name__}"
    return value


def reference_of(value: Any) -> Reference:
    """The reference of a value kept in the bucket."""
    reference = sealed(value).reference
    assert reference is not None, "expected a value kept in the bucket"
    return reference


def test_a_5_mb_payload_and_result_round_trip(app: Runlane, worker_kind: WorkerKind) -> None:
    payload = blob(5 * MIB)
    run = app.trigger("large.echo", payload)
    assert run.payload == payload  # the trigger's own run holds the value it was given

    assert worker_kind.drain(app) == 1

    done = app.runs.wait(run.id, timeout=0)
    assert done.status is RunStatus.SUCCEEDED
    assert done.payload == payload
    assert done.result == {"got": 5 * MIB, "back": payload["blob"][::-1]}
    assert app.runs.get(run.id).result == done.result
    stored = app.runs.get_stored(run.id)  # the item keeps references, not the values
    reference = reference_of(stored.payload)
    assert reference.bucket == BUCKET
    assert reference.size > 5 * MIB
    generation = generation_of(reference)
    assert reference.key == object_key(app.config.environment, reference.sha256, generation)
    assert reference_of(stored.result).size > 5 * MIB


def test_a_value_under_the_inline_limit_stays_in_its_record(
    app: Runlane, worker_kind: WorkerKind
) -> None:
    run = app.trigger("large.echo", {"blob": "small"})
    assert worker_kind.drain(app) == 1

    stored = app.runs.get_stored(run.id)
    assert stored.payload == {"blob": "small"}
    assert stored.result == {"got": 5, "back": "llams"}


@ONLY_MEMORY
def test_a_small_payload_sends_no_request_to_the_bucket(
    app: Runlane, worker_kind: WorkerKind
) -> None:
    objects = app.objects
    assert isinstance(objects, InMemoryObjects)
    run = app.trigger("large.echo", {"blob": "x" * 200})
    assert worker_kind.drain(app) == 1

    assert app.runs.wait(run.id, timeout=0).status is RunStatus.SUCCEEDED
    assert objects.requests == {}


def test_the_same_payload_triggered_twice_is_stored_once(app: Runlane) -> None:
    first = app.trigger("large.echo", blob(100 * KIB))
    second = app.trigger("large.echo", blob(100 * KIB))

    one = reference_of(app.runs.get_stored(first.id).payload)
    other = reference_of(app.runs.get_stored(second.id).payload)
    assert one == other
    assert object_exists(app, one)


def objects_of(app: Runlane, *runs: Run) -> set[Reference]:
    """The objects ``runs`` reference (read as stored)."""
    return {reference for run in runs for reference in run_references(app.runs.get_stored(run.id))}


def object_exists(app: Runlane, reference: Reference) -> bool:
    assert app.objects is not None
    return app.objects.get(reference.key, reference.size) is not None


def test_prune_deletes_a_runs_objects_once_no_record_references_them(
    app: Runlane, clock: ManualClock, worker_kind: WorkerKind
) -> None:
    shared, own = blob(100 * KIB, "shared"), blob(100 * KIB, "own")
    runs = [app.trigger("large.echo", p) for p in (shared, shared, own)]
    worker_kind.drain_all(app)
    held = objects_of(app, *runs)
    assert len(held) == 4  # two payloads and two results: the shared ones stored once

    clock.advance(timedelta(days=2))
    assert app.runs.prune(older_than=timedelta(days=1)).deleted == 3
    assert app.maintenance.run_pass().jobs["objects"].acted == 0  # within the grace
    assert all(object_exists(app, reference) for reference in held)

    clock.advance(RELEASE_GRACE + timedelta(seconds=1))
    assert app.maintenance.run_pass().jobs["objects"].acted == 4
    assert not any(object_exists(app, reference) for reference in held)


def test_a_value_written_again_within_the_grace_keeps_its_object(
    app: Runlane, clock: ManualClock, worker_kind: WorkerKind
) -> None:
    payload = blob(100 * KIB, "again")
    old = app.trigger("large.echo", payload)
    worker_kind.drain_all(app)
    reference = reference_of(app.runs.get_stored(old.id).payload)
    clock.advance(timedelta(days=2))
    assert app.runs.prune(older_than=timedelta(days=1)).deleted == 1

    new = app.trigger("large.echo", payload)  # held again before maintenance looks
    clock.advance(RELEASE_GRACE + timedelta(seconds=1))
    app.maintenance.run_pass()

    assert reference_of(app.runs.get_stored(new.id).payload) == reference
    assert object_exists(app, reference)
    worker_kind.drain_all(app)
    assert app.runs.get(new.id).status is RunStatus.SUCCEEDED


def test_an_object_no_write_came_to_reference_is_deleted_after_its_pin(
    app: Runlane, clock: ManualClock
) -> None:
    place = ValuePlace(Holder.RUN, new_run_id(), ValueField.PAYLOAD)
    kept = app.engine.values.seal(blob(100 * KIB, "orphan"), what="payload", place=place)
    reference = reference_of(kept.value)  # a writer that stopped before its record's write
    assert object_exists(app, reference)

    clock.advance(PIN_DURATION + timedelta(seconds=1))
    assert app.maintenance.run_pass().jobs["objects"].acted == 1
    assert not object_exists(app, reference)


def test_an_object_two_runs_share_stays_while_one_still_references_it(
    app: Runlane, clock: ManualClock, worker_kind: WorkerKind
) -> None:
    shared = blob(100 * KIB, "shared")
    old = app.trigger("large.echo", shared)
    worker_kind.drain_all(app)
    clock.advance(timedelta(days=2))
    young = app.trigger("large.echo", shared)  # the same object
    worker_kind.drain_all(app)
    payload = reference_of(app.runs.get_stored(young.id).payload)
    assert payload in objects_of(app, old)

    assert app.runs.prune(older_than=timedelta(days=1)).deleted == 1  # the old run only
    clock.advance(RELEASE_GRACE + timedelta(seconds=1))
    app.maintenance.run_pass()

    assert object_exists(app, payload)
    assert app.runs.get(young.id).payload == shared


def test_a_large_step_result_is_recorded_once_and_read_back_by_the_next_attempt(
    app: Runlane, tasks: Tasks, worker_kind: WorkerKind
) -> None:
    run = app.trigger("large.steps_retried", {"size": 200 * KIB})
    worker_kind.drain_all(app)

    done = app.runs.get(run.id)
    assert done.status is RunStatus.SUCCEEDED, done.failure
    assert done.result == {"step_seed": "step", "step_size": 200 * KIB}
    assert tasks.calls == ["produce"]  # the second attempt read the step back
    assert isinstance(app.runs.get_stored(run.id).steps["big"], Sealed)


def test_a_large_signal_payload_and_token_value_reach_the_waiting_runs(
    app: Runlane, worker_kind: WorkerKind
) -> None:
    token = app.tokens.create(metadata=blob(50 * KIB, "metadata"))
    waiting_signal = app.trigger("large.signal", {"key": "order-7"})
    waiting_token = app.trigger("large.token", {"token": token.id})
    assert worker_kind.drain(app) == 2  # both released

    assert app.signals.send("order-7", blob(300 * KIB, "signal")) == 1
    completed = app.tokens.complete(token.id, blob(400 * KIB, "token"))
    assert completed.value == blob(400 * KIB, "token")
    worker_kind.drain_all(app)

    assert app.runs.get(waiting_signal.id).result == {"signal_size": 300 * KIB}
    assert app.runs.get(waiting_token.id).result == {"token_size": 400 * KIB}
    read = app.tokens.get(token.id)
    assert (read.value, read.metadata) == (blob(400 * KIB, "token"), blob(50 * KIB, "metadata"))


def test_a_run_waiting_for_another_gets_its_large_result(
    app: Runlane, worker_kind: WorkerKind
) -> None:
    other = app.trigger("large.echo", blob(200 * KIB))
    waiter = app.trigger("large.waits_for_run", {"run": other.id})
    worker_kind.drain_all(app)

    assert app.runs.get(waiter.id).result == {"other_size": 200 * KIB}


DAMAGES = {
    "deleted": (None, "its object is missing"),
    "replaced": (lambda size: b"{}", "its object holds 2 bytes, not the {size} its reference"),
    "same-size": (
        lambda size: b"{" + b" " * (size - 2) + b"}",
        "its object does not match the reference",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_an_object_damaged_behind_the_runs_back_fails_the_attempt_clearly(
    app: Runlane, worker_kind: WorkerKind, damage: str
) -> None:
    run = app.trigger("large.echo", blob(100 * KIB))
    reference = reference_of(app.runs.get_stored(run.id).payload)
    assert app.objects is not None
    damaged, reason = DAMAGES[damage]
    reason = reason.format(size=reference.size)
    if damaged is None:
        app.objects.delete(reference.key)
    else:
        app.objects.put(reference.key, damaged(reference.size))

    assert worker_kind.drain(app) == 1
    worker_kind.drain_all(app)

    failed = app.runs.get_stored(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.attempt == 1
    assert failed.failure is not None
    assert failed.failure.type == "runlane_sqs.errors.ValueUnreadable"
    assert failed.failure.retryable is False
    assert f"payload of run {run.id} cannot be read: {reason}" in failed.failure.message
    assert reference.key in failed.failure.message
    with pytest.raises(ValueUnreadable, match=reason):
        app.runs.get(run.id)


def test_a_payload_over_the_limit_is_refused_before_anything_is_written(
    backend: Backend,
) -> None:
    app = backend.app(payload_bucket=BUCKET, payload_limit=MIB)
    app.task(lambda ctx, payload: None, name="large.nothing")
    with pytest.raises(PayloadTooLarge, match="the limit is 1048576 bytes"):
        app.trigger("large.nothing", blob(2 * MIB))

    assert app.runs.list().runs == []
    if isinstance(app.objects, InMemoryObjects):
        assert app.objects.keys() == []


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"payload_limit": 200 * KIB}, "from 1 to 131072 without a payload_bucket"),
        ({"payload_bucket": "Bad_Bucket"}, "is not an S3 bucket name"),
        ({"payload_bucket": "ok-bucket", "payload_limit": 6 * 1024**3}, "with a payload_bucket"),
        ({"payload_bucket": "ok-bucket", "inline_limit": 0}, "inline_limit must be"),
        ({"payload_bucket": "ok-bucket", "inline_limit": 200 * KIB}, "inline_limit must be"),
    ],
)
def test_bad_value_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        in_memory_app(**settings)


def test_the_default_limit_follows_the_bucket() -> None:
    assert in_memory_app().config.value_limit == 64 * KIB
    assert in_memory_app(payload_bucket="ok-bucket").config.value_limit == 100 * MIB


def test_the_bucket_is_read_from_the_environment_and_a_bad_one_named() -> None:
    from runlane_sqs.core.config import RunlaneConfig  # noqa: PLC0415

    assert RunlaneConfig.from_env({"RUNLANE_PAYLOAD_BUCKET": "my-values"}).payload_bucket == (
        "my-values"
    )
    with pytest.raises(ConfigurationError, match="set by RUNLANE_PAYLOAD_BUCKET=My_Values"):
        RunlaneConfig.from_env({"RUNLANE_PAYLOAD_BUCKET": "My_Values"})


def test_a_write_whose_object_record_was_removed_after_its_pin_is_refused(
    app: Runlane, clock: ManualClock
) -> None:
    """A writer more than the pin late: the record (and object) went meanwhile, so the
    write that would reference them is refused, and nothing is stored."""
    run_id = new_run_id()
    place = ValuePlace(Holder.RUN, run_id, ValueField.PAYLOAD)
    kept = app.engine.values.seal(blob(100 * KIB, "late"), what="payload", place=place)
    clock.advance(PIN_DURATION + timedelta(seconds=1))
    assert app.maintenance.run_pass().jobs["objects"].acted == 1
    run, event = machine.new_run(
        run_id=run_id,
        environment=app.config.environment,
        task="large.echo",
        queue="default",
        payload=None,
        now=clock.now(),
        republish=app.config.republish,
    )

    with pytest.raises(StorageUnavailable, match="was removed after it was pinned"):
        app.store.create_run(run, event, kept.text)
    assert app.runs.list().runs == []


class LosesFirstResponse(InMemoryObjects):
    """Stores the first object, then answers as if the response were lost."""

    def __init__(self, bucket: str) -> None:
        super().__init__(bucket)
        self.lost = False

    def put(self, key: str, data: bytes) -> None:
        super().put(key, data)
        if not self.lost:
            self.lost = True
            raise StorageUnavailable("S3 PutObject: the connection closed before the response")


@ONLY_MEMORY
def test_a_lost_s3_response_and_a_duplicate_wakeup_leave_one_object_and_one_execution(
    backend: Backend, tasks: Tasks, worker_kind: WorkerKind
) -> None:
    objects = LosesFirstResponse(BUCKET)
    app = in_memory_app(payload_bucket=BUCKET, clock=backend.clock)
    app.rewire(store=app.store, transport=app.transport, clock=app.clock, objects=objects)
    tasks.register(app)
    payload = blob(100 * KIB, "retried")

    with pytest.raises(StorageUnavailable, match="before the response"):
        app.trigger("large.echo", payload, idempotency_key="order-7")
    run = app.trigger("large.echo", payload, idempotency_key="order-7")  # sent again
    again = app.trigger("large.echo", payload, idempotency_key="order-7")
    assert (again.id, again.created) == (run.id, False)
    app.publisher.publish_many([app.runs.get_stored(run.id)])  # a duplicate wakeup
    worker_kind.drain_all(app)

    assert tasks.calls == ["echo"]  # executed once
    payload_key = reference_of(app.runs.get_stored(run.id).payload).key
    result_key = reference_of(app.runs.get_stored(run.id).result).key
    assert sorted(objects.keys()) == sorted([payload_key, result_key])  # one object each
    records = app.store.object_records
    assert isinstance(records, DynamoObjectRecords)
    record = records.get(reference_of(app.runs.get_stored(run.id).payload).sha256)
    assert record is not None and record.holders == 1  # one reference
    assert app.runs.get(run.id).result["got"] == len(payload["blob"])


class UnavailableOnce(InMemoryObjects):
    """The ``nth`` request of one kind (``"put"`` or ``"get"``) fails as unavailable
    (after the SDK's own retries), as a throttled or unreachable S3 does; the rest work."""

    def __init__(self, bucket: str, kind: str, nth: int) -> None:
        super().__init__(bucket)
        self.kind, self.nth = kind, nth
        self.sent = 0

    def _count(self, kind: str) -> None:
        if kind == self.kind:
            self.sent += 1
            if self.sent == self.nth:
                raise StorageUnavailable(f"S3 {kind} failed: SlowDown")

    def put(self, key: str, data: bytes) -> None:
        self._count("put")
        super().put(key, data)

    def get(self, key: str, size: int) -> bytes | None:
        self._count("get")
        return super().get(key, size)


@ONLY_MEMORY
def test_a_large_result_whose_write_fails_once_is_kept_on_the_next_try(
    backend: Backend, tasks: Tasks, worker_kind: WorkerKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler returned: a moment of S3 (or of the object record's DynamoDB write)
    being unavailable must not turn its result into a failed attempt. Keeping the result
    is sent again within the budget of any request (runtime/budget.py). Found by the
    simulation (simulation/, docs/simulation.md)."""
    monkeypatch.setattr(budget, "BACKOFF", wait_none())
    objects = UnavailableOnce(BUCKET, "put", 2)  # the payload's write, then the result's
    app = in_memory_app(payload_bucket=BUCKET, clock=backend.clock)
    app.rewire(store=app.store, transport=app.transport, clock=app.clock, objects=objects)
    tasks.register(app)
    run = app.trigger("large.echo", blob(100 * KIB, "kept"))
    worker_kind.drain_all(app)
    assert objects.sent == 3, "the result's write never failed: the test proves nothing"
    done = app.runs.get(run.id)
    assert (done.status, done.failures, tasks.calls) == (RunStatus.SUCCEEDED, 0, ["echo"])
    assert done.result["got"] == 100 * KIB


@ONLY_MEMORY
def test_a_large_payload_whose_read_fails_once_is_read_on_the_next_try(
    backend: Backend, tasks: Tasks, worker_kind: WorkerKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the payload before the handler is entered is sent again within the budget
    of any request: a moment of S3 being unavailable is no failed attempt. Found by the
    simulation (simulation/, docs/simulation.md)."""
    monkeypatch.setattr(budget, "BACKOFF", wait_none())
    objects = UnavailableOnce(BUCKET, "get", 1)
    app = in_memory_app(payload_bucket=BUCKET, clock=backend.clock)
    app.rewire(store=app.store, transport=app.transport, clock=app.clock, objects=objects)
    tasks.register(app)
    run = app.trigger("large.echo", blob(100 * KIB, "read"))
    worker_kind.drain_all(app)
    assert objects.sent >= 2, "the payload's read never failed: the test proves nothing"
    done = app.runs.get(run.id)
    assert (done.status, done.failures, tasks.calls) == (RunStatus.SUCCEEDED, 0, ["echo"])


@ONLY_MEMORY
def test_a_large_wait_result_whose_read_fails_once_is_read_on_the_next_try(
    backend: Backend, tasks: Tasks, worker_kind: WorkerKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wait's result kept in the bucket (here a token's large value) is read again within
    its budget when S3 fails a moment: no failed attempt. Found by the simulation (`make
    simulate SEED=24 ARGS="--runs 300"`: a run waiting for another run)."""
    monkeypatch.setattr(budget, "BACKOFF", wait_none())
    objects = UnavailableOnce(BUCKET, "get", 0)
    app = in_memory_app(payload_bucket=BUCKET, clock=backend.clock)
    app.rewire(store=app.store, transport=app.transport, clock=app.clock, objects=objects)
    tasks.register(app)
    token = app.tokens.create()
    run = app.trigger("large.token", {"token": token.id})
    worker_kind.drain_all(app)  # waits for the token
    app.tokens.complete(token.id, blob(100 * KIB, "decided"))
    objects.nth = objects.sent + 1  # the next read (the handler's, of its wait's result) fails
    worker_kind.drain_all(app)
    assert objects.sent >= objects.nth, "the wait result was never read: the test proves nothing"
    done = app.runs.get(run.id)
    assert (done.status, done.failures, done.result) == (
        RunStatus.SUCCEEDED,
        0,
        {"token_size": len(blob(100 * KIB, "decided")["blob"])},
    )


def test_a_trigger_that_finds_its_key_held_returns_the_run_with_its_values(
    app: Runlane, worker_kind: WorkerKind
) -> None:
    first = app.trigger("large.echo", blob(100 * KIB, "keyed"), idempotency_key="k-1")
    worker_kind.drain_all(app)

    again = app.trigger("large.echo", blob(100 * KIB, "keyed"), idempotency_key="k-1")

    assert (again.id, again.created) == (first.id, False)
    assert again.payload == blob(100 * KIB, "keyed")
    assert again.result == {"got": 100 * KIB, "back": blob(100 * KIB, "keyed")["blob"][::-1]}


def test_an_object_s3_refuses_to_read_is_a_clear_unreadable_value() -> None:
    client = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    stubber = Stubber(client)
    stubber.add_client_error("get_object", service_error_code="AccessDenied", http_status_code=403)
    with stubber, pytest.raises(ObjectUnreadable, match=r"the object is missing .*s3:ListBucket"):
        S3Objects(client, BUCKET).get("test/values/abc/0", 10)


class RefusesReads(InMemoryObjects):
    def get(self, key: str, size: int) -> bytes | None:
        raise ObjectUnreadable(f"S3 refused GetObject of {key} (AccessDenied)")


@ONLY_MEMORY
def test_a_value_whose_object_the_store_refuses_fails_its_reader_clearly(
    backend: Backend, tasks: Tasks
) -> None:
    app = in_memory_app(payload_bucket=BUCKET, clock=backend.clock)
    app.rewire(
        store=app.store, transport=app.transport, clock=app.clock, objects=RefusesReads(BUCKET)
    )
    tasks.register(app)
    run = app.trigger("large.echo", blob(100 * KIB))

    with pytest.raises(ValueUnreadable, match=r"payload of run \w+ cannot be read: S3 refused"):
        app.runs.get(run.id)


# references that point elsewhere --------------------------------------------------------


def environment_beside(backend: Backend, app: Runlane, name: str, tasks: Tasks) -> Runlane:
    """An app of environment ``name`` on ``app``'s table and payload bucket."""
    if backend.real:
        return backend.app(
            environment=name, queue_prefix=None, payload_bucket=BUCKET, register=tasks.register
        )
    assert isinstance(app.store, InMemoryRunStore)
    other = Runlane(
        environment=name,
        clock=backend.clock,
        store=InMemoryRunStore(name, table=app.config.table, dynamodb=app.store.dynamodb),
        transport=InMemoryTransport(backend.clock),
        objects=app.objects,
        payload_bucket=BUCKET,
    )
    tasks.register(other)
    return other


def point_payload_at(backend: Backend, app: Runlane, run_id: str, reference: Reference) -> None:
    """Make run ``run_id``'s stored payload a reference to ``reference``, as someone who
    can write the run table would."""
    text = Sealed(reference).text
    backend.write_attribute(app, run_key(app.config.environment, run_id), "payload", text)


def test_a_reference_outside_its_environments_values_is_refused(
    backend: Backend, app: Runlane, tasks: Tasks, worker_kind: WorkerKind
) -> None:
    """A reference is read only at a key of the reader's environment's values whose hash
    part is the reference's own: another environment's object, or any other object of
    the bucket (given its hash and size), is never read for a run."""
    mine, other = app.config.environment, environment_beside(backend, app, "other", tasks)
    theirs = other.trigger("large.echo", blob(100 * KIB, "theirs"))
    their_reference = reference_of(other.runs.get_stored(theirs.id).payload)
    assert app.objects is not None
    secret = b'{"database_password":"hunter2"}'
    app.objects.put("config/app-secrets.json", secret)
    secret_reference = Reference(
        BUCKET, "config/app-secrets.json", len(secret), hashlib.sha256(secret).hexdigest()
    )
    elsewhere = {
        "another environment's object": their_reference,
        "another object of the bucket": secret_reference,
    }
    runs = {}
    for what, reference in elsewhere.items():
        run = app.trigger("large.echo", blob(100 * KIB, what))
        point_payload_at(backend, app, run.id, reference)
        runs[what] = run
        with pytest.raises(ValueUnreadable, match=f"not an object of environment '{mine}'"):
            app.runs.get(run.id)

    worker_kind.drain_all(app)
    assert tasks.calls == []  # no handler saw another environment's value, or a secret
    for run in runs.values():
        failed = app.runs.get_stored(run.id)
        assert failed.status is RunStatus.FAILED
        assert failed.failure is not None and failed.failure.retryable is False
        assert f"not an object of environment '{mine}'" in failed.failure.message
    assert other.runs.get(theirs.id).payload == blob(100 * KIB, "theirs")  # still theirs


class CountingBody(io.BytesIO):
    """An object's body that counts the bytes read from it."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.taken = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.taken += len(data)
        return data


def test_s3_reads_no_byte_of_an_object_whose_length_is_not_the_references() -> None:
    client = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    stubber = Stubber(client)
    body = CountingBody(b"x" * (8 * MIB))
    stubber.add_response(
        "get_object",
        {"Body": StreamingBody(body, 8 * MIB), "ContentLength": 8 * MIB},
        {"Bucket": BUCKET, "Key": "test/values/abc/0"},
    )
    with stubber, pytest.raises(ObjectUnreadable, match=f"holds {8 * MIB} bytes, not the 10 "):
        S3Objects(client, BUCKET).get("test/values/abc/0", 10)
    assert body.taken == 0


@ONLY_AWS
def test_an_object_of_another_size_is_refused_before_it_is_downloaded(
    backend: Backend, app: Runlane, worker_kind: WorkerKind
) -> None:
    """An object overwritten by someone with S3 write access alone, or a reference that
    understates its object's size, is refused from the object's length, before its
    bytes are read: reading it costs the reader no more memory than the reference says
    (measured: this process's peak allocation while the operator API reads both; it was
    8.5 MiB when the reader downloaded them)."""
    assert app.objects is not None
    overwritten = app.trigger("large.echo", blob(100 * KIB, "overwritten"))
    reference = reference_of(app.runs.get_stored(overwritten.id).payload)
    app.objects.put(reference.key, b"x" * (8 * MIB))
    understated = app.trigger("large.echo", blob(100 * KIB, "understated"))
    real = reference_of(app.runs.get_stored(understated.id).payload)
    app.objects.put(real.key, b"y" * (8 * MIB))
    point_payload_at(backend, app, understated.id, replace(real, size=10))

    refusals: list[str] = []
    tracemalloc.start()
    try:
        for run in (overwritten, understated):
            with pytest.raises(ValueUnreadable) as raised:
                app.runs.get(run.id)
            refusals.append(str(raised.value))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    worker_kind.drain_all(app)  # the worker reads them the same way (engine.values)

    assert peak < MIB, f"the reader allocated {peak} bytes at its peak"
    assert f"holds {8 * MIB} bytes, not the {reference.size} its" in refusals[0]
    assert f"holds {8 * MIB} bytes, not the 10 its" in refusals[1]
    for run in (overwritten, understated):
        failed = app.runs.get_stored(run.id)
        assert failed.status is RunStatus.FAILED
        assert failed.failure is not None and f"holds {8 * MIB} bytes" in failed.failure.message
