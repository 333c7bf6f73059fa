"""The backends a benchmark runs against: the embedded moto server (default) or Amazon
DynamoDB Local + LocalStack SQS (``aws-local``, from ``tests/aws_local.py``)."""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from runlane_sqs import Runlane
from runlane_sqs.local import LOCAL_REGION, MotoServer

REPO_ROOT = Path(__file__).resolve().parents[1]
MOTO = "moto"
AWS_LOCAL = "aws-local"
BACKENDS = (MOTO, AWS_LOCAL)
ENVIRONMENT = "bench"


@dataclass(frozen=True)
class Backend:
    """A running backend: its name, what its figures are worth, and fresh apps on it."""

    name: str
    variables: dict[str, str]
    description: str
    authoritative_capacity: bool
    """DynamoDB Local is AWS's own implementation; moto's capacity figures are not."""
    emulators: dict[str, int] = field(default_factory=dict)
    """The emulator processes by name (their pids): the throughput figures count their
    CPU time too, which runs on this host here and on AWS's side in production."""

    def environment(self) -> dict[str, str]:
        return dict(self.variables)

    def names(self) -> tuple[str, str]:
        """A fresh table name and queue prefix (SQS will not reuse a name deleted in the
        last 60 s, and every measurement wants an empty table)."""
        tag = uuid.uuid4().hex[:8]
        return f"bench-{tag}", f"bench-{tag}-"

    def app(self, session: boto3.Session | None = None, **options: Any) -> Runlane:
        table, prefix = self.names()
        return self.app_for(table, prefix, session, **options)

    def app_for(
        self, table: str, prefix: str, session: boto3.Session | None = None, **options: Any
    ) -> Runlane:
        return Runlane.from_env(
            table=table,
            environment=ENVIRONMENT,
            queue_prefix=prefix,
            session=session or boto3.Session(),
            **options,
        )

    def client(self, service: str) -> Any:
        return boto3.Session().client(service, region_name=LOCAL_REGION)  # type: ignore[call-overload]

    def subprocess_env(self, **extra: str) -> dict[str, str]:
        """The environment for worker processes: the backend, this repo on the path."""
        path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
        return {**os.environ, **self.variables, "PYTHONPATH": path, **extra}


@contextlib.contextmanager
def start(name: str) -> Iterator[Backend]:
    """Start the named backend's processes and point this process's boto3 at them (the
    bench process is dedicated to one backend; Celery's kombu reads the environment
    too); stop them on exit."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    if name == MOTO:
        with MotoServer() as server:
            os.environ.update(server.environment())
            yield Backend(
                MOTO,
                server.environment(),
                f"embedded moto server at {server.endpoint_url}",
                authoritative_capacity=False,
                emulators=_running({"moto": server.pid}),
            )
        return
    if name != AWS_LOCAL:
        raise ValueError(f"backend must be one of {BACKENDS}")
    from tests.aws_local import AwsLocal  # noqa: PLC0415 (needs .tools/, only here)

    with AwsLocal() as emulators:
        os.environ.update(emulators.environment())
        yield Backend(
            AWS_LOCAL,
            emulators.environment(),
            f"DynamoDB Local at {emulators.dynamodb_endpoint}, LocalStack SQS at "
            f"{emulators.sqs_endpoint}",
            authoritative_capacity=True,
            emulators=_running(
                {"DynamoDB Local": emulators.dynamodb.pid, "LocalStack": emulators.localstack.pid}
            ),
        )


def _running(pids: dict[str, int | None]) -> dict[str, int]:
    return {name: pid for name, pid in pids.items() if pid is not None}
