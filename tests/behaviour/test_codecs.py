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
import gzip
import hashlib
import json
import os
import struct
import tracemalloc
import zlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
import zstandard
from botocore.config import Config
from botocore.exceptions import ClientError
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from runlane_sqs import (
    Batch,
    CodecError,
    ConfigurationError,
    Debounce,
    Runlane,
    RunStatus,
    Schedule,
    TaskContext,
    ValueUnreadable,
)
from runlane_sqs.adapters.dynamodb.keys import run_key
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.codecs import Gzip, KmsEncryption, Zstd
from runlane_sqs.core.values import Holder, Sealed, ValueField, ValuePlace
from runlane_sqs.ports.codecs import Binding
from runlane_sqs.testing import InMemoryRunStore, in_memory_app
from tests.backends import ONLY_AWS, ONLY_MEMORY, Backend
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

    def encode(self, data: bytes, binding: Binding) -> bytes:
        raise RuntimeError("the key service said no")

    def decode(self, data: bytes, binding: Binding, limit: int) -> bytes:
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


# values that decode past the limit -------------------------------------------------------

MIB = 1024 * 1024
BOMB_BYTES = 64 * MIB
"""What each bomb below decodes to: a thousand times the default payload_limit."""


def gzip_of_zeros(size: int) -> bytes:
    """``size`` zero bytes in a gzip frame, made a mebibyte at a time."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    made = [deflate.compress(bytes(MIB)) for _ in range(size // MIB)]
    return b"".join([*made, deflate.flush()])


def zstd_of_zeros(size: int, window_log: int) -> bytes:
    """``size`` zero bytes in one zstd frame whose window is ``2**window_log`` bytes."""
    params = zstandard.ZstdCompressionParameters.from_level(19, window_log=window_log)
    return bytes(zstandard.ZstdCompressor(compression_params=params).compress(bytes(size)))


BOMBS: dict[str, tuple[Any, tuple[str, ...], Any, str]] = {
    "gzip twice over": (
        Gzip,
        ("gzip", "gzip"),
        lambda: gzip.compress(gzip_of_zeros(BOMB_BYTES)),
        "its codecs (gzip, gzip) are not this app's chain (gzip)",
    ),
    "gzip": (Gzip, ("gzip",), lambda: gzip_of_zeros(BOMB_BYTES), "decodes to more than"),
    "zstd": (Zstd, ("zstd",), lambda: zstd_of_zeros(BOMB_BYTES, 16), "decodes to more than"),
    "zstd with a large window": (
        Zstd,
        ("zstd",),
        lambda: zstd_of_zeros(BOMB_BYTES, 23),
        "its frame asks for a window of 8388608 bytes",
    ),
}
"""The app's codec, the codecs a forged envelope names, its bytes, and why it is refused."""


