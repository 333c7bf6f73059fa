"""FIFO queues: wakeups are delivered, and delayed ones wait for their due time."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from runlane_sqs import Runlane, RunStatus, TaskContext
from runlane_sqs.adapters.provision import provision_queues, provision_table
from runlane_sqs.core.clock import ManualClock

QUEUE = "orders"


def fifo_app(make_app: Callable[..., Runlane], clock: ManualClock) -> Runlane:
    """An app whose only queue is a FIFO queue, named by URL."""
    probe = make_app()
    provision_table(probe.client("dynamodb"), probe.config.table)
    name = f"{probe.config.sqs_queue_name(QUEUE)}.fifo"
    url = provision_queues(probe.client("sqs"), [name])[name]
    app = make_app(clock=clock, queue_urls={QUEUE: url})

    @app.task(name="ship", queue=QUEUE)
    def ship(ctx: TaskContext, payload: Any) -> Any:
        return payload

    return app


def queued_messages(app: Runlane) -> int:
    url = app.config.queue_urls[QUEUE]
    attributes = app.client("sqs").get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])


def test_a_run_on_a_fifo_queue_completes(make_app: Callable[..., Runlane]) -> None:
    app = fifo_app(make_app, ManualClock())
    run = app.trigger("ship", {"order": 1})
    assert app.worker([QUEUE]).drain() == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED


def test_a_delayed_run_on_a_fifo_queue_is_published_when_due(
    make_app: Callable[..., Runlane],
) -> None:
    clock = ManualClock()
    app = fifo_app(make_app, clock)
    run = app.trigger("ship", {"order": 2}, delay=timedelta(seconds=60))

    # FIFO queues take no per-message delay: nothing is sent before the due time
    assert queued_messages(app) == 0
    stored = app.runs.get(run.id)
    assert stored.status is RunStatus.QUEUED and stored.wake_at is None
    assert app.maintenance.run_pass().jobs["due_wakeups"].published == 0

    clock.advance(61)
    assert app.maintenance.run_pass().jobs["due_wakeups"].published == 1
    assert app.worker([QUEUE]).drain() == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED


def test_a_republished_wakeup_is_not_held_behind_the_same_runs_message_in_flight(
    make_app: Callable[..., Runlane],
) -> None:
    """A consumer that received the run's wakeup died before claiming it (a killed
    Lambda invocation): the message stays in flight for its visibility timeout. The
    wakeup maintenance republishes is a group of its own, so it is delivered at once
    instead of after that timeout."""
    clock = ManualClock()
    app = fifo_app(make_app, clock)
    run = app.trigger("ship", {"order": 3})
    sqs, url = app.client("sqs"), app.config.queue_urls[QUEUE]
    held = sqs.receive_message(QueueUrl=url, VisibilityTimeout=600, WaitTimeSeconds=0)
    assert len(held["Messages"]) == 1  # received by the consumer that dies; never deleted

    clock.advance(app.config.republish_after.total_seconds() + 1)
    assert app.maintenance.run_pass().jobs["due_wakeups"].published == 1
    assert app.worker([QUEUE]).drain() == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED


def test_each_publish_of_a_run_is_its_own_message_group(
    make_app: Callable[..., Runlane],
) -> None:
    clock = ManualClock()
    app = fifo_app(make_app, clock)
    run = app.trigger("ship", {"order": 4})
    sqs, url = app.client("sqs"), app.config.queue_urls[QUEUE]

    def group_received() -> str:
        [message] = sqs.receive_message(
            QueueUrl=url, VisibilityTimeout=600, MessageSystemAttributeNames=["All"]
        )["Messages"]
        return str(message["Attributes"]["MessageGroupId"])

    first = group_received()  # and its consumer dies
    clock.advance(app.config.republish_after.total_seconds() + 1)
    assert app.maintenance.run_pass().jobs["due_wakeups"].published == 1
    second = group_received()
    assert first != second and {first[:33], second[:33]} == {f"{run.id}-"}
