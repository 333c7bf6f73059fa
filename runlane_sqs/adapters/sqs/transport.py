"""The SQS wakeup transport (sync, boto3)."""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from runlane_sqs.adapters.aws import endpoint_of
from runlane_sqs.core.clock import from_epoch_ms, to_epoch_ms
from runlane_sqs.core.errors import MissingResourceError, TransportError
from runlane_sqs.core.limits import (
    MAX_QUEUE_NAME_CHARS,
    MAX_RECEIVE_BATCH,
    MAX_SEND_BATCH,
)
from runlane_sqs.core.wakeup import Wakeup, delay_seconds
from runlane_sqs.ports.transport import DeadLetter, QueueBacklog, ReceivedWakeup

log = logging.getLogger("runlane_sqs.transport")
T = TypeVar("T")
W = TypeVar("W")

COUNTS = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesDelayed",
    "ApproximateNumberOfMessagesNotVisible",
]
"""What :meth:`SqsTransport.backlog` reads: visible, delayed and in-flight messages."""
MISSING_QUEUE_CODES = frozenset(
    {"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "NonExistentQueue"}
)


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def dead_letter_target(policy: str | None) -> tuple[str, str] | None:
    """The dead-letter queue's name and owning account from a ``RedrivePolicy``
    (``None``: no policy, or one without a target)."""
    if not policy:
        return None
    try:
        arn = json.loads(policy).get("deadLetterTargetArn")
    except (ValueError, AttributeError):
        return None
    parts = arn.split(":") if isinstance(arn, str) else []
    if len(parts) != 6 or not parts[5]:
        return None
    return parts[5], parts[4]


def is_fifo(url: str) -> bool:
    return url.endswith(".fifo")


def by_queue(items: Sequence[W], queue_of: Callable[[W], str]) -> dict[str, list[W]]:
    grouped: dict[str, list[W]] = defaultdict(list)
    for item in items:
        grouped[queue_of(item)].append(item)
    return grouped


def fifo_message_id(wakeup: Wakeup) -> str:
    """The message group and deduplication id of a wakeup on a FIFO queue: the run and
    the publish's millisecond, so each publish of a run is a group of its own.

    A group per run would put a republished wakeup behind the same run's message still
    in flight (a killed Lambda invocation's, or a record reported for redelivery): SQS
    delivers nothing of a group while one of its messages is in flight, so the run would
    wait out the visibility timeout. The order between runs is never the message
    group's to keep (docs/deploy-lambda.md, "FIFO queues")."""
    return f"{wakeup.run_id}-{to_epoch_ms(wakeup.requested_at)}"


def send_entry(url: str, index: int, wakeup: Wakeup, delay: int) -> dict[str, Any]:
    """One ``SendMessageBatch`` entry (FIFO queues: a group per publish, no delay)."""
    entry: dict[str, Any] = {"Id": str(index), "MessageBody": wakeup.to_json()}
    if is_fifo(url):
        entry["MessageGroupId"] = entry["MessageDeduplicationId"] = fifo_message_id(wakeup)
    elif delay:
        entry["DelaySeconds"] = delay
    return entry


def send_request(url: str, batch: Sequence[Wakeup], delay: int) -> tuple[str, dict[str, Any]]:
    """The operation and arguments that send ``batch``: one message is a ``SendMessage``."""
    entries = [send_entry(url, i, w, delay) for i, w in enumerate(batch)]
    if len(entries) == 1:
        entry = entries[0]
        entry.pop("Id")
        return "send_message", {"QueueUrl": url, **entry}
    return "send_message_batch", {"QueueUrl": url, "Entries": entries}


def unsent(batch: Sequence[Wakeup], response: Mapping[str, Any]) -> list[Wakeup]:
    failed_ids = {int(f["Id"]) for f in response.get("Failed", [])}
    return [batch[i] for i in sorted(failed_ids)]


def receive_request(url: str, max_messages: int, wait_seconds: float) -> dict[str, Any]:
    return {
        "QueueUrl": url,
        "MaxNumberOfMessages": max(1, min(MAX_RECEIVE_BATCH, max_messages)),
        "WaitTimeSeconds": int(wait_seconds),
        "MessageSystemAttributeNames": ["ApproximateReceiveCount"],
    }


def received(queue: str, response: Mapping[str, Any]) -> list[ReceivedWakeup]:
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


def dead_letter(queue: str, url: str, message: Mapping[str, Any]) -> DeadLetter:
    attributes = message.get("Attributes", {})
    sent = attributes.get("SentTimestamp")
    return DeadLetter(
        queue=queue,
        url=url,
        body=message.get("Body", ""),
        receipt=message["ReceiptHandle"],
        message_id=message.get("MessageId", ""),
        receive_count=int(attributes.get("ApproximateReceiveCount", 1)),
        sent_at=from_epoch_ms(int(sent)) if sent else None,
    )


def handle_entries(batch: Sequence[ReceivedWakeup], extra: Mapping[str, Any]) -> list[Any]:
    """Entries of a ``DeleteMessageBatch`` or ``ChangeMessageVisibilityBatch``."""
    return [{"Id": str(i), "ReceiptHandle": m.receipt, **extra} for i, m in enumerate(batch)]


def missing_queue(name: str, endpoint: str | None, exc: ClientError) -> Exception:
    """:class:`MissingResourceError` for an absent queue, else a :class:`TransportError`."""
    if exc.response.get("Error", {}).get("Code") in MISSING_QUEUE_CODES:
        where = endpoint or "the default AWS endpoint"
        return MissingResourceError(
            f"SQS queue {name!r} does not exist at {where}; create it with "
            "app.provision() (local use) or your CloudFormation stack (AWS)"
        )
    return TransportError(f"cannot look up SQS queue {name!r}: {exc}")


def checked_queue_name(name: str) -> str:
    """``name`` if SQS accepts its length; else a :class:`MissingResourceError` (no such
    queue can exist) saying how to shorten it."""
    if len(name) > MAX_QUEUE_NAME_CHARS:
        raise MissingResourceError(
            f"SQS queue name {name!r} is {len(name)} characters; SQS allows "
            f"{MAX_QUEUE_NAME_CHARS}: use a shorter queue or environment name, a shorter "
            "queue_prefix (RUNLANE_QUEUE_PREFIX) or name the queue by URL (queue_urls)"
        )
    return name


class SqsTransport:
    """Wakeups on SQS queues named ``{queue_prefix}{queue}`` or given by URL.

    The app passes its configuration's prefix (``runlane-{environment}-`` unless it was
    given one)."""

    def __init__(
        self,
        client: Any,
        *,
        queue_prefix: str,
        queue_urls: Mapping[str, str] | None = None,
    ) -> None:
        self._client = client
        self.queue_prefix = queue_prefix
        self._urls: dict[str, str] = dict(queue_urls or {})
        self._dead_letter_urls: dict[tuple[str, str], str] = {}
        """Dead-letter queues' URLs by name and owner, looked up once."""
        self._lock = threading.Lock()

    @property
    def _endpoint(self) -> str | None:
        return endpoint_of(self._client)

    def queue_name(self, queue: str) -> str:
        """The SQS name of logical queue ``queue`` (not looked up)."""
        return checked_queue_name(f"{self.queue_prefix}{queue}")

    def queue_url(self, queue: str) -> str:
        """The URL of a logical queue, looked up once; a clear error if it does not exist."""
        with self._lock:
            if queue in self._urls:
                return self._urls[queue]
        name = self.queue_name(queue)
        try:
            url = str(self._client.get_queue_url(QueueName=name)["QueueUrl"])
        except ClientError as exc:
            raise missing_queue(name, self._endpoint, exc) from exc
        except BotoCoreError as exc:
            raise TransportError(f"cannot reach SQS: {exc}") from exc
        with self._lock:
            self._urls[queue] = url
        return url

    def cached_url(self, queue: str) -> str | None:
        """The URL of a queue already looked up (or configured), without a request."""
        with self._lock:
            return self._urls.get(queue)

    def check_queue(self, queue: str) -> None:
        self.queue_url(queue)

    def publish(self, wakeups: Sequence[Wakeup], delay: timedelta | None = None) -> list[Wakeup]:
        failed: list[Wakeup] = []
        seconds = delay_seconds(delay)
        for queue, group in by_queue(wakeups, lambda w: w.queue).items():
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

    def _send(self, url: str, batch: Sequence[Wakeup], delay: int) -> list[Wakeup]:
        operation, request = send_request(url, batch, delay)
        try:
            response = getattr(self._client, operation)(**request)
        except (ClientError, BotoCoreError) as exc:
            log.warning("publishing %d wakeup(s) failed: %s", len(batch), exc)
            return list(batch)
        return unsent(batch, response)

    def backlog(self, queue: str) -> QueueBacklog:
        url = self.queue_url(queue)
        try:
            response = self._client.get_queue_attributes(QueueUrl=url, AttributeNames=COUNTS)
        except (ClientError, BotoCoreError) as exc:
            raise TransportError(f"counting SQS queue {queue!r} failed: {exc}") from exc
        counts = response.get("Attributes", {})
        visible, delayed, in_flight = (int(counts.get(name, 0)) for name in COUNTS)
        return QueueBacklog(visible=visible, delayed=delayed, in_flight=in_flight)

    def dead_letter_url(self, queue: str) -> str | None:
        """The URL of the queue's dead-letter queue (its redrive policy's target), looked
        up once; ``None`` when the queue has none."""
        policy = (
            self._client.get_queue_attributes(
                QueueUrl=self.queue_url(queue), AttributeNames=["RedrivePolicy"]
            )
            .get("Attributes", {})
            .get("RedrivePolicy")
        )
        target = dead_letter_target(policy)
        if target is None:
            return None
        url = self._dead_letter_urls.get(target)
        if url is None:
            name, owner = target
            found = self._client.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=owner)
            url = self._dead_letter_urls[target] = str(found["QueueUrl"])
        return url

    def dead_letters(self, queue: str) -> int | None:
        """Messages in the queue's dead-letter queue, visible or not; ``None`` when the
        queue has none."""
        try:
            url = self.dead_letter_url(queue)
            if url is None:
                return None
            counts = self._client.get_queue_attributes(QueueUrl=url, AttributeNames=COUNTS).get(
                "Attributes", {}
            )
        except (ClientError, BotoCoreError) as exc:
            raise TransportError(f"counting the dead letters of {queue!r} failed: {exc}") from exc
        return sum(int(counts.get(name, 0)) for name in COUNTS)

    def take_dead_letters(self, queue: str, limit: int, hold: timedelta) -> list[DeadLetter] | None:
        letters: list[DeadLetter] = []
        try:
            url = self.dead_letter_url(queue)
            if url is None:
                return None
            while len(letters) < limit:
                response = self._client.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=min(MAX_RECEIVE_BATCH, limit - len(letters)),
                    VisibilityTimeout=max(1, int(hold.total_seconds())),
                    WaitTimeSeconds=1,
                    MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
                )
                taken = [dead_letter(queue, url, m) for m in response.get("Messages", [])]
                if not taken:
                    break
                letters += taken
        except (ClientError, BotoCoreError) as exc:
            self.return_dead_letters(letters)
            raise TransportError(f"reading the dead letters of {queue!r} failed: {exc}") from exc
        return letters

    def return_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        self._dead_letter_batch(
            "change_message_visibility_batch", letters, {"VisibilityTimeout": 0}
        )

    def delete_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        self._dead_letter_batch("delete_message_batch", letters, {})

    def resend(self, letter: DeadLetter) -> None:
        url = self.queue_url(letter.queue)
        request: dict[str, Any] = {"QueueUrl": url, "MessageBody": letter.body}
        if is_fifo(url):
            request["MessageGroupId"] = request["MessageDeduplicationId"] = letter.message_id
        try:
            self._client.send_message(**request)
        except (ClientError, BotoCoreError) as exc:
            raise TransportError(
                f"sending a dead letter back to {letter.queue!r} failed: {exc}"
            ) from exc

    def _dead_letter_batch(
        self, operation: str, letters: Sequence[DeadLetter], extra: dict[str, Any]
    ) -> None:
        for url, group in by_queue(letters, lambda m: m.url).items():
            for batch in chunks(group, MAX_SEND_BATCH):
                entries = [
                    {"Id": str(i), "ReceiptHandle": letter.receipt, **extra}
                    for i, letter in enumerate(batch)
                ]
                response = getattr(self._client, operation)(QueueUrl=url, Entries=entries)
                log_failed_entries(operation, f"{batch[0].queue} (dead letters)", response)

    def receive(self, queue: str, max_messages: int, wait_seconds: float) -> list[ReceivedWakeup]:
        request = receive_request(self.queue_url(queue), max_messages, wait_seconds)
        try:
            response = self._client.receive_message(**request)
        except (ClientError, BotoCoreError) as exc:
            raise TransportError(f"receiving from SQS queue {queue!r} failed: {exc}") from exc
        return received(queue, response)

    def ack(self, messages: Sequence[ReceivedWakeup]) -> None:
        self._batch("delete_message_batch", messages, {})

    def release(self, messages: Sequence[ReceivedWakeup]) -> None:
        self._batch("change_message_visibility_batch", messages, {"VisibilityTimeout": 0})

    def _batch(
        self, operation: str, messages: Sequence[ReceivedWakeup], extra: dict[str, Any]
    ) -> None:
        for queue, group in by_queue(messages, lambda m: m.queue).items():
            url = self.queue_url(queue)
            for batch in chunks(group, MAX_SEND_BATCH):
                entries = handle_entries(batch, extra)
                try:
                    response = getattr(self._client, operation)(QueueUrl=url, Entries=entries)
                except (ClientError, BotoCoreError) as exc:
                    log.warning("%s on queue %r failed: %s", operation, queue, exc)
                    continue
                log_failed_entries(operation, queue, response)


def log_failed_entries(operation: str, queue: str, response: Mapping[str, Any]) -> None:
    for failure in response.get("Failed", []):
        log.warning("%s entry failed on queue %r: %s", operation, queue, failure)
