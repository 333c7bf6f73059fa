"""The point of comparison: Celery 5 on its SQS broker (kombu), at its best here.

Configured as /work/shared/EMULATORS.md found fastest: ``--pool threads -c 8``,
``task_acks_late=True``, ``task_ignore_result=True``, a predefined queue (kombu neither
lists nor creates queues) and a short ``polling_interval``. kombu has no endpoint
option: boto3 reads ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_SQS``) from the
environment, so Celery talks to the same SQS endpoint as runlane.

The worker process runs ``celery -A bench.celery_peer worker``; the queue comes from
``BENCH_CELERY_QUEUE`` and ``BENCH_CELERY_QUEUE_URL``. The task does what runlane's
no-op does: append one byte to ``BENCH_DONE_FILE``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from celery import Celery  # type: ignore[import-untyped]
from celery.signals import worker_ready  # type: ignore[import-untyped]

from bench.workers import DONE_FILE_VARIABLE, mark_done
from runlane_sqs.local import LOCAL_REGION

QUEUE_VARIABLE = "BENCH_CELERY_QUEUE"
QUEUE_URL_VARIABLE = "BENCH_CELERY_QUEUE_URL"
READY_VARIABLE = "BENCH_READY_FILE"
"""A file the worker creates once it consumes (``worker_ready``)."""
NOOP_TASK = "bench.celery_noop"
POOL = "threads"
CONCURRENCY = 8
POLLING_INTERVAL_SECONDS = 0.05


def build(queue: str, queue_url: str) -> Celery:
    celery = Celery("bench", broker="sqs://x:y@")
    celery.conf.update(
        broker_transport_options={
            "region": LOCAL_REGION,
            "is_secure": False,
            "polling_interval": POLLING_INTERVAL_SECONDS,
            "predefined_queues": {queue: {"url": queue_url}},
            "visibility_timeout": 60,
        },
        broker_connection_retry_on_startup=True,
        task_default_queue=queue,
        task_acks_late=True,
        task_ignore_result=True,
        worker_prefetch_multiplier=4,
        worker_hijack_root_logger=False,
    )

    @celery.task(name=NOOP_TASK)  # type: ignore[untyped-decorator]
    def noop(n: int) -> None:
        mark_done(os.environ[DONE_FILE_VARIABLE])

    return celery


@worker_ready.connect  # type: ignore[untyped-decorator]
def _announce_ready(**_: Any) -> None:
    path = os.environ.get(READY_VARIABLE)
    if path:
        Path(path).touch()


app = build(os.environ.get(QUEUE_VARIABLE, "bench-celery"), os.environ.get(QUEUE_URL_VARIABLE, ""))


def worker_command(queue: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "bench.celery_peer",
        "worker",
        "--pool",
        POOL,
        "-c",
        str(CONCURRENCY),
        "-Q",
        queue,
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "--loglevel",
        "WARNING",
    ]


def start_worker(
    queue: str, queue_url: str, env: dict[str, str], log: Path
) -> subprocess.Popen[Any]:
    with log.open("wb") as output:
        return subprocess.Popen(
            worker_command(queue),
            env={**env, QUEUE_VARIABLE: queue, QUEUE_URL_VARIABLE: queue_url},
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
