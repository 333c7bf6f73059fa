"""The Lambda consumer: an SQS event-source-mapping batch in, a partial batch response out.

Deploy a module of your own whose ``handler`` the function names (``consumer.handler``)::

    # consumer.py
    from myproject.jobs import app
    from runlane_sqs.lambdas.consumer import sqs_handler

    handler = sqs_handler(app)

and give the event source mapping ``FunctionResponseTypes: [ReportBatchItemFailures]``
(``infra/runlane.yaml`` does). Each record becomes a
:class:`~runlane_sqs.ports.transport.ReceivedWakeup` and goes through the same
:class:`~runlane_sqs.runtime.executor.Executor` as the long-running worker: parse, claim
the lease (on the wakeup's hint, or after re-reading the run), run the handler, record the
outcome under the lease token (docs/design/architecture.md, "The per-message path").

What the handler returns, ``{"batchItemFailures": [{"itemIdentifier": messageId}, ...]}``:

- a record whose run was executed, or that was a stale, unknown or malformed hint, is
  *not* reported: Lambda deletes it (the handler itself never calls SQS
  ``DeleteMessage``);
- a record of another environment (on a queue environments share) is reported, never
  deleted: it becomes visible again after the queue's visibility timeout, for that
  environment's workers, and each such receive counts toward the redrive policy's
  ``maxReceiveCount``. The first one of each environment on each queue is logged as a
  warning, once per function instance (give each environment its own queues);
- each record is read on its own, so one broken record never fails the others: a
  record without a usable ``messageId`` cannot be reported and is only logged (ERROR);
  one without a usable ``eventSourceARN``, ``receiptHandle`` or string ``body`` (or not
  from ``aws:sqs``) is reported; an unreadable ``attributes`` or
  ``ApproximateReceiveCount`` counts as the first receive (WARNING) and the record is
  handled;
- a record that could not be handled now (storage unavailable, a task this function
  does not register) is reported: it becomes visible again after the queue's visibility
  timeout and is redelivered, up to the redrive policy's ``maxReceiveCount``;
- on a FIFO queue (event source ARN ending ``.fifo``), once a record of a message group
  is reported, the later records of the same group in this batch are reported too,
  unprocessed, so the group's order holds; other groups continue;
- records are handled in order, one at a time. The handler reads the context's
  ``get_remaining_time_in_millis()`` before each record and starts none once less than
  the safety margin remains: those records are reported and made visible again at once
  (``ChangeMessageVisibility`` to 0), so the next invocation handles them. The time is
  checked again after the run is claimed (its read and claim may be slow, retried
  through throttling): a run claimed past the margin is given back
  without running (runnable at once, its wakeup published, a ``lease_expired`` event
  with ``before_start`` and ``reason: deadline``) and its record is not reported. An
  attempt still running when the margin is reached, or beginning just as it is, has its
  cancellation event set, as a stopping worker does; one that ignores it and outlives
  the invocation loses its lease to expiry and maintenance makes the run runnable again.

Nothing is kept between invocations: each one builds its own executor and
:class:`~runlane_sqs.runtime.executor.LeaseKeeper`, whose heartbeat thread runs only while the
invocation does and is stopped before the response is returned (a frozen Lambda
environment must not wake up later with a thread renewing old leases). Only the app and
its boto3 clients are reused by warm invocations.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from runlane_sqs.api.app import Runlane
from runlane_sqs.core.errors import MissingResourceError
from runlane_sqs.core.rates import ClaimLead
from runlane_sqs.engine.driver import Disposition
from runlane_sqs.engine.message import ForeignEnvironments, MessagePath
from runlane_sqs.lambdas.deadline import (
    DEFAULT_SAFETY_MARGIN_SECONDS,
    MIN_WORKING_SECONDS,
    Deadline,
    LambdaContext,
)
from runlane_sqs.lambdas.records import (
    NotAnSqsEvent,
    envelope_of,
    fifo_group_of,
    message_id_of,
    receive_count_of,
    records_of,
)
from runlane_sqs.ports.transport import ReceivedWakeup
from runlane_sqs.runtime.executor import Executor, LeaseKeeper

log = logging.getLogger("runlane_sqs.lambda")
OUT_OF_TIME = "too close to the function's timeout to start more records"


class BatchItemFailure(TypedDict):
    """One record SQS should deliver again."""

    itemIdentifier: str


class BatchResponse(TypedDict):
    """The partial batch response of an event source mapping with ReportBatchItemFailures."""

    batchItemFailures: list[BatchItemFailure]


SqsHandler = Callable[[Mapping[str, Any], LambdaContext], BatchResponse]


def sqs_handler(
    app: Runlane,
    *,
    safety_margin_seconds: float | None = None,
    timeout_seconds: float | None = None,
) -> SqsHandler:
    """A Lambda handler ``(event, context) -> {"batchItemFailures": [...]}`` for ``app``.

    ``safety_margin_seconds`` (else ``RUNLANE_LAMBDA_SAFETY_MARGIN_SECONDS``, else 10):
    start no record once less than this remains. ``timeout_seconds`` (else
    ``RUNLANE_LAMBDA_TIMEOUT_SECONDS``, which the template sets): the function's timeout,
    refused with a :class:`ConfigurationError` when it leaves less than the margin plus
    ``MIN_WORKING_SECONDS``. See the module documentation for what is reported. An event
    that is not an SQS batch raises :class:`NotAnSqsEvent` (Lambda then retries the
    whole batch).
    """
    deadline = Deadline.build(safety_margin_seconds, timeout_seconds)
    foreign = ForeignEnvironments()  # warned about once per function instance
    claim_lead = ClaimLead()  # learnt across invocations, as a worker learns it

    def handler(event: Mapping[str, Any], context: LambdaContext) -> BatchResponse:
        records = records_of(event)
        deadline.check_first(context.get_remaining_time_in_millis() / 1000)
        try:
            invocation = _Invocation(app, context, deadline.margin_seconds, foreign, claim_lead)
            return invocation.run(records)
        finally:  # the function may be frozen until its next invocation
            app.engine.observer.flush()

    return handler


@dataclass
class _Tally:
    executed: int = 0
    skipped: int = 0
    returned: int = 0
    """Records of other environments (reported, so never deleted)."""
    unreportable: int = 0
    """Records without a usable ``messageId``: logged, neither handled nor reported."""
    reported: list[str] = field(default_factory=list)
    failed_groups: set[str] = field(default_factory=set)
    stop_reason: str | None = None
    """Why the rest of the batch is reported unstarted (deadline, missing resource)."""
    out_of_time: list[ReceivedWakeup] = field(default_factory=list)
    """Records reported unstarted for lack of time: made visible again at once."""


class _Invocation:
    """One invocation's executor, lease keeper and tally; thrown away when it returns."""

    def __init__(
        self,
        app: Runlane,
        context: LambdaContext,
        margin_seconds: float,
        foreign: ForeignEnvironments,
        claim_lead: ClaimLead,
    ) -> None:
        self.app = app
        self.context = context
        self.margin_seconds = margin_seconds
        self.worker_id = _worker_id(context)
        engine = app.engine
        self.leases = LeaseKeeper(
            engine.store,
            engine.clock,
            engine.config.lease_duration,
            engine.config.progress_interval,
        )
        path = MessagePath.of(
            engine,
            self.worker_id,
            may_start=self._may_start,
            foreign=foreign,
            claim_lead=claim_lead,
        )
        self.executor = Executor(engine, self.leases, path)
        self.deadline_reached = False
        """Set by the deadline timer before it cancels the attempts in flight."""
        self.tally = _Tally()

    def run(self, records: Sequence[object]) -> BatchResponse:
        self.leases.start()
        timer = self._deadline_timer()
        try:
            for index, record in enumerate(records):
                self._record(index, record)
        finally:
            timer.cancel()
            timer.join()
            self.leases.stop()
        tally = self.tally
        self._release(tally.out_of_time)
        log.info(
            "batch of %d record(s): %d executed, %d skipped, %d reported%s%s%s",
            len(records),
            tally.executed,
            tally.skipped,
            len(tally.reported),
            f" ({tally.returned} of other environments)" if tally.returned else "",
            f", {tally.unreportable} without a messageId" if tally.unreportable else "",
            f" ({tally.stop_reason})" if tally.stop_reason else "",
            extra={"worker_id": self.worker_id},
        )
        return {"batchItemFailures": [{"itemIdentifier": i} for i in tally.reported]}

    def _record(self, index: int, record: object) -> None:
        tally = self.tally
        message_id = message_id_of(record)
        if message_id is None or not isinstance(record, Mapping):
            tally.unreportable += 1
            log.error(
                "record %d of the batch has no usable messageId: it cannot be reported "
                "for redelivery and is not handled",
                index,
                extra={"worker_id": self.worker_id},
            )
            return
        group = fifo_group_of(record)
        if tally.stop_reason is None and self._remaining_seconds() < self.margin_seconds:
            tally.stop_reason = OUT_OF_TIME
        if tally.stop_reason is not None or (group is not None and group in tally.failed_groups):
            tally.reported.append(message_id)
            if tally.stop_reason == OUT_OF_TIME and (unstarted := self._wakeup(record, message_id)):
                tally.out_of_time.append(unstarted)
            return
        message = self._wakeup(record, message_id)
        disposition = self._handle(message) if message is not None else Disposition.DEFERRED
        if disposition is Disposition.EXECUTED:
            tally.executed += 1
        elif disposition is Disposition.SKIPPED:
            tally.skipped += 1
        else:
            if disposition is Disposition.RETURNED:
                tally.returned += 1
            tally.reported.append(message_id)
            if group is not None:
                tally.failed_groups.add(group)

    def _handle(self, message: ReceivedWakeup) -> Disposition:
        extra = {"message_id": message.message_id, "worker_id": self.worker_id}
        try:
            return self.executor.handle(message)
        except MissingResourceError as exc:
            log.error("reporting the rest of the batch: %s", exc, extra=extra)
            self.tally.stop_reason = str(exc)
        except Exception:
            log.exception("unexpected error handling message %s", message.message_id, extra=extra)
        return Disposition.DEFERRED

    def _wakeup(self, record: Mapping[str, Any], message_id: str) -> ReceivedWakeup | None:
        """The record as a received message; ``None`` (logged) when its envelope is
        broken, so the record is reported. A body that is not a wakeup is left to the
        executor, which deletes it as a malformed hint."""
        extra = {"message_id": message_id, "worker_id": self.worker_id}
        envelope = envelope_of(record)
        if isinstance(envelope, str):
            log.error("reporting record %s: %s", message_id, envelope, extra=extra)
            return None
        arn, receipt, body = envelope
        count = receive_count_of(record.get("attributes"))
        if count is None:
            log.warning(
                "record %s has no readable ApproximateReceiveCount; counting this as its "
                "first receive",
                message_id,
                extra=extra,
            )
        return ReceivedWakeup(
            queue=logical_queue(self.app, arn),
            body=body,
            receipt=receipt,
            message_id=message_id,
            receive_count=count or 1,
        )

    def _release(self, unstarted: Sequence[ReceivedWakeup]) -> None:
        """Make records reported for lack of time visible again at once, so the next
        invocation starts them instead of waiting out the queue's visibility timeout (on
        a FIFO queue, while they are hidden, their groups deliver nothing either). Best
        effort: a record whose release fails waits out the timeout."""
        if not unstarted:
            return
        try:
            self.app.engine.transport.release(unstarted)
        except Exception as exc:  # the records are reported either way
            log.warning(
                "could not make %d unstarted record(s) visible again: %s",
                len(unstarted),
                exc,
                extra={"worker_id": self.worker_id},
            )

    def _deadline_timer(self) -> threading.Timer:
        """Sets in-flight attempts' cancellation when the safety margin is reached."""
        delay = max(0.0, self._remaining_seconds() - self.margin_seconds)
        timer = threading.Timer(delay, self._cancel_in_flight)
        timer.daemon = True
        timer.name = "runlane-lambda-deadline"
        timer.start()
        return timer

    def _remaining_seconds(self) -> float:
        return self.context.get_remaining_time_in_millis() / 1000

    def _may_start(self) -> bool:
        """Whether an attempt may start now: checked again after the claim, whose read and
        write can take long enough (throttling retries) to cross the safety margin. A run
        claimed past it is given back unrun; one begun as the timer fired is cancelled."""
        return not self.deadline_reached and self._remaining_seconds() >= self.margin_seconds

    def _cancel_in_flight(self) -> None:
        self.deadline_reached = True  # first: an attempt tracked after the loop sees it
        for ctx in self.leases.contexts():
            ctx.log.warning("the Lambda invocation is about to time out; cancelling the attempt")
            ctx.cancellation.set()


def logical_queue(app: Runlane, queue_arn: str) -> str:
    """The app's name for the queue an event source ARN names: the ``queue_urls`` entry
    whose URL ends with that SQS name, else the name without the app's queue prefix
    (``runlane-{environment}-`` unless it was given one)."""
    name = queue_arn.rsplit(":", 1)[-1]
    for logical, url in app.config.queue_urls.items():
        if url.rstrip("/").rsplit("/", 1)[-1] == name:
            return logical
    return name.removeprefix(app.config.sqs_queue_prefix)


def _worker_id(context: LambdaContext) -> str:
    """``lambda-`` and the invocation's request id: every invocation is its own worker."""
    request_id = getattr(context, "aws_request_id", None) or uuid.uuid4().hex
    return f"lambda-{request_id}"


__all__ = [
    "DEFAULT_SAFETY_MARGIN_SECONDS",
    "MIN_WORKING_SECONDS",
    "BatchItemFailure",
    "BatchResponse",
    "LambdaContext",
    "NotAnSqsEvent",
    "SqsHandler",
    "logical_queue",
    "sqs_handler",
]
