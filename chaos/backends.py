"""Where the chaos suite runs: Amazon DynamoDB Local, file-backed so it can be restarted
with its data, plus LocalStack SQS (``aws-local``, the default), or the embedded moto
server (``moto``: quicker to start, but it cannot be restarted with its data, so that
fault is left out there)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from runlane_sqs.local import LOCAL_CREDENTIALS, LOCAL_REGION, MotoServer

MOTO = "moto"
AWS_LOCAL = "aws-local"
BACKENDS = (AWS_LOCAL, MOTO)


class FileBackedDynamoDB:
    """DynamoDB Local with its data in a SQLite file in ``data_dir`` (the command of
    ``tests/aws_local.py``), on a port that stays the same across :meth:`restart`."""

    STOP_GRACE_SECONDS = 2.0
    """DynamoDB Local does not exit on SIGTERM for 15 s or more; SIGKILL after this."""

    def __init__(self, work_dir: Path) -> None:
        from tests.aws_local import DynamoDBLocal  # noqa: PLC0415 (needs .tools/, only here)

        self.data_dir = work_dir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._emulator = DynamoDBLocal(work_dir=work_dir, db_path=self.data_dir)
        self._process: subprocess.Popen[bytes] | None = None
        self.outages: list[tuple[float, float]] = []
        """(began, ended) of each restart, wall-clock (``time.time()``)."""

    @property
    def endpoint_url(self) -> str:
        return self._emulator.endpoint_url

    def start(self, timeout: float = 60.0) -> None:
        argv, env, cwd = self._emulator.command()
        with (cwd / "dynamodb-local.log").open("ab") as log:
            self._process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"DynamoDB Local did not start; see {cwd}")
            time.sleep(0.1)

    def _answers(self) -> bool:
        try:
            return self._emulator.ready()
        except (OSError, ValueError):
            return False

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=self.STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def restart(self) -> None:
        """Stop (SIGTERM, then SIGKILL) and start again on the same port and data."""
        began = time.time()
        self.stop()
        self.start()
        self.outages.append((began, time.time()))


@dataclass
class Backend:
    """The running emulators: DynamoDB's and SQS's endpoints, and the restart hook."""

    name: str
    dynamodb_endpoint: str
    sqs_endpoint: str
    dynamodb: FileBackedDynamoDB | None
    """Set when DynamoDB can be restarted with its data kept."""

    def environment(self, proxy: str | None = None) -> dict[str, str]:
        """boto3's variables for a process whose DynamoDB and SQS requests go to
        ``proxy`` (the fault proxy) or straight to the emulators."""
        return {
            "AWS_ENDPOINT_URL": self.sqs_endpoint,
            "AWS_ENDPOINT_URL_SQS": proxy or self.sqs_endpoint,
            "AWS_ENDPOINT_URL_DYNAMODB": proxy or self.dynamodb_endpoint,
            "AWS_DEFAULT_REGION": LOCAL_REGION,
            **LOCAL_CREDENTIALS,
        }

    @property
    def restartable(self) -> bool:
        return self.dynamodb is not None


@contextlib.contextmanager
def start(name: str) -> Iterator[Backend]:
    if name == MOTO:
        with MotoServer() as server:
            url = server.endpoint_url
            yield Backend(MOTO, url, url, None)
        return
    if name != AWS_LOCAL:
        raise ValueError(f"backend must be one of {BACKENDS}")
    from tests.aws_local import LocalStack  # noqa: PLC0415 (needs .tools/, only here)

    work_dir = Path(tempfile.mkdtemp(prefix="runlane-chaos-"))
    dynamodb = FileBackedDynamoDB(work_dir / "dynamodb-local")
    localstack = LocalStack(work_dir=work_dir / "localstack")
    try:
        dynamodb.start()
        localstack.start()
        yield Backend(AWS_LOCAL, dynamodb.endpoint_url, localstack.endpoint_url, dynamodb)
    finally:
        localstack.stop()
        dynamodb.stop()
        if not os.environ.get("RUNLANE_CHAOS_KEEP"):
            shutil.rmtree(work_dir, ignore_errors=True)
