"""Dead-letter queues that lead somewhere (docs/operations.md, "Dead-letter queues"): a
message of each kind in a queue's dead-letter queue is mapped to its run and explained,
and a redrive does what each needs: a fresh wakeup for a runnable run (a worker then runs
it), nothing for a run storage settles, another environment's wakeup back to its queue;
letters that are not wakeups, or name no run here, stay unless dropped. On the
emulators: the in-memory transport has no dead-letter queue."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from runlane_sqs import ConfigurationError, Runlane, RunStatus, TaskContext
from runlane_sqs.core.dead_letters import Verdict
from runlane_sqs.core.model import new_run_id
from runlane_sqs.core.wakeup import Wakeup
from tests.backends import ONLY_AWS, Backend
from tests.behaviour.worker_support import claim_elsewhere, drain
from tests.emulators import queue_url

pytestmark = ONLY_AWS
TASK = "dlq.work"
MAX_RECEIVES = 5
"""The redrive policy ``provision`` gives a queue (docs/operations.md)."""


def register(app: Runlane) -> None:
    @app.task(name=TASK)
    def work(ctx: TaskContext, payload: Any) -> Any:
        return payload


@pytest.fixture
def app(backend: Backend) -> Runlane:
    return backend.app(register=register)


def dead_letter_url(app: Runlane) -> str:
    url = app.transport.dead_letter_url("default")  # type: ignore[attr-defined]
    assert url is not None
    return str(url)


def wakeup_of(app: Runlane, run_id: str, environment: str | None = None) -> str:
    wakeup = Wakeup.for_run(app.runs.get_stored(run_id), app.clock.now())
    if environment is not None:
        wakeup = replace(wakeup, environment=environment)
    return wakeup.to_json()


def empty_source(sqs: Any, app: Runlane) -> None:
    sqs.purge_queue(QueueUrl=queue_url(sqs, app))


def test_a_wakeup_received_too_often_lands_in_the_dead_letter_queue_and_is_redriven(
    app: Runlane, sqs: Any
) -> None:
    """Storage was down for five receives of a wakeup: SQS moved it to the dead-letter
    queue. The run is still queued; a redrive sends it a fresh wakeup and a worker runs
    it."""
    run = app.trigger(TASK, {"n": 1})
    source = queue_url(sqs, app)
    for _ in range(MAX_RECEIVES):  # received and left, as by a worker that cannot write
        got = sqs.receive_message(QueueUrl=source, VisibilityTimeout=0, WaitTimeSeconds=1)
        assert len(got["Messages"]) == 1
    assert sqs.receive_message(QueueUrl=source, WaitTimeSeconds=1).get("Messages", []) == []

    (letter,) = app.dead_letters.list()
    assert (letter.run_id, letter.status, letter.verdict) == (run.id, "queued", Verdict.REDRIVE)
    assert letter.reason == "the run is queued and due: a fresh wakeup is sent"
    assert letter.receive_count >= 1 and letter.sent_at is not None

    report = app.dead_letters.redrive()
    assert (report.redriven, report.left) == (1, 0)
    assert drain(app) == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED
    assert app.dead_letters.list() == []


def test_each_kind_of_dead_letter_is_explained_and_redriven_as_it_needs(
    app: Runlane, sqs: Any, backend: Backend
) -> None:
    done = app.trigger(TASK, "done")
    assert drain(app) == 1
    due = app.trigger(TASK, "due")
    later = app.trigger(TASK, "later", delay=timedelta(minutes=5))
    held = app.trigger(TASK, "held")
    claim_elsewhere(app, held.id)
    empty_source(sqs, app)
    letters = {
        "done": wakeup_of(app, done.id),
        "due": wakeup_of(app, due.id),
        "later": wakeup_of(app, later.id),
        "held": wakeup_of(app, held.id),
        "foreign": wakeup_of(app, due.id, environment="staging"),
        "unknown": Wakeup.for_run(
            app.runs.get_stored(due.id).with_changes(id=new_run_id()), app.clock.now()
        ).to_json(),
        "malformed": '<script>alert("x")</script>\u202e',  # SQS refuses control characters
    }
    dlq = dead_letter_url(app)
    for body in letters.values():
        sqs.send_message(QueueUrl=dlq, MessageBody=body)

    listed = {state.body: state for state in app.dead_letters.list(limit=20)}
    verdicts = {name: listed[body[:500]].verdict for name, body in letters.items()}
    assert verdicts == {
        "done": Verdict.SETTLED,
        "due": Verdict.REDRIVE,
        "later": Verdict.REDRIVE,
        "held": Verdict.SETTLED,
        "foreign": Verdict.FOREIGN,
        "unknown": Verdict.UNKNOWN_RUN,
        "malformed": Verdict.MALFORMED,
    }
    assert listed[letters["done"]].reason == "the run succeeded: nothing to redrive"
    assert "holds the run's lease" in listed[letters["held"]].reason
    assert "staging" in listed[letters["foreign"]].reason
    assert len(app.dead_letters.list(limit=20)) == 7  # listing leaves them all there

    dry = app.dead_letters.redrive(dry_run=True)
    assert (dry.redriven, dry.left, len(dry.letters)) == (0, 7, 7)

    report = app.dead_letters.redrive()
    assert (report.redriven, report.settled, report.returned, report.left) == (2, 2, 1, 2)
    source = sqs.receive_message(QueueUrl=queue_url(sqs, app), MaxNumberOfMessages=10)
    bodies = [m["Body"] for m in source.get("Messages", [])]
    assert letters["foreign"] in bodies  # back as it was, for staging's workers
    delayed = sqs.get_queue_attributes(
        QueueUrl=queue_url(sqs, app), AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]["ApproximateNumberOfMessagesDelayed"]
    assert int(delayed) == 1  # the later run's wakeup, sent for its due time
    left = {state.verdict for state in app.dead_letters.list(limit=20)}
    assert left == {Verdict.UNKNOWN_RUN, Verdict.MALFORMED}

    dropped = app.dead_letters.redrive(drop_unreadable=True)
    assert (dropped.dropped, dropped.left) == (2, 0)
    assert app.dead_letters.list() == []


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda app: app.dead_letters.list("no.such-queue!"), "queue"),
        (lambda app: app.dead_letters.list(limit=0), "limit is a whole number"),
        (lambda app: app.dead_letters.redrive(limit=5000), "limit is a whole number"),
    ],
)
def test_bad_arguments_are_refused(
    app: Runlane, call: Callable[[Runlane], Any], message: str
) -> None:
    with pytest.raises((ConfigurationError, Exception), match=message):
        call(app)
