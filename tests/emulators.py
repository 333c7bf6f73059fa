"""Emulator fixtures and helpers: one backend per session, reset before each test.

The backend is the embedded moto server, or with ``RUNLANE_TEST_BACKEND=aws-local``
Amazon DynamoDB Local plus LocalStack's SQS (see ``tests/aws_local.py`` and
``make test-aws-local``).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import boto3
import pytest

from runlane_sqs import Runlane
from runlane_sqs.core.clock import Clock
from runlane_sqs.local import MotoServer
from tests.aws_local import AWS_LOCAL, BACKEND_VARIABLE, AwsLocal, AwsLocalBackend

REPO_ROOT = Path(__file__).resolve().parents[1]


TEST_BACKEND = os.environ.get(BACKEND_VARIABLE, "moto")
if TEST_BACKEND not in ("moto", AWS_LOCAL):
    raise pytest.UsageError(f"{BACKEND_VARIABLE} must be 'moto' or '{AWS_LOCAL}'")


class Backend(Protocol):
    def environment(self) -> dict[str, str]: ...

    def reset(self) -> None: ...


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """The embedded moto server. Request it directly only in tests of moto itself:
    they are skipped on the other backend."""
    if TEST_BACKEND != "moto":
        pytest.skip(f"tests the embedded moto server, not used with {BACKEND_VARIABLE}=aws-local")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with MotoServer(check_signatures=True) as server:
        yield server


@pytest.fixture(scope="session")
def session_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """The session's backend: moto, or DynamoDB Local + LocalStack (started here unless
    ``RUNLANE_TEST_DYNAMODB_ENDPOINT`` and ``RUNLANE_TEST_SQS_ENDPOINT`` name running ones:
    each pytest-xdist worker of ``make test-aws-local`` starts a pair of its own)."""
    if TEST_BACKEND == "moto":
        yield request.getfixturevalue("moto_server")
        return
    external = AwsLocalBackend.from_env()
    if external is not None:
        yield external
        return
    with AwsLocal(die_with_parent=True) as emulators:
        yield emulators


@pytest.fixture
def backend_env(session_backend: Backend, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment variables that point boto3 at a freshly reset backend."""
    session_backend.reset()
    env = session_backend.environment()
    env["RUNLANE_TABLE"] = f"runlane-{uuid.uuid4().hex[:8]}"
    env["RUNLANE_ENVIRONMENT"] = "test"
    if TEST_BACKEND != "moto":
        # SQS refuses to recreate a queue name deleted in the last 60 s: fresh names.
        env["RUNLANE_QUEUE_PREFIX"] = f"runlane-{uuid.uuid4().hex[:8]}-"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def make_app(backend_env: dict[str, str]):  # type: ignore[no-untyped-def]
    """Build a Runlane app against the test backend; ``provision=True`` creates resources."""

    def build(*, clock: Clock | None = None, **options: Any) -> Runlane:
        return Runlane.from_env(clock=clock, **options)

    return build


def subprocess_env(backend_env: dict[str, str]) -> dict[str, str]:
    """The environment for worker processes: the backend plus this repo on the path."""
    return {**os.environ, **backend_env, "PYTHONPATH": str(REPO_ROOT)}


# --- plain boto3 views of the backend, independent of the app under test -------------


@pytest.fixture
def sqs(backend_env: dict[str, str]) -> Iterator[Any]:
    """A boto3 SQS client of the test's own (not the app's), for forging and inspecting."""
    client = boto3.client("sqs")
    yield client
    client.close()


@pytest.fixture
def dynamodb(backend_env: dict[str, str]) -> Iterator[Any]:
    """A boto3 DynamoDB client of the test's own, for scanning the test table."""
    client = boto3.client("dynamodb")
    yield client
    client.close()


@pytest.fixture
def orders(dynamodb: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A table of the caller's own beside the run table (transactional triggers): orders
    by ``id``; its name is also ``ORDERS_TABLE``."""
    name = f"orders-{uuid.uuid4().hex[:8]}"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    monkeypatch.setenv("ORDERS_TABLE", name)
    yield name
    dynamodb.delete_table(TableName=name)


def queue_url(sqs: Any, app: Runlane, queue: str = "default") -> str:
    return str(sqs.get_queue_url(QueueName=app.config.sqs_queue_name(queue))["QueueUrl"])


def queue_counts(sqs: Any, url: str) -> dict[str, int]:
    """Visible, in-flight and delayed message counts of one queue."""
    names = {
        "visible": "ApproximateNumberOfMessages",
        "in_flight": "ApproximateNumberOfMessagesNotVisible",
        "delayed": "ApproximateNumberOfMessagesDelayed",
    }
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(names.values()))[
        "Attributes"
    ]
    return {key: int(attributes.get(name, 0)) for key, name in names.items()}


def scan_items(dynamodb: Any, table: str) -> list[dict[str, Any]]:
    """Every item of the (small) test table."""
    items: list[dict[str, Any]] = []
    request: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = dynamodb.scan(**request)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def count_requests(client: Any) -> Counter[str]:
    """Count every API call ``client`` makes from now on, by operation name.

    ``before-call`` fires once per API call (botocore's own HTTP retries are not
    counted again), which is what a bill counts.
    """
    counts: Counter[str] = Counter()
    service = client.meta.service_model.service_id.hyphenize()
    lock = threading.Lock()  # a listing sends its queries from several threads

    def hook(model: Any, **_: Any) -> None:
        with lock:
            counts[model.name] += 1

    client.meta.events.register(f"before-call.{service}.*", hook)
    return counts


# --- real worker processes --------------------------------------------------------


class WorkerProcess:
    """``python -m runlane_sqs worker ...`` in a child process, output kept in files."""

    def __init__(self, args: list[str], env: dict[str, str], log_dir: Path, name: str) -> None:
        self.stdout_path = log_dir / f"{name}.out"
        self.stderr_path = log_dir / f"{name}.err"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "runlane_sqs", "worker", *args],
                cwd=REPO_ROOT,
                env=env,
                stdout=out,
                stderr=err,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def output(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def log(self, tail: int = 4000) -> str:
        return self.stderr_path.read_text(errors="replace")[-tail:]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def start_worker(
    backend_env: dict[str, str], tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start worker processes against the test backend; any still running are killed."""
    started: list[WorkerProcess] = []

    def start(*args: str, extra_env: dict[str, str] | None = None) -> WorkerProcess:
        env = {**subprocess_env(backend_env), **(extra_env or {})}
        worker = WorkerProcess(list(args), env, tmp_path, f"worker-{len(started)}")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` (for real processes, where no clock can be injected)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
