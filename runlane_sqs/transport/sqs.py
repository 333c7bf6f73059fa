"""The SQS wakeup transport (sync, boto3)."""

from __future__ import annotations

import logging
import math
import threading
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.errors import MissingResourceError, TransportError
from runlane_sqs.limits import MAX_DELAY_SECONDS, MAX_RECEIVE_BATCH, MAX_SEND_BATCH
from runlane_sqs.ports import ReceivedWakeup

log = logging.getLogger("runlane_sqs.transport")
T = TypeVar("T")

MISSING_QUEUE_CODES = frozenset(
    {"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "NonExistentQueue"}
)


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def delay_seconds(delay: timedelta | None) -> int:
    """SQS ``DelaySeconds`` for a wakeup due after ``delay`` (rounded up, at most 900)."""
    if delay is None or delay <= timedelta(0):
        return 0
    return min(MAX_DELAY_SECONDS, math.ceil(delay.total_seconds()))


def is_fifo(url: str) -> bool:
    return url.endswith(".fifo")


class SqsTransport:
    """Wakeups on SQS queues named ``{queue_prefix}{queue}`` or given by URL."""

    def __init__(
        self,
        client: Any,
        *,
        queue_prefix: str = "runlane-",
        queue_urls: Mapping[str, str] | None = None,
    ) -> None:
        self._client = client
        self.queue_prefix = queue_prefix
        self._urls: dict[str, str] = dict(queue_urls or {})
        self._lock = threading.Lock()
        self._endpoint: str | None = getattr(getattr(client, "meta", None), "endpoint_url", None)

    def queue_name(self, queue: str) -> str:
        return f"{self.queue_prefix}{queue}"

    def queue_url(self, queue: str) -> str:
        """The URL of a logical queue, looked up once; a clear error if it does not exist."""
        with self._lock:
            if queue in self._urls:
                return self._urls[queue]
        name = self.queue_name(queue)
        try:
            url = str(self._client.get_queue_url(QueueName=name)["QueueUrl"])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in MISSING_QUEUE_CODES:
                where = self._endpoint or "the default AWS endpoint"
                raise MissingResourceError(
                    f"SQS queue {name!r} does not exist at {where}; create it with "
                    "app.provision() (local use) or your CloudFormation stack (AWS)"
                ) from exc
            raise TransportError(f"cannot look up SQS queue {name!r}: {exc}") from exc
        except BotoCoreError as exc:
            raise TransportError(f"cannot reach SQS: {exc}") from exc
        with self._lock:
            self._urls[queue] = url
        return url

    def check_queue(self, queue: str) -> None:
        self.queue_url(queue)

    def publish(self, wakeups: Sequence[Wakeup], delay: timedelta | None = None) -> list[Wakeup]:
        by_queue: dict[str, list[Wakeup]] = defaultdict(list)
        for wakeup in wakeups:
            by_queue[wakeup.queue].append(wakeup)
        failed: list[Wakeup] = []
        seconds = delay_seconds(delay)
        for queue, group in by_queue.items():
            url = self.queue_url(queue)
            if seconds and is_fifo(url):
                # FIFO queues take no per-message delay: a wakeup sent now would arrive
                # early and be dropped as not due. Leave it unsent; the caller lists the
                # run as due at its due time and maintenance publishes it then.
                failed.extend(group)
                continue
            for batch in chunks(group, MAX_SEND_BATCH):
                failed.extend(self._send(url, batch, seconds))
        return failed

    def _entry(self, url: str, index: int, wakeup: Wakeup, delay: int) -> dict[str, Any]:
        entry: dict[str, Any] = {"Id": str(index), "MessageBody": wakeup.to_json()}
        if is_fifo(url):
            entry["MessageGroupId"] = wakeup.run_id
            entry["MessageDeduplicationId"] = f"{wakeup.run_id}-{wakeup.requested_at.timestamp()}"
        elif delay:
            entry["DelaySeconds"] = delay
        return entry

    def _send(self, url: str, batch: Sequence[Wakeup], delay: int) -> list[Wakeup]:
        entries = [self._entry(url, i, w, delay) for i, w in enumerate(batch)]
        try:
            if len(entries) == 1:
                entry = entries[0]
                entry.pop("Id")
                self._client.send_message(QueueUrl=url, **entry)
                return []
            response = self._client.send_message_batch(QueueUrl=url, Entries=entries)
        except (ClientError, BotoCoreError) as exc:
            log.warning("publishing %d wakeup(s) failed: %s", len(batch), exc)
            return list(batch)
        failed_ids = {int(f["Id"]) for f in response.get("Failed", [])}
        return [batch[i] for i in sorted(failed_ids)]

    def receive(self, queue: str, max_messages: int, wait_seconds: float) -> list[ReceivedWakeup]:
        url = self.queue_url(queue)
        try:
            response = self._client.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=max(1, min(MAX_RECEIVE_BATCH, max_messages)),
                WaitTimeSeconds=int(wait_seconds),
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
            )
        except (ClientError, BotoCoreError) as exc:
            raise TransportError(f"receiving from SQS queue {queue!r} failed: {exc}") from exc
        return [
            ReceivedWakeup(
                queue=queue,
                body=message.get("Body", ""),
                receipt=message["ReceiptHandle"],
                message_id=message.get("MessageId", ""),
                receive_count=int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1)),
            )
            for message in response.get("Messages", [])
        ]

    def ack(self, messages: Sequence[ReceivedWakeup]) -> None:
        self._batch("delete_message_batch", messages, {})

    def release(self, messages: Sequence[ReceivedWakeup]) -> None:
        self._batch("change_message_visibility_batch", messages, {"VisibilityTimeout": 0})

    def _batch(
        self, operation: str, messages: Sequence[ReceivedWakeup], extra: dict[str, Any]
    ) -> None:
        by_queue: dict[str, list[ReceivedWakeup]] = defaultdict(list)
        for message in messages:
            by_queue[message.queue].append(message)
        for queue, group in by_queue.items():
            url = self.queue_url(queue)
            for batch in chunks(group, MAX_SEND_BATCH):
                entries = [
                    {"Id": str(i), "ReceiptHandle": m.receipt, **extra} for i, m in enumerate(batch)
                ]
                try:
                    response = getattr(self._client, operation)(QueueUrl=url, Entries=entries)
                except (ClientError, BotoCoreError) as exc:
                    log.warning("%s on queue %r failed: %s", operation, queue, exc)
                    continue
                for failure in response.get("Failed", []):
                    log.warning("%s entry failed on queue %r: %s", operation, queue, failure)
