"""Wakeups sent straight to SQS with boto3, from outside the library: duplicates of
real wakeups, forged and malformed ones, and one purge of every queue.

The bodies are written by hand here (an attacker or a buggy producer does not use the
library), in the format ``runlane_sqs/core/wakeup.py`` parses."""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime
from typing import Any

ENVIRONMENT = "chaos"


def wakeup_body(run_id: str, queue: str, environment: str = ENVIRONMENT) -> str:
    return json.dumps(
        {
            "version": 1,
            "environment": environment,
            "run_id": run_id,
            "queue": queue,
            "requested_at": datetime.now(UTC).isoformat(),
        },
        separators=(",", ":"),
    )


def forged_bodies(real_run_id: str, queue: str) -> list[tuple[str, str]]:
    """(name, body) of every forged or malformed wakeup kind."""
    good = json.loads(wakeup_body(real_run_id, queue))
    return [
        ("not json", "{this is not json"),
        ("not an object", json.dumps([real_run_id])),
        ("missing fields", json.dumps({"version": 1, "run_id": real_run_id})),
        ("unknown field", json.dumps({**good, "payload": {"steal": True}})),
        ("unknown version", json.dumps({**good, "version": 99})),
        ("unknown run", wakeup_body(uuid.uuid4().hex, queue)),
        ("bad run id", json.dumps({**good, "run_id": "../../etc/passwd"})),
        ("other environment", wakeup_body(real_run_id, queue, environment="prod")),
        ("oversize", json.dumps({**good, "trace": "x" * 5000})),
    ]


class WakeupSender:
    """Sends to the chaos queues through one SQS client (not thread-safe: one thread)."""

    def __init__(self, sqs: Any, queue_urls: dict[str, str], seed: int) -> None:
        self._sqs = sqs
        self._urls = queue_urls
        self._random = random.Random(seed)
        self.duplicates = 0
        self.forged = 0
        self.purges = 0

    def duplicate(self, run_id: str, queue: str) -> None:
        self._sqs.send_message(QueueUrl=self._urls[queue], MessageBody=wakeup_body(run_id, queue))
        self.duplicates += 1

    def forge(self, real_run_id: str, queue: str) -> None:
        _, body = self._random.choice(forged_bodies(real_run_id, queue))
        self._sqs.send_message(QueueUrl=self._urls[queue], MessageBody=body)
        self.forged += 1

    def purge(self) -> None:
        """Purge every queue at once (one fault): maintenance must republish."""
        for url in self._urls.values():
            self._sqs.purge_queue(QueueUrl=url)
        self.purges += 1
