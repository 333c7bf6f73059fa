"""Wakeup bodies for tests: forged and malformed ones, and a plain batch sender."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any


def send_bodies(sqs: Any, url: str, bodies: list[str]) -> None:
    for start in range(0, len(bodies), 10):
        entries = [
            {"Id": str(i), "MessageBody": body} for i, body in enumerate(bodies[start : start + 10])
        ]
        response = sqs.send_message_batch(QueueUrl=url, Entries=entries)
        assert not response.get("Failed"), response.get("Failed")


def _wakeup(run_id: str, environment: str, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "version": 1,
        "environment": environment,
        "run_id": run_id,
        "queue": "default",
        "requested_at": datetime.now(UTC).isoformat(),
    }
    body.update(changes)
    return body


def forged_bodies(real_run_id: str, environment: str) -> dict[str, str]:
    """Nine messages no worker may act on and every worker deletes, by what is wrong with
    them. Most name a real run of ``environment``, to tempt a worker that does not check.
    (A wakeup of another environment is not among them: it is left on the queue for that
    environment's workers, see tests/behaviour/test_environments.py.)"""
    missing_fields = _wakeup(real_run_id, environment)
    del missing_fields["requested_at"]
    return {
        "garbage text": "this is not a wakeup",
        "json array": json.dumps([real_run_id, "default"]),
        "json string": json.dumps("just a string"),
        "truncated json": '{"version": 1, "environment": "test", "run_id": ',
        "wrong version": json.dumps(_wakeup(real_run_id, environment, version=2)),
        "unknown run": json.dumps(_wakeup(uuid.uuid4().hex, environment)),
        "oversized": json.dumps(_wakeup(real_run_id, environment, trace="x" * 5000)),
        "missing fields": json.dumps(missing_fields),
        "smuggled payload": json.dumps(
            _wakeup(real_run_id, environment, payload={"injected": True})
        ),
    }
