"""The SQS event source mapping, played against a real queue with real invocations.

A poller receives batches of up to ``batch_size`` messages (with the queue's visibility
timeout, every system attribute), keeps at most ``concurrency`` batches in flight, and
for each batch invokes the function (:class:`~tests.esm.invocation.LambdaFunction`, a
process per invocation, killed at its timeout) with the records Lambda would build. Then,
as with ``ReportBatchItemFailures``, it deletes the records the response did not report.
An invocation that was killed, crashed, raised or answered something invalid deletes
nothing: its records come back after the visibility timeout.

Options: a fraction of batches is invoked twice at once (Lambda's at-least-once
invocation), and on a FIFO queue every batch is checked against FIFO order
(:mod:`tests.esm.fifo`).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import boto3

from tests.emulators import count_requests
from tests.esm.fifo import FifoOrder
from tests.esm.invocation import RETURNED, Invocation, LambdaFunction
from tests.esm.records import deletable, sqs_event

MAX_BATCH_SIZE = 10
"""The largest batch a standard or FIFO queue mapping receives in one request."""
STOP_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class MappingConfig:
    """The mapping's settings (those of ``AWS::Lambda::EventSourceMapping`` it plays)."""

    batch_size: int = MAX_BATCH_SIZE
    concurrency: int = 2
    """``MaximumConcurrency``: batches (each one invocation, or two when duplicated) in
    flight at once."""
    duplicate_fraction: float = 0.0
    """Share of batches invoked twice at the same time."""
    wait_seconds: int = 0
    """``WaitTimeSeconds`` of each receive (moto busy-waits a core on a long poll of a FIFO
    queue whose groups are all in flight, so the default is a short poll)."""
    idle_seconds: float = 0.2
    """Pause after an empty receive."""
    seed: int = 17


@dataclass
class Batch:
    """One received batch and the invocations it was given to."""

    number: int
    messages: list[dict[str, Any]]
    received_at: float
    duplicated: bool
    invocations: list[Invocation] = field(default_factory=list)
    deleted: set[str] = field(default_factory=set)

    @property
    def message_ids(self) -> list[str]:
        return [m["MessageId"] for m in self.messages]


class EventSourceMapping:
    """Plays Lambda's SQS poller for one queue until :meth:`stop` (or the ``with`` block
    ends). Its own SQS client's requests are counted in :attr:`requests`."""

    def __init__(
        self, queue_url: str, function: LambdaFunction, config: MappingConfig | None = None
    ) -> None:
        self.queue_url = queue_url
        self.function = function
        self.config = config or MappingConfig()
        self.sqs: Any = boto3.client("sqs")
        self.requests = count_requests(self.sqs)
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=queue_url, AttributeNames=["QueueArn", "VisibilityTimeout", "FifoQueue"]
        )["Attributes"]
        self.requests.clear()  # the mapping's creation is not a poll
        self.queue_arn: str = attributes["QueueArn"]
        self.visibility_timeout = int(attributes["VisibilityTimeout"])
        if self.visibility_timeout < function.timeout_seconds:
            raise ValueError(
                "AWS refuses a mapping whose queue's visibility timeout is shorter than the "
                f"function's timeout ({self.visibility_timeout} s < "
                f"{function.timeout_seconds} s)"
            )
        self.fifo = attributes.get("FifoQueue") == "true"
        self.order = FifoOrder() if self.fifo else None
        self.batches: list[Batch] = []
        self.empty_receives = 0
        self.errors: list[str] = []
        self._random = random.Random(self.config.seed)
        self._slots = threading.Semaphore(self.config.concurrency)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._poller = threading.Thread(target=self._poll, name="esm-poller", daemon=True)

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> EventSourceMapping:
        self._poller.start()
        return self

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Stop receiving; wait for the invocations in flight (at most their timeout)."""
        self._stopping.set()
        self._poller.join(timeout)
        for thread in list(self._threads):
            thread.join(timeout)
        self.sqs.close()

    def __enter__(self) -> EventSourceMapping:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- what happened -----------------------------------------------------------------

    @property
    def invocations(self) -> list[Invocation]:
        with self._lock:
            return [i for b in self.batches for i in b.invocations]

    def outcomes(self) -> Counter[str]:
        return Counter(i.outcome for i in self.invocations)

    def deleted_ids(self) -> set[str]:
        with self._lock:
            return {m for b in self.batches for m in b.deleted}

    # --- the poller --------------------------------------------------------------------

    def _poll(self) -> None:
        while not self._stopping.is_set():
            if not self._slots.acquire(timeout=0.1):
                continue
            messages = self._receive()
            if not messages:
                self._slots.release()
                self._stopping.wait(self.config.idle_seconds)
                continue
            batch = self._accept(messages)
            thread = threading.Thread(
                target=self._process, args=(batch,), name=f"esm-batch-{batch.number}"
            )
            self._threads.append(thread)
            thread.start()

    def _receive(self) -> list[dict[str, Any]]:
        try:
            response = self.sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=self.config.batch_size,
                VisibilityTimeout=self.visibility_timeout,
                WaitTimeSeconds=self.config.wait_seconds,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
        except Exception as exc:  # an emulator hiccup: Lambda's poller retries too
            self.errors.append(f"receive: {exc!r}")
            return []
        messages: list[dict[str, Any]] = response.get("Messages", [])
        if not messages:
            self.empty_receives += 1
        return messages

    def _accept(self, messages: list[dict[str, Any]]) -> Batch:
        with self._lock:
            batch = Batch(
                number=len(self.batches) + 1,
                messages=messages,
                received_at=time.time(),
                duplicated=self._random.random() < self.config.duplicate_fraction,
            )
            self.batches.append(batch)
        if self.order is not None:
            self.order.received(messages)
        return batch

    def _process(self, batch: Batch) -> None:
        try:
            region = self.sqs.meta.region_name
            event = sqs_event(batch.messages, self.queue_arn, region)
            copies = [
                threading.Thread(target=self._invoke, args=(batch, event), name="esm-invoke")
                for _ in range(2 if batch.duplicated else 1)
            ]
            for copy in copies:
                copy.start()
            for copy in copies:
                copy.join()
        finally:
            if self.order is not None:
                self.order.finished(batch.messages)
            self._slots.release()

    def _invoke(self, batch: Batch, event: dict[str, Any]) -> None:
        try:
            invocation = self.function.invoke(event)
            with self._lock:
                batch.invocations.append(invocation)
            if invocation.outcome == RETURNED:
                self._delete(batch, deletable(invocation.response, batch.message_ids))
        except Exception as exc:  # reported by the test, not lost in the thread
            self.errors.append(f"batch {batch.number}: {exc!r}")

    def _delete(self, batch: Batch, message_ids: Sequence[str]) -> None:
        if not message_ids:
            return
        handles = {m["MessageId"]: m["ReceiptHandle"] for m in batch.messages}
        ids = list(message_ids)
        for start in range(0, len(ids), MAX_BATCH_SIZE):
            chunk = ids[start : start + MAX_BATCH_SIZE]
            response = self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": handles[m]} for i, m in enumerate(chunk)],
            )
            failed = {chunk[int(f["Id"])] for f in response.get("Failed", [])}
            if failed:
                self.errors.append(f"batch {batch.number}: deletes failed {response['Failed']}")
            done = [m for m in chunk if m not in failed]
            with self._lock:
                batch.deleted.update(done)
            if self.order is not None:
                self.order.deleted(done)