@pytest.mark.parametrize("bomb", list(BOMBS))
def test_a_value_that_decodes_past_the_limit_fails_its_run_without_the_memory(
    backend: Backend, bomb: str
) -> None:
    """A run item's value forged to decode to 64 MiB (an 831-byte envelope naming gzip
    twice, a 65 KB gzip or a 2 KB zstd frame) is decoded no further than the app's
    payload_limit (64 KiB here) plus one byte: the run page and the worker refuse it,
    and the run fails without retry, saying why. Measured: this process's peak
    allocation while both read it stays within the limit and a small constant."""
    codec, codecs, made, reason = BOMBS[bomb]
    app = backend.app(register=register, codec=codec())
    worker = app.worker(concurrency=1)
    warm = app.trigger("codec.echo", payload())  # the path once, its imports and caches
    assert worker.drain() == 1 and app.runs.get(warm.id).status is RunStatus.SUCCEEDED
    run = app.trigger("codec.echo", payload())
    forged = Sealed(codecs=codecs, data=made()).text
    backend.write_attribute(app, run_key(app.config.environment, run.id), "payload", forged)

    tracemalloc.start()
    try:
        with pytest.raises(ValueUnreadable) as raised:
            app.runs.get(run.id)
        assert worker.drain() == 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    limit = app.config.value_limit
    assert peak < limit + BOMB_SLACK_BYTES, f"{peak} bytes at the peak, the limit {limit}"
    failed = app.runs.get_stored(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None and failed.failure.retryable is False
    assert failed.failure.type == "runlane_sqs.errors.ValueUnreadable"
    assert reason in str(raised.value)
    assert reason in failed.failure.message


BOMB_SLACK_BYTES = 1 * MIB
BINDING = Binding("test", ValuePlace(Holder.RUN, "0" * 32, ValueField.PAYLOAD))
"""A binding for a codec called by hand (compression ignores it)."""
"""What reading and failing a run allocates beside the value: requests, events, logs."""


@pytest.mark.parametrize("bomb", ["gzip", "zstd"])
def test_a_codec_decodes_no_further_than_its_limit(bomb: str) -> None:
    """Measured around one decode: the peak allocation is the limit and a constant (the
    chunk being decoded, the decompressor's state), whatever the value decodes to."""
    codec, _, made, _ = BOMBS[bomb]
    data, limit = made(), 64 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=f"decodes to more than {limit} bytes"):
            codec().decode(data, BINDING, limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < limit + 128 * 1024, f"{peak} bytes at the peak"
    assert codec().decode(codec().encode(b"x" * limit, BINDING), BINDING, limit) == b"x" * limit


# encrypted values open only where they were sealed ---------------------------------------


class FakeKms:
    """KMS as ``KmsEncryption`` calls it, in memory: a data key opens only under the key
    and the encryption context it was made with (``InvalidCiphertextException``)."""

    def __init__(self) -> None:
        self.keys: dict[bytes, tuple[bytes, str, dict[str, str]]] = {}

    def generate_data_key(self, **request: Any) -> dict[str, bytes]:
        plaintext, blob = os.urandom(32), os.urandom(48)
        self.keys[blob] = (plaintext, request["KeyId"], dict(request["EncryptionContext"]))
        return {"Plaintext": plaintext, "CiphertextBlob": blob}

    def decrypt(self, **request: Any) -> dict[str, bytes]:
        found = self.keys.get(bytes(request["CiphertextBlob"]))
        if found is None or found[1:] != (request["KeyId"], request["EncryptionContext"]):
            error: Any = {"Error": {"Code": "InvalidCiphertextException", "Message": ""}}
            raise ClientError(error, "Decrypt")
        return {"Plaintext": found[0]}


@pytest.fixture
def any_kms(backend: Backend) -> Iterator[Any]:
    """A KMS client: the emulator's, or in memory :class:`FakeKms`."""
    if not backend.real:
        yield FakeKms()
        return
    backend.request.getfixturevalue("backend_env")
    client = boto3.client("kms")
    yield client
    client.close()


@pytest.fixture
def any_key(any_kms: Any) -> str:
    """A KMS key the test's apps share."""
    return "alias/runlane-test" if isinstance(any_kms, FakeKms) else key_of(any_kms)


def stored_text(backend: Backend, app: Runlane, run_id: str, name: str) -> str:
    """The text the run item's attribute ``name`` holds (a value's envelope)."""
    key = run_key(app.config.environment, run_id)
    item = backend.table(app).get_item(TableName=app.config.table, Key=key)["Item"]
    return str(item[name]["S"])


def paste(backend: Backend, app: Runlane, run_id: str, name: str, text: str) -> None:
    """Write ``text`` into the run item's attribute ``name``, behind the library's back."""
    backend.write_attribute(app, run_key(app.config.environment, run_id), name, text)


def encrypted(kms: Any, key: str, **options: Any) -> dict[str, Any]:
    """An app's options: ``options``, and values compressed then encrypted under ``key``."""
    return {"codec": [Zstd(), KmsEncryption(key, client=kms)], **options}


def test_an_encrypted_value_opens_only_in_the_run_and_field_it_was_sealed_for(
    backend: Backend, any_kms: Any, any_key: str, worker_kind: WorkerKind
) -> None:
    """Run X's ciphertext pasted into run Y, or into another field of X, fails the tag:
    the associated data names the environment, the record and the field."""
    app = backend.app(register=register, **encrypted(any_kms, any_key))
    x = app.trigger("codec.echo", {"note": "x's payload"})
    y = app.trigger("codec.echo", {"note": "y's payload"})
    assert worker_kind.drain(app, max_runs=1) == 1  # x: its result and step are sealed
    done = app.runs.get(x.id)
    assert done.status is RunStatus.SUCCEEDED

    paste(backend, app, y.id, "payload", stored_text(backend, app, x.id, "payload"))
    with pytest.raises(ValueUnreadable, match=r"payload of run \w+ cannot be read: codec 'kms'"):
        app.runs.get(y.id)
    paste(backend, app, x.id, "result", stored_text(backend, app, x.id, "payload"))
    with pytest.raises(ValueUnreadable, match=r"result of run \w+ cannot be read: codec 'kms'"):
        app.runs.get(x.id)

    assert worker_kind.drain(app) == 1
    failed = app.runs.get_stored(y.id)
    assert failed.status is RunStatus.FAILED and failed.result is None
    assert failed.failure is not None and failed.failure.retryable is False
    assert "does not open here" in failed.failure.message


def test_another_environments_encrypted_value_does_not_open_here(
    backend: Backend, any_kms: Any, any_key: str, worker_kind: WorkerKind
) -> None:
    """Environments sharing a KMS key: environment b's ciphertext pasted into an
    environment-a run is refused by KMS itself (the data key's encryption context names
    b), so a's worker neither runs it nor stores it as a's result."""
    app = backend.app(register=register, **encrypted(any_kms, any_key))
    theirs = beside_in(backend, app, "other", **encrypted(any_kms, any_key))
    their_run = theirs.trigger("codec.echo", {"note": "b's secret"})
    mine = app.trigger("codec.echo", {"note": "a's payload"})

    paste(backend, app, mine.id, "payload", stored_text(backend, theirs, their_run.id, "payload"))
    with pytest.raises(ValueUnreadable, match="codec 'kms' could not decode it"):
        app.runs.get(mine.id)
    assert worker_kind.drain(app) == 1
    failed = app.runs.get_stored(mine.id)
    assert failed.status is RunStatus.FAILED and failed.result is None
    assert theirs.runs.get(their_run.id).payload == {"note": "b's secret"}


def beside_in(backend: Backend, app: Runlane, environment: str, **options: Any) -> Runlane:
    """An app of ``environment`` on ``app``'s table, registering the codec tasks."""
    if backend.real:
        return backend.app(environment=environment, queue_prefix=None, register=register, **options)
    assert isinstance(app.store, InMemoryRunStore)
    other = Runlane(
        environment=environment,
        clock=backend.clock,
        store=InMemoryRunStore(environment, table=app.config.table, dynamodb=app.store.dynamodb),
        transport=InMemoryTransport(backend.clock),
        **options,
    )
    register(other)
    return other


def test_a_value_not_sealed_by_the_apps_whole_chain_is_refused(
    backend: Backend, any_kms: Any, any_key: str, worker_kind: WorkerKind
) -> None:
    """Whoever can write the table cannot replace an encrypted value by plain JSON or by
    an envelope of fewer codecs: an app with [Zstd, KmsEncryption] opens only values its
    whole chain sealed."""
    app = backend.app(register=register, **encrypted(any_kms, any_key))
    plain = app.trigger("codec.echo", {"note": "replaced by plain JSON"})
    paste(backend, app, plain.id, "payload", '{"note":"forged"}')
    fewer = app.trigger("codec.echo", {"note": "replaced by a zstd-only envelope"})
    zstd_only = Sealed(codecs=("zstd",), data=Zstd().encode(b'{"note":"forged"}', BINDING))
    paste(backend, app, fewer.id, "payload", zstd_only.text)

    with pytest.raises(ValueUnreadable, match=r"plain JSON, not sealed by this app's codecs"):
        app.runs.get(plain.id)
    with pytest.raises(ValueUnreadable, match=r"its codecs \(zstd\) are not this app's chain"):
        app.runs.get(fewer.id)
    worker_kind.drain_all(app)
    for run in (plain, fewer):
        failed = app.runs.get_stored(run.id)
        assert failed.status is RunStatus.FAILED and failed.result is None
        assert failed.failure is not None and failed.failure.retryable is False


def sealed_as_before(kms: Any, key: str, value: Any) -> str:
    """``value`` as an earlier version's ``[Zstd(), KmsEncryption(key)]`` sealed it: a data
    key of the context ``{"purpose": "runlane-sqs value"}`` alone, the associated data
    ``RLK1``, bound to no place."""
    made = kms.generate_data_key(
        KeyId=key, KeySpec="AES_256", EncryptionContext={"purpose": "runlane-sqs value"}
    )
    compressed = Zstd().encode(json.dumps(value).encode(), BINDING)
    nonce, wrapped = os.urandom(12), bytes(made["CiphertextBlob"])
    sealed = AESGCM(bytes(made["Plaintext"])).encrypt(nonce, compressed, b"RLK1")
    data = b"RLK1" + struct.pack(">H", len(wrapped)) + wrapped + nonce + sealed
    return Sealed(codecs=("zstd", "kms"), data=data).text


def test_values_written_before_open_only_with_open_legacy_values(
    backend: Backend, any_kms: Any, any_key: str, worker_kind: WorkerKind
) -> None:
    """Plain JSON, an envelope of part of the chain and a value the previous format
    sealed (unbound) are refused by default; ``open_legacy_values=True`` opens them for
    as long as they are migrated, and what the app writes meanwhile is sealed the new
    way (a rerun seals its payload again, for itself)."""
    strict = backend.app(register=register, **encrypted(any_kms, any_key))
    legacy = {
        "plain JSON": '{"note":"written without codecs"}',
        "zstd alone": Sealed(
            codecs=("zstd",), data=Zstd().encode(b'{"note":"written with zstd"}', BINDING)
        ).text,
        "the unbound format": sealed_as_before(any_kms, any_key, {"note": "sealed before"}),
    }
    runs = {}
    for what, text in legacy.items():
        runs[what] = strict.trigger("codec.echo", {"note": "replaced"})
        paste(backend, strict, runs[what].id, "payload", text)
    with pytest.raises(ValueUnreadable, match="open_legacy_values=True reads such values"):
        strict.runs.get(runs["the unbound format"].id)

    migrating = beside(backend, strict, **encrypted(any_kms, any_key, open_legacy_values=True))
    assert [migrating.runs.get(r.id).payload["note"] for r in runs.values()] == [
        "written without codecs",
        "written with zstd",
        "sealed before",
    ]
    assert worker_kind.drain(migrating) == 3
    for run in runs.values():
        assert migrating.runs.get(run.id).status is RunStatus.SUCCEEDED
        assert sealed(migrating.runs.get_stored(run.id).result).codecs == ("zstd", "kms")
        result = strict.engine.values.open_run(strict.runs.get_stored(run.id), payload=False)
        assert result.result["echo"] == migrating.runs.get(run.id).payload  # the new way
    rerun = migrating.runs.rerun(runs["plain JSON"].id)
    assert strict.runs.get(rerun.id).payload == {"note": "written without codecs"}


def register_journeys(app: Runlane) -> None:
    """Tasks that store every kind of value: steps, patches, waits of each kind (one of
    them timing out), groups with a callback and a chain, batches, debounces."""

    @app.task(name="bound.journey")
    def journey(ctx: TaskContext, payload: Any) -> Any:
        remembered = ctx.step("remember", lambda: {"n": payload["n"]})
        patched = ctx.patched("new-branch")
        signal = ctx.wait_for_signal(f"go-{payload['n']}")
        quiet = ctx.wait_for_signal(f"never-{payload['n']}", timeout=timedelta(minutes=1))
        decided = ctx.wait_for_token(payload["token"])
        other = ctx.wait_for_run(payload["other"])
        squares = ctx.map("bound.square", [{"n": n} for n in range(3)])
        return {
            "step": remembered,
            "patched": patched,
            "signal": signal.payload,
            "quiet": quiet.status,
            "token": decided.value,
            "other": other.result,
            "squares": list(squares.results()),
        }

    @app.task(name="bound.square")
    def square(ctx: TaskContext, payload: Any) -> Any:
        return payload["n"] ** 2

    @app.task(name="bound.double")
    def double(ctx: TaskContext, payload: Any) -> Any:
        return payload * 2

    @app.task(name="bound.batch", batch=Batch(size=3, max_age=60))
    def batch(ctx: TaskContext, items: Any) -> Any:
        return [item["n"] for item in items]

    @app.task(name="bound.debounced", debounce=Debounce(quiet=5, key=lambda p: "k"))
    def debounced(ctx: TaskContext, payload: Any) -> Any:
        return payload

    @app.task(
        name="bound.merged",
        debounce=Debounce(quiet=5, key=lambda p: "k", merge=lambda old, new: old + new),
    )
    def merged(ctx: TaskContext, payload: Any) -> Any:
        return payload


def settle(app: Runlane, backend: Backend) -> None:
    """Run everything there is to run, maintenance included, moving time on."""
    for _ in range(12):
        app.worker(concurrency=1).drain()
        app.maintenance.run_pass()
        backend.clock.advance(timedelta(seconds=61))


def stored_values(app: Runlane) -> list[Any]:
    """Every value of every run of ``app`` as stored."""
    found: list[Any] = []
    assert isinstance(app.store, InMemoryRunStore)
    for stored in app.store.all_runs():
        payload = stored.payload if isinstance(stored.payload, list) else [stored.payload]
        found += [*payload, stored.result, *stored.steps.values(), *stored.wait_results.values()]
    return found


@ONLY_MEMORY
def test_every_kind_of_value_is_sealed_for_its_place_and_opens_there(
    backend: Backend, any_kms: Any, any_key: str
) -> None:
    """With an authenticating codec, each value a run, token, schedule or group keeps is
    sealed for its own place, and opened at that place: payloads (a trigger's, a
    group's child's and callback's, a chain's next, a batch's items appended to the run
    a trigger found, a debounce's collapsed and merged payloads, a schedule's, a rerun's,
    a transaction's), results, steps, patches and the results of every kind of wait."""
    hourly = Schedule.every("bound.hourly", timedelta(hours=1), payload={"note": "hourly"})
    app = backend.app(register=with_schedules(hourly), **encrypted(any_kms, any_key))
    register_journeys(app)
    token = app.tokens.create(metadata={"for": "journey"})
    other = app.trigger("codec.echo", {"note": "the other"})
    journey = app.trigger("bound.journey", {"n": 7, "token": token.id, "other": other.id})
    app.worker(concurrency=1).drain()
    app.signals.send("go-7", {"said": "go"})
    settle(app, backend)
    app.tokens.complete(token.id, {"decided": "yes"})
    settle(app, backend)
    group = app.group(
        [("bound.square", {"n": n}) for n in range(2)], then=("codec.echo", payload())
    )
    chain = app.chain(("bound.square", {"n": 3}), "bound.double")
    batch = [app.trigger("bound.batch", {"n": n}) for n in range(3)]
    debounced = [app.trigger("bound.debounced", {"v": n}) for n in range(2)]
    merged = [app.trigger("bound.merged", [n]) for n in range(2)]
    with app.transaction() as tx:
        in_tx = tx.trigger("codec.echo", payload())
    settle(app, backend)
    rerun = app.runs.rerun(journey.id)
    app.worker(concurrency=1).drain()
    app.signals.send("go-7", {"said": "again"})
    settle(app, backend)

    done = app.runs.get(journey.id)
    assert done.status is RunStatus.SUCCEEDED, done.failure
    assert done.result == {
        "step": {"n": 7},
        "patched": True,
        "signal": {"said": "go"},
        "quiet": "timed_out",
        "token": {"decided": "yes"},
        "other": {"echo": {"note": "the other"}, "step": {"note": "the other"}},
        "squares": [0, 1, 4],
    }
    assert app.runs.get(rerun.id).status is RunStatus.SUCCEEDED
    assert app.tokens.get(token.id).metadata == {"for": "journey"}
    assert app.runs.get(batch[0].id).result == [0, 1, 2]
    assert app.runs.get(debounced[0].id).result == {"v": 1}
    assert app.runs.get(merged[0].id).result == [0, 1]
    assert app.runs.get(in_tx.id).status is RunStatus.SUCCEEDED
    assert app.store.groups.get_group(group.id).status.value == "succeeded"
    assert app.runs.list(schedule=hourly.id).runs
    assert isinstance(app.store, InMemoryRunStore)
    assert all(run.status is RunStatus.SUCCEEDED for run in app.store.all_runs())
    plain = [v for v in stored_values(app) if v is not None and not isinstance(v, Sealed)]
    assert plain == [{"status": "timed_out"}] * 2  # the library's own mark, no value
    last = app.runs.list(task="bound.double").runs
    assert [run.status for run in last] == [RunStatus.SUCCEEDED] and chain is not None
