"""Exactly-once execution with real worker processes racing over duplicated wakeups.

Of many workers receiving the same wakeup exactly one claim
succeeds; duplicate, forged and malformed wakeups are deleted and execute nothing.
The side-effect counter lives outside the workers, in a file every attempt appends to.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runlane_sqs import ConflictError, EventType, Runlane, RunStatus
from runlane_sqs.core import machine
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import new_lease_token
from tests.apps.tasks import RECORD_TASK, SIDE_EFFECTS_ENV, register_counting
from tests.emulators import WorkerProcess, queue_counts, queue_url
from tests.wakeups import forged_bodies, send_bodies

RUNS = 50
DELIVERIES = 3
WORKERS = 3
WORKER_TIMEOUT_SECONDS = 90
CLAIM_TRIALS = 40
CLAIMANTS = 4


def _receive_originals(sqs: Any, url: str, expected: int) -> list[dict[str, Any]]:
    """Receive the wakeups the triggers published (to copy their bodies)."""
    messages: dict[str, dict[str, Any]] = {}
    for _ in range(expected * 2):
        batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=120)
        for message in batch.get("Messages", []):
            messages[message["MessageId"]] = message
        if len(messages) >= expected:
            break
    assert len(messages) == expected, f"expected {expected} published wakeups"
    return list(messages.values())


def _delete(sqs: Any, url: str, messages: list[dict[str, Any]]) -> None:
    for start in range(0, len(messages), 10):
        sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                for i, m in enumerate(messages[start : start + 10])
            ],
        )


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

    # Each published body goes back on the queue DELIVERIES times in a row, so copies of
    # one wakeup land in the same receive batch (racing threads of one process) and in
    # neighbouring batches (racing processes); the forged messages are mixed in.
    originals = _receive_originals(sqs, url, RUNS)
    bodies = [m["Body"] for m in originals]
    assert {json.loads(b)["run_id"] for b in bodies} == run_ids
    _delete(sqs, url, originals)
    deliveries = [body for body in bodies for _ in range(DELIVERIES)]
    forged = list(forged_bodies(runs[0].id, app.config.environment).values())
    for position, body in enumerate(forged):
        deliveries.insert(position * 15, body)
    send_bodies(sqs, url, deliveries)
    depth = queue_counts(sqs, url)
    assert depth["visible"] == RUNS * DELIVERIES + len(forged)

    side_effects = tmp_path / "side-effects.log"
    workers = [
        start_worker(
            "--app",
            "tests.apps.counting:app",
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
    assert {rid: count for rid, count in executions.items() if count != 1} == {}
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


def _race_claims(app: Runlane, run_id: str) -> list[str]:
    """CLAIMANTS threads claim the same stored run at once; returns the winners."""
    seen = app.store.get_run(run_id)
    assert seen is not None
    barrier = threading.Barrier(CLAIMANTS)
    winners: list[str] = []

    def claim(owner: str) -> None:
        decision = machine.claim_lease(
            seen,
            now=app.clock.now(),
            owner=owner,
            token=new_lease_token(),
            duration=app.config.lease_duration,
        )
        assert isinstance(decision, Transition)
        barrier.wait(timeout=10)
        try:
            app.store.apply(decision)
        except ConflictError:
            return
        winners.append(owner)

    threads = [threading.Thread(target=claim, args=(f"worker-{n}",)) for n in range(CLAIMANTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return winners


def test_concurrent_claims_of_one_run_have_exactly_one_winner(
    make_app: Callable[..., Runlane],
) -> None:
    """At its root: the claim is a conditional write, so of several workers
    claiming the same run at the same moment exactly one succeeds, and the history
    holds one ``started`` event."""
    app = register_counting(make_app())
    app.provision()
    runs = app.trigger_many(RECORD_TASK, [{"n": n} for n in range(CLAIM_TRIALS)])

    winners = {run.id: _race_claims(app, run.id) for run in runs}

    assert {run_id: len(w) for run_id, w in winners.items() if len(w) != 1} == {}
    for run in runs:
        events = app.runs.events(run.id)
        assert [e.type for e in events] == [EventType.TRIGGERED, EventType.STARTED]
        stored = app.runs.get(run.id)
        assert stored.lease is not None
        assert [stored.lease.owner] == winners[run.id]
