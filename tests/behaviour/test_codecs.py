"""Codecs, on every backend and with both workers (docs/payloads.md, "Codecs").

``Runlane(codec=...)`` encodes every stored value (payload, result, steps' and waits'
results, tokens' values) with a chain of codecs: records keep an envelope naming them,
never the JSON, and every reader (worker, operator API) decodes through the app's
codecs. A value a reader cannot decode (a codec it lacks, another KMS key, changed bytes)
is ``ValueUnreadable`` naming the codec; an attempt that meets one fails without retry.
A codec that fails to encode is a ``CodecError`` before anything is written.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config

from runlane_sqs import (
    CodecError,
    ConfigurationError,
    Runlane,
    RunStatus,
    Schedule,
    TaskContext,
    ValueUnreadable,
)
from runlane_sqs.codecs import Gzip, KmsEncryption, Zstd
from runlane_sqs.core.values import Sealed
from runlane_sqs.testing import in_memory_app
from tests.backends import ONLY_AWS, Backend
from tests.behaviour.worker_support import second_app
from tests.workers import WorkerKind

MARKER = "plaintext-marker-7f3a"
"""Text of every payload here: found nowhere in DynamoDB, SQS or S3 when encrypted."""
BUCKET = "runlane-test-codec-values"


def register(app: Runlane) -> None:
    @app.task(name="codec.echo")
    def echo(ctx: TaskContext, payload: Any) -> Any:
        remembered = ctx.step("remember", lambda: {"note": payload["note"]})
        return {"echo": payload, "step": remembered}


def payload(size: int = 100) -> dict[str, Any]:
    return {"note": f"{MARKER} " + "abc " * (size // 4)}


HOURLY = Schedule.every("codec.hourly", timedelta(hours=1), payload=payload())


def with_schedules(*schedules: Schedule) -> Any:
    """:func:`register`, and a task that ``schedules`` trigger."""

    def add(app: Runlane) -> None:
        register(app)

        @app.task(name="codec.scheduled", schedules=list(schedules))
        def scheduled(ctx: TaskContext, payload: Any) -> Any:
            return {"echo": payload}

    return add


def beside(backend: Backend, app: Runlane, add: Any = register, **options: Any) -> Runlane:
    """Another deploy over the same runs and queues as ``app``, registering with ``add``,
    with ``options``."""
    return second_app(backend, app, add, **options)


def sealed(value: Any) -> Sealed:
    assert isinstance(value, Sealed), f"expected an envelope, found {type(value).__name__}"
    return value


def test_a_gzip_chain_keeps_envelopes_and_every_reader_decodes(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    app = backend.app(register=register, codec=Gzip())
    run = app.trigger("codec.echo", payload())
    assert worker_kind.drain(app) == 1

    done = app.runs.get(run.id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.result == {"echo": payload(), "step": {"note": payload()["note"]}}
    stored = app.runs.get_stored(run.id)
    assert sealed(stored.payload).codecs == ("gzip",)
    assert sealed(stored.result).codecs == ("gzip",)
    assert sealed(stored.steps["remember"]).data is not None  # small: kept in the item


def hex_text(size: int) -> str:
    """Text that compresses to about half: hex digits of a hash chain."""
    chunks: list[str] = []
    digest = b"seed"
    while len(chunks) * 64 < size:
        digest = hashlib.sha256(digest).digest()
        chunks.append(digest.hex())
    return "".join(chunks)[:size]


def test_a_large_value_is_compressed_before_it_goes_to_the_bucket(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    app = backend.app(register=register, codec=Zstd(), payload_bucket=BUCKET)
    big = {"note": MARKER + hex_text(2_000_000)}
    run = app.trigger("codec.echo", big)
    assert worker_kind.drain(app) == 1

    assert app.runs.get(run.id).result["echo"] == big
    kept = sealed(app.runs.get_stored(run.id).payload)
    assert kept.reference is not None and kept.codecs == ("zstd",)
    assert 32 * 1024 < kept.reference.size < 1_200_000  # compressed, then kept in S3


def test_a_reader_without_the_codec_says_which_it_lacks(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    writer = backend.app(register=register, codec=[Gzip(), Zstd()])
    run = writer.trigger("codec.echo", payload())
    reader = beside(backend, writer, codec=Gzip())  # one codec short

    assert worker_kind.drain(reader) == 1

    failed = reader.runs.get_stored(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None and failed.failure.retryable is False
    assert failed.failure.type == "runlane_sqs.errors.ValueUnreadable"
    assert "encoded by codec 'zstd', which this app does not have" in failed.failure.message
    with pytest.raises(ValueUnreadable, match="codec 'zstd'"):
        reader.runs.get(run.id)
    assert writer.runs.get(run.id).payload == payload()


class Refuses:
    """A codec whose service refuses every value."""

    name = "refuses"

    def encode(self, data: bytes) -> bytes:
        raise RuntimeError("the key service said no")

    def decode(self, data: bytes) -> bytes:
        return data


def test_a_codec_that_fails_is_a_clear_error_before_anything_is_written(
    backend: Backend,
) -> None:
    app = backend.app(register=register, codec=[Gzip(), Refuses()])
    with pytest.raises(CodecError, match="codec 'refuses' could not encode payload: the key"):
        app.trigger("codec.echo", payload())
    assert app.runs.list().runs == []


@pytest.mark.parametrize(
    ("codec", "message"),
    [
        ([Gzip(), Gzip()], "codec names must differ"),
        (object(), "is not a codec"),
    ],
)
def test_a_bad_codec_chain_is_refused(codec: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        in_memory_app(codec=codec)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Gzip(level=0), "Gzip level"),
        (lambda: Zstd(level=30), "Zstd level"),
        (lambda: KmsEncryption(""), "needs a KMS key"),
        (lambda: KmsEncryption("alias/x", data_key_max_uses=0), "data_key_max_uses"),
    ],
)
def test_bad_codec_settings_are_refused(make: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make()


# encryption, against the emulator's KMS ----------------------------------------------


@pytest.fixture
def kms(backend: Backend) -> Iterator[Any]:
    backend.request.getfixturevalue("backend_env")  # the emulator's endpoint and region
    client = boto3.client("kms")
    yield client
    client.close()


def key_of(kms: Any) -> str:
    return str(kms.create_key(Description="runlane test")["KeyMetadata"]["Arn"])


def everything_stored(backend: Backend, app: Runlane) -> bytes:
    """Every byte DynamoDB, SQS (without taking a message) and S3 hold for ``app``."""
    dynamodb = backend.request.getfixturevalue("dynamodb")
    sqs = backend.request.getfixturevalue("sqs")
    items = dynamodb.scan(TableName=app.config.table)["Items"]
    found = [json.dumps(items).encode()]
    url = sqs.get_queue_url(QueueName=app.config.sqs_queue_name("default"))["QueueUrl"]
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    found += [m["Body"].encode() for m in messages.get("Messages", [])]
    s3 = boto3.client("s3", config=Config(s3={"addressing_style": "path"}))
    for listed in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        found.append(s3.get_object(Bucket=BUCKET, Key=listed["Key"])["Body"].read())
    s3.close()
    return b"\n".join(found)


def plain_forms(text: str) -> list[bytes]:
    """``text`` as it would show in any store: as is, and base64-encoded at each offset."""
    raw = text.encode()
    return [raw] + [base64.b64encode(raw[i:])[4:-4] for i in range(3)]


@ONLY_AWS
def test_encrypted_values_are_opaque_in_dynamodb_sqs_and_s3(
    backend: Backend, worker_kind: WorkerKind, kms: Any
) -> None:
    codec = [Gzip(), KmsEncryption(key_of(kms), client=kms)]
    app = backend.app(register=with_schedules(HOURLY), codec=codec, payload_bucket=BUCKET)
    small, large = payload(), {"note": MARKER + " " + "x" * 300_000}
    runs = [app.trigger("codec.echo", small), app.trigger("codec.echo", large)]
    token = app.tokens.create(metadata={"note": MARKER})
    app.maintenance.run_pass()  # stores the schedule (and may make its first run)
    scheduled = len(app.runs.list(schedule=HOURLY.id).runs)

    stored_before = everything_stored(backend, app)
    assert worker_kind.drain(app) == 2 + scheduled
    stored_after = everything_stored(backend, app)

    for blob in (stored_before, stored_after):
        assert not any(form in blob for form in plain_forms(MARKER))
    assert [app.runs.get(r.id).result["echo"] for r in runs] == [small, large]
    assert app.tokens.get(token.id).metadata == {"note": MARKER}
    assert app.schedules.get(HOURLY.id).schedule.payload == payload()


@ONLY_AWS
def test_another_key_or_changed_bytes_fail_loudly(
    backend: Backend, kms: Any, worker_kind: WorkerKind
) -> None:
    app = backend.app(register=register, codec=KmsEncryption(key_of(kms), client=kms))
    run = app.trigger("codec.echo", payload())
    other = beside(backend, app, codec=KmsEncryption(key_of(kms), client=kms))

    with pytest.raises(ValueUnreadable, match="codec 'kms' could not decode it"):
        other.runs.get(run.id)

    dynamodb = backend.request.getfixturevalue("dynamodb")
    key = {"pk": {"S": f"RUN#{app.config.environment}#{run.id}"}, "sk": {"S": "RUN"}}
    item = dynamodb.get_item(TableName=app.config.table, Key=key)["Item"]
    envelope = json.loads(item["payload"]["S"][1:])
    data = bytearray(base64.b64decode(envelope["data"]))
    data[-1] ^= 1  # one bit of the tag
    envelope["data"] = base64.b64encode(bytes(data)).decode()
    changed = "~" + json.dumps(envelope, separators=(",", ":"))
    dynamodb.update_item(
        TableName=app.config.table,
        Key=key,
        UpdateExpression="SET payload = :p",
        ExpressionAttributeValues={":p": {"S": changed}},
    )
    with pytest.raises(ValueUnreadable, match=r"codec 'kms' could not decode it .*tag"):
        app.runs.get(run.id)
    assert worker_kind.drain(app) == 1
    failed = app.runs.get_stored(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None and "codec 'kms'" in failed.failure.message


def test_a_groups_items_are_kept_encoded_and_reach_their_children(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    app = backend.app(register=register, codec=Gzip(), payload_bucket=BUCKET)

    @app.task(name="codec.parent")
    def parent(ctx: TaskContext, items: Any) -> Any:
        results = ctx.map("codec.echo", items)
        return [r["echo"]["note"][:24] for r in results.results()]

    items = [payload(), {"note": MARKER + hex_text(120_000)}]  # the second: kept in S3
    run = app.trigger("codec.parent", items)
    worker_kind.drain_all(app)

    assert app.runs.get(run.id).result == [item["note"][:24] for item in items]
    if backend.real:  # nothing in the table is the plain JSON of a value
        dynamodb = backend.request.getfixturevalue("dynamodb")
        scanned = json.dumps(dynamodb.scan(TableName=app.config.table)["Items"])
        assert MARKER not in scanned


def versions(app: Runlane) -> dict[str, int]:
    return {state.id: state.version for state in app.schedules.list()}


def test_a_schedules_payload_is_kept_encoded_and_its_runs_open_it(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    app = backend.app(register=with_schedules(HOURLY), codec=Gzip())
    app.maintenance.run_pass()  # stores the schedule

    [stored] = app.schedules.list()
    assert sealed(stored.schedule.payload).codecs == ("gzip",)
    assert app.schedules.get(HOURLY.id).schedule.payload == payload()
    paused = app.schedules.pause(HOURLY.id)  # written again, still encoded
    assert paused.schedule.payload == payload()
    assert sealed(app.schedules.list()[0].schedule.payload).codecs == ("gzip",)
    app.schedules.resume(HOURLY.id)
    if backend.real:  # the schedule's item keeps no plain JSON of its payload
        dynamodb = backend.request.getfixturevalue("dynamodb")
        assert MARKER not in json.dumps(dynamodb.scan(TableName=app.config.table)["Items"])

    backend.clock.advance(timedelta(hours=1))
    app.maintenance.run_pass()  # the occurrences' runs
    runs = app.runs.list(schedule=HOURLY.id).runs
    assert runs and worker_kind.drain(app) == len(runs)
    for run in runs:
        assert app.runs.get(run.id).result == {"echo": payload()}
        assert sealed(app.runs.get_stored(run.id).payload).codecs == ("gzip",)


def test_a_deploy_stores_schedules_again_only_when_their_payload_or_codecs_change(
    backend: Backend,
) -> None:
    """A stored encoding of an unchanged payload (new bytes at every encryption) does not
    count as a change; adding or dropping codecs stores every payload the new way."""
    daily = Schedule.every("codec.daily", timedelta(days=1), payload={"n": 1})
    plain = backend.app(register=with_schedules(HOURLY, daily))
    plain.maintenance.run_pass()
    assert versions(plain) == {"codec.daily": 1, "codec.hourly": 1}

    encoded = beside(backend, plain, with_schedules(HOURLY, daily), codec=Gzip())
    encoded.maintenance.run_pass()  # the codecs changed: both stored encoded
    assert versions(encoded) == {"codec.daily": 2, "codec.hourly": 2}
    assert all(isinstance(s.schedule.payload, Sealed) for s in encoded.schedules.list())

    changed = Schedule.every("codec.daily", timedelta(days=1), payload={"n": 2})
    again = beside(backend, plain, with_schedules(HOURLY, changed), codec=Gzip())
    again.maintenance.run_pass()  # only the changed one is written
    assert versions(again) == {"codec.daily": 3, "codec.hourly": 2}
    assert again.schedules.get("codec.daily").schedule.payload == {"n": 2}

    dropped = beside(backend, plain, with_schedules(HOURLY, changed))
    dropped.maintenance.run_pass()  # without codecs: both plain again
    assert versions(dropped) == {"codec.daily": 4, "codec.hourly": 3}
    assert [s.schedule.payload for s in dropped.schedules.list()] == [{"n": 2}, payload()]
