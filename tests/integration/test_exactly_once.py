"""Exactly-once execution with real worker processes racing over duplicated wakeups.

Semantics 1 and 4: of many workers receiving the same wakeup exactly one claim
succeeds; duplicate, forged and malformed wakeups are deleted and execute nothing.
The side-effect counter lives outside the workers, in a file every attempt appends to.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runlane_sqs import EventType, Runlane, RunStatus
from tests.integration.apps.tasks import RECORD_TASK, SIDE_EFFECTS_ENV, register_counting
from tests.integration.conftest import WorkerProcess, queue_counts, queue_url

RUNS = 50
EXTRA_DELIVERIES = 2
WORKERS = 3
WORKER_TIMEOUT_SECONDS = 90


def _receive_originals(sqs: Any, url: str, expected: int) -> list[dict[str, Any]]:
    """Take the wakeups the triggers published off the queue (kept invisible for now)."""
    messages: dict[str, dict[str, Any]] = {}
    for _ in range(expected * 2):
        batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=120)
        for message in batch.get("Messages", []):
            messages[message["MessageId"]] = message
        if len(messages) >= expected:
            break
    assert len(messages) == expected, f"expected {expected} published wakeups"
    return list(messages.values())


def _send_bodies(sqs: Any, url: str, bodies: list[str]) -> None:
    for start in range(0, len(bodies), 10):
        entries = [
            {"Id": str(i), "MessageBody": body}
            for i, body in enumerate(bodies[start : start + 10])
        ]
        response = sqs.send_message_batch(QueueUrl=url, Entries=entries)
        assert not response.get("Failed"), response.get("Failed")


def _wakeup(run_id: str, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "version": 1,
        "environment": "test",
        "run_id": run_id,
        "queue": "default",
        "requested_at": datetime.now(UTC).isoformat(),
    }
    body.update(changes)
    return body


def forged_bodies(real_run_id: str) -> list[str]:
    """Ten messages no worker may act on (some name a real run, to tempt it)."""
    missing_fields = _wakeup(real_run_id)
    del missing_fields["requested_at"]
    return [
        "this is not a wakeup",
        json.dumps([real_run_id, "default"]),
        json.dumps("just a string"),
        '{"version": 1, "environment": "test", "run_id": ',
        json.dumps(_wakeup(real_run_id, version=2)),
        json.dumps(_wakeup(uuid.uuid4().hex)),
        json.dumps(_wakeup(real_run_id, environment="other")),
        json.dumps(_wakeup(real_run_id, trace="x" * 5000)),
        json.dumps(missing_fields),
        json.dumps(_wakeup(real_run_id, payload={"injected": True})),
    ]


def test_duplicated_and_forged_wakeups_execute_each_run_exactly_once(
    make_app: Callable[..., Runlane],
    sqs: Any,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    app = register_counting(make_app())
    app.provision()
    runs = app.trigger_many(RECORD_TASK, [{"n": n} for n in range(RUNS)])
    run_ids = {run.id for run in runs}
    url = queue_url(sqs, app)

    originals = _receive_originals(sqs, url, RUNS)
    bodies = [m["Body"] for m in originals]
    assert {json.loads(b)["run_id"] for b in bodies} == run_ids
    _send_bodies(sqs, url, bodies * EXTRA_DELIVERIES)
    _send_bodies(sqs, url, forged_bodies(runs[0].id))
    for start in range(0, len(originals), 10):
        sqs.change_message_visibility_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                for i, m in enumerate(originals[start : start + 10])
            ],
        )
    depth = queue_counts(sqs, url)
    assert depth["visible"] + depth["in_flight"] == RUNS * (1 + EXTRA_DELIVERIES) + 10

    side_effects = tmp_path / "side-effects.log"
    workers = [
        start_worker(
            "--app",
            "tests.integration.apps.counting:app",
            "--drain",
            "--concurrency",
            "4",
            extra_env={SIDE_EFFECTS_ENV: str(side_effects)},
        )
        for _ in range(WORKERS)
    ]
    for worker in workers:
        code = worker.wait(timeout=WORKER_TIMEOUT_SECONDS)
        assert code == 0, f"worker {worker.pid} exited {code}:\n{worker.log()}"

    lines = side_effects.read_text().splitlines()
    executions = Counter(line.split()[0] for line in lines)
    assert set(executions) == run_ids
    assert [rid for rid, count in executions.items() if count != 1] == []
    assert all(line.split()[2] == "1" for line in lines)

    reported = [re.search(r"executed (\d+) run", w.output()) for w in workers]
    assert all(reported), [w.output() for w in workers]
    assert sum(int(m.group(1)) for m in reported if m) == RUNS

    for run_id in run_ids:
        run = app.runs.get(run_id)
        assert (run.status, run.attempt) == (RunStatus.SUCCEEDED, 1), run_id
        events = app.runs.events(run_id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert [e.type for e in events] == [
            EventType.TRIGGERED,
            EventType.STARTED,
            EventType.SUCCEEDED,
        ]

    assert queue_counts(sqs, url) == {"visible": 0, "in_flight": 0, "delayed": 0}
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages", []) == []
