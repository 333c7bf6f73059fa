"""The simulated services: DynamoDB, SQS and S3 as boto3-client-shaped objects, so that our
real adapters (the DynamoDB store with its request builders and codecs, the SQS
transport) send them the very requests they send AWS.

Each request takes virtual time on the way there and on the way back (the calling
greenlet waits, and every other process may run meanwhile), and may meet a fault drawn
from the world's PRNG: refused before it applies (throttled, an SQS error), or applied
and its response lost (the caller sees a timeout, as when a network drops a response).

DynamoDB's answers come from :class:`~runlane_sqs.adapters.memory.dynamodb.InMemoryDynamoDB`
(held to the moto server and DynamoDB Local by ``tests/contract/test_dynamodb_fake.py``);
TTL deletion is a sweep (:meth:`SimDynamoDB.expire`). SQS is modelled here: at-least-once
delivery (a received message may be delivered to a second receiver too), no order, delays,
visibility timeouts, long polls and redrive to a dead-letter queue after
:data:`MAX_RECEIVES` receives.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from typing import Any

import greenlet
from botocore.exceptions import ClientError, ReadTimeoutError

from runlane_sqs.adapters.dynamodb.items import TTL_ATTRIBUTE
from runlane_sqs.adapters.dynamodb.keys import RUN_PREFIX
from runlane_sqs.adapters.memory.dynamodb import InMemoryDynamoDB
from runlane_sqs.core.limits import DEFAULT_VISIBILITY_TIMEOUT_SECONDS
from simulation.world import World

MAX_RECEIVES = 5
"""Receives of one message before SQS moves it to the dead-letter queue (the stack's
``MaxReceiveCount`` default)."""
ENDPOINT = "https://simulated.invalid"


@dataclass(frozen=True)
class Faults:
    """How often each fault strikes (a probability per request), and how long requests take."""

    throttle: float = 0.0
    """A DynamoDB request refused before it applies (``ProvisionedThroughputExceeded``)."""
    lost_write: float = 0.0
    """A DynamoDB write applied and its response lost."""
    sqs_error: float = 0.0
    """An SQS request refused before it applies."""
    lost_send: float = 0.0
    """An SQS send applied and its response lost (the sender will send it again)."""
    duplicate: float = 0.0
    """A received message also stays visible: a second receiver gets it too."""
    slow: float = 0.01
    """A request that takes 50-400 ms instead of a few."""

    @classmethod
    def none(cls) -> Faults:
        return cls(slow=0.0)


@dataclass
class Latency:
    """How long one leg of a request takes, drawn from the world's PRNG."""

    world: World
    faults: Faults

    def leg_us(self) -> int:
        rng = self.world.rng
        if rng.random() < self.faults.slow:
            return rng.randrange(50_000, 400_000)
        return rng.randrange(200, 4_000)


def _on_a_greenlet() -> bool:
    """Whether the caller may wait in virtual time: a process's greenlet runs on the main
    thread (a listing's query threads do not: their requests are answered at once)."""
    return threading.current_thread() is threading.main_thread()


def client_error(operation: str, code: str, message: str, status: int = 400) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status, "RetryAttempts": 0},
    }
    return ClientError(response, operation)


WRITES = frozenset({"put_item", "update_item", "delete_item", "transact_write_items"})
REQUESTS = WRITES | {"get_item", "query", "scan", "batch_get_item", "describe_table"}


class SimDynamoDB:
    """The in-memory DynamoDB behind a network: every request waits its legs and may meet
    a fault. Anything but a request (``create_table``, ``items``) goes straight through."""

    def __init__(self, world: World, faults: Faults) -> None:
        self.world = world
        self.faults = faults
        self.latency = Latency(world, faults)
        self.inner = InMemoryDynamoDB()
        self.requests = 0
        self.recorded: list[tuple[str, dict[str, Any], Any]] | None = None
        """Set to a list to keep every request that reached the table, in order, with its
        answer (a response, or the ``ClientError`` it was refused with)."""
        self.before_write: Callable[[dict[str, Any]], Callable[[], None] | None] | None = None
        """Asked before each write applies; what it returns is called if the write
        applied (the invariants' view of what lands, and as what)."""

    def __getattr__(self, name: str) -> Any:
        if name in REQUESTS:
            return lambda **request: self._request(name, request)
        return getattr(self.inner, name)

    def _request(self, operation: str, request: dict[str, Any]) -> Any:
        if self.world.closed:  # the history is over: a greenlet unwinding sends nothing
            raise greenlet.GreenletExit
        self.requests += 1
        waits = _on_a_greenlet() and self.world.current is not None
        rng = self.world.rng
        if waits:
            self.world.wait(self.latency.leg_us())
        if rng.random() < self.faults.throttle:
            self.world.note(f"dynamodb {operation} {_what(request)}: throttled", _run(request))
            raise client_error(
                operation, "ProvisionedThroughputExceededException", "throttled (simulated)"
            )
        response = self._apply(operation, request)
        lost = operation in WRITES and rng.random() < self.faults.lost_write
        self.world.note(
            f"dynamodb {operation} {_what(request)}: {'applied, response lost' if lost else 'ok'}",
            _run(request),
        )
        if waits:
            self.world.wait(self.latency.leg_us())
        if lost:
            raise ReadTimeoutError(endpoint_url=ENDPOINT)
        return response

    def _apply(self, operation: str, request: dict[str, Any]) -> Any:
        """The table's answer to ``request``, shown to the checks and recorded."""
        landed = None
        if operation in WRITES and self.before_write is not None:
            landed = self.before_write(request)
        try:
            response = getattr(self.inner, operation)(**request)
        except ClientError as refused:
            self.world.note(
                f"dynamodb {operation} {_what(request)}: refused {_code(refused)}", _run(request)
            )
            if self.recorded is not None:
                self.recorded.append((operation, copy.deepcopy(request), refused))
            raise
        if self.recorded is not None:
            self.recorded.append((operation, copy.deepcopy(request), copy.deepcopy(response)))
        if landed is not None:
            landed()
        return response

    def expire(self, table: str, now_seconds: float) -> list[dict[str, Any]]:
        """DynamoDB's TTL: delete every item whose ``expires_at`` has passed (AWS deletes
        them within days; the sweep only ever deletes expired items). Returns them."""
        gone = []
        for item in self.inner.items(table):
            expiry = item.get(TTL_ATTRIBUTE, {}).get("N")
            if expiry is not None and float(expiry) <= now_seconds:
                key = {"pk": item["pk"], "sk": item["sk"]}
                self.inner.delete_item(TableName=table, Key=key)
                gone.append(item)
        if gone:
            self.world.note(f"dynamodb ttl deleted {len(gone)} item(s)")
        return gone


def _what(request: dict[str, Any]) -> str:
    """A request's item, in words, for the trace."""
    key = request.get("Key") or request.get("Item")
    if key is not None:
        return f"{key['pk'].get('S', '?')}|{key['sk'].get('S', '?')}"
    if "TransactItems" in request:
        return f"{len(request['TransactItems'])} action(s)"
    if "IndexName" in request:
        return f"index {request['IndexName']}"
    return ""


def _run(request: dict[str, Any]) -> tuple[str, ...]:
    """The ids of the runs whose records ``request`` reads or writes (a transaction's
    actions each name one)."""
    actions = [next(iter(a.values())) for a in request.get("TransactItems", ())] or [request]
    ids = []
    for action in actions:
        key = action.get("Key") or action.get("Item")
        pk = key.get("pk", {}).get("S", "") if key is not None else ""
        if pk.startswith(RUN_PREFIX):
            ids.append(pk.rsplit("#", 1)[1])
    return tuple(ids)


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", "?"))


@dataclass
class Message:
    id: str
    body: str
    visible_at_us: int
    sent_at_us: int
    receipt: str = ""
    receives: int = 0


@dataclass
class Queue:
    name: str
    url: str
    dead_letters: Queue | None = None
    messages: dict[str, Message] = field(default_factory=dict)


class SimSqs:
    """SQS as the transport's boto3 client sees it (the requests it sends)."""

    def __init__(self, world: World, faults: Faults) -> None:
        self.world = world
        self.faults = faults
        self.latency = Latency(world, faults)
        self.queues: dict[str, Queue] = {}
        self._ids = count(1)
        self.visibility_us = DEFAULT_VISIBILITY_TIMEOUT_SECONDS * 1_000_000
        self.before_send: Callable[[str], None] | None = None
        """Shown each message body as it is sent (the invariants' view of publishes)."""

    def create(self, name: str) -> Queue:
        """A queue and its dead-letter queue."""
        dead = Queue(f"{name}-dlq", f"{ENDPOINT}/000000000000/{name}-dlq")
        queue = Queue(name, f"{ENDPOINT}/000000000000/{name}", dead)
        self.queues[queue.url] = queue
        self.queues[dead.url] = dead
        return queue

    def _leg(self) -> None:
        if self.world.closed:
            raise greenlet.GreenletExit
        if _on_a_greenlet() and self.world.current is not None:
            self.world.wait(self.latency.leg_us())

    def _refused(self, operation: str) -> bool:
        if self.world.rng.random() < self.faults.sqs_error:
            self.world.note(f"sqs {operation}: refused")
            return True
        return False

    # requests ----------------------------------------------------------------------------

    def get_queue_url(self, *, QueueName: str, **_: Any) -> dict[str, Any]:  # noqa: N803
        for queue in self.queues.values():
            if queue.name == QueueName:
                return {"QueueUrl": queue.url}
        raise client_error("GetQueueUrl", "AWS.SimpleQueueService.NonExistentQueue", "no queue")

    def send_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]) -> Any:  # noqa: N803
        self._send(QueueUrl, Entries)
        return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}

    def send_message(self, *, QueueUrl: str, **entry: Any) -> Any:  # noqa: N803
        return {"MessageId": self._send(QueueUrl, [entry])[0].id}

    def _send(self, url: str, entries: list[dict[str, Any]]) -> list[Message]:
        self._leg()
        if self._refused("send"):
            raise client_error("SendMessage", "RequestThrottled", "throttled (simulated)")
        queue = self.queues[url]
        now = self.world.now_us
        if self.before_send is not None:
            for entry in entries:
                self.before_send(entry["MessageBody"])
        sent = [
            self._enqueue(queue, entry["MessageBody"], now + entry.get("DelaySeconds", 0) * 10**6)
            for entry in entries
        ]
        lost = self.world.rng.random() < self.faults.lost_send
        ids = " ".join(m.id for m in sent)
        self.world.note(f"sqs send {ids} to {queue.name}: {'response lost' if lost else 'ok'}")
        self._leg()
        if lost:
            raise ReadTimeoutError(endpoint_url=ENDPOINT)
        return sent

    def _enqueue(self, queue: Queue, body: str, visible_at_us: int) -> Message:
        message = Message(f"m{next(self._ids)}", body, visible_at_us, self.world.now_us)
        queue.messages[message.id] = message
        return message

    def receive_message(self, *, QueueUrl: str, **request: Any) -> dict[str, Any]:  # noqa: N803
        """Up to ``MaxNumberOfMessages`` visible messages, in no particular order; a long
        poll waits (in virtual time) until one is visible or its wait is over."""
        queue = self.queues[QueueUrl]
        wanted = int(request.get("MaxNumberOfMessages", 1))
        ends_us = self.world.now_us + int(float(request.get("WaitTimeSeconds", 0)) * 10**6)
        visibility_us = int(request.get("VisibilityTimeout", 0)) * 10**6 or self.visibility_us
        self._leg()
        if self._refused("receive"):
            raise client_error("ReceiveMessage", "InternalError", "failed (simulated)", 500)
        while True:
            taken = self._take(queue, wanted, visibility_us)
            if taken or self.world.now_us >= ends_us or not self._waits():
                break
            self.world.wait(min(ends_us - self.world.now_us, self._next_visible_us(queue)))
        self.world.note(f"sqs receive {queue.name}: {' '.join(m['MessageId'] for m in taken)}")
        self._leg()
        return {"Messages": taken} if taken else {}

    def _waits(self) -> bool:
        return _on_a_greenlet() and self.world.current is not None

    def _next_visible_us(self, queue: Queue) -> int:
        """How long until the next hidden message shows (at most a quarter second: a
        message sent meanwhile ends the poll at the next look)."""
        now = self.world.now_us
        soonest = min((m.visible_at_us for m in queue.messages.values()), default=now + 250_000)
        return max(1_000, min(250_000, soonest - now))

    def _take(self, queue: Queue, wanted: int, visibility_us: int) -> list[dict[str, Any]]:
        now = self.world.now_us
        rng = self.world.rng
        visible = sorted(
            (m for m in queue.messages.values() if m.visible_at_us <= now), key=lambda m: m.id
        )
        rng.shuffle(visible)  # a standard queue keeps no order
        taken: list[dict[str, Any]] = []
        for message in visible:
            if len(taken) >= wanted:
                break
            if queue.dead_letters is not None and message.receives >= MAX_RECEIVES:
                del queue.messages[message.id]
                queue.dead_letters.messages[message.id] = message
                message.visible_at_us = now
                self.world.note(f"sqs {message.id} moved to {queue.dead_letters.name}")
                continue
            message.receives += 1
            message.receipt = f"{message.id}-r{next(self._ids)}"
            if rng.random() >= self.faults.duplicate:
                message.visible_at_us = now + visibility_us
            taken.append(
                {
                    "MessageId": message.id,
                    "ReceiptHandle": message.receipt,
                    "Body": message.body,
                    "Attributes": {
                        "ApproximateReceiveCount": str(message.receives),
                        "SentTimestamp": str(message.sent_at_us // 1000),
                    },
                }
            )
        return taken

    def delete_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]) -> Any:  # noqa: N803
        return self._by_receipt("delete", QueueUrl, Entries, self._delete)

    def change_message_visibility_batch(
        self,
        *,
        QueueUrl: str,  # noqa: N803
        Entries: list[dict[str, Any]],  # noqa: N803
    ) -> Any:
        return self._by_receipt("visibility", QueueUrl, Entries, self._show)

    def _by_receipt(
        self,
        operation: str,
        url: str,
        entries: list[dict[str, Any]],
        act: Callable[[Queue, Message, dict[str, Any]], None],
    ) -> Any:
        self._leg()
        if self._refused(operation):
            raise client_error(operation, "InternalError", "failed (simulated)", 500)
        queue = self.queues[url]
        done = []
        for entry in entries:
            message_id = entry["ReceiptHandle"].split("-r")[0]
            message = queue.messages.get(message_id)
            if message is not None:  # SQS accepts an old receipt of a message it still has
                act(queue, message, entry)
            done.append(message_id)
        self.world.note(f"sqs {operation} {queue.name}: {' '.join(done)}")
        self._leg()
        return {"Successful": [{"Id": e["Id"]} for e in entries], "Failed": []}

    @staticmethod
    def _delete(queue: Queue, message: Message, entry: dict[str, Any]) -> None:
        del queue.messages[message.id]

    def _show(self, queue: Queue, message: Message, entry: dict[str, Any]) -> None:
        message.visible_at_us = self.world.now_us + int(entry.get("VisibilityTimeout", 0)) * 10**6

    def get_queue_attributes(self, *, QueueUrl: str, AttributeNames: list[str]) -> Any:  # noqa: N803
        queue = self.queues[QueueUrl]
        if "RedrivePolicy" in AttributeNames:
            return {"Attributes": {}}
        now = self.world.now_us
        hidden = [m for m in queue.messages.values() if m.visible_at_us > now]
        in_flight = sum(1 for m in hidden if m.receives)
        return {
            "Attributes": {
                "ApproximateNumberOfMessages": str(len(queue.messages) - len(hidden)),
                "ApproximateNumberOfMessagesDelayed": str(len(hidden) - in_flight),
                "ApproximateNumberOfMessagesNotVisible": str(in_flight),
            }
        }

    def depth(self) -> int:
        """Messages on every queue but the dead-letter queues."""
        return sum(len(q.messages) for q in self.queues.values() if q.dead_letters is not None)


class _Body:
    """A response's streamed body, as botocore's ``StreamingBody`` reads."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def read(self, size: int | None = None) -> bytes:
        return self._data if size is None else self._data[:size]

    def close(self) -> None:
        """Nothing to release."""


class SimS3:
    """The payload bucket as the S3 adapter's boto3 client sees it."""

    def __init__(self, world: World, faults: Faults) -> None:
        self.world = world
        self.faults = faults
        self.latency = Latency(world, faults)
        self.objects: dict[str, bytes] = {}

    def _leg(self) -> None:
        if self.world.closed:
            raise greenlet.GreenletExit
        if _on_a_greenlet() and self.world.current is not None:
            self.world.wait(self.latency.leg_us())

    def _send(self, operation: str, key: str, apply: Callable[[], Any]) -> Any:
        self._leg()
        if self.world.rng.random() < self.faults.throttle:
            self.world.note(f"s3 {operation} {key}: slow down")
            raise client_error(operation, "SlowDown", "slow down (simulated)", 503)
        response = apply()
        lost = operation != "GetObject" and self.world.rng.random() < self.faults.lost_write
        self.world.note(f"s3 {operation} {key}: {'applied, response lost' if lost else 'ok'}")
        self._leg()
        if lost:
            raise ReadTimeoutError(endpoint_url=ENDPOINT)
        return response

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **_: Any) -> Any:  # noqa: N803
        def put() -> Any:
            self.objects[Key] = bytes(Body)
            return {}

        return self._send("PutObject", Key, put)

    def get_object(self, *, Bucket: str, Key: str, **_: Any) -> Any:  # noqa: N803
        def get() -> Any:
            data = self.objects.get(Key)
            if data is None:
                raise client_error("GetObject", "NoSuchKey", "no such key")
            return {"Body": _Body(data), "ContentLength": len(data)}

        return self._send("GetObject", Key, get)

    def delete_object(self, *, Bucket: str, Key: str, **_: Any) -> Any:  # noqa: N803
        def delete() -> Any:
            self.objects.pop(Key, None)
            return {}

        return self._send("DeleteObject", Key, delete)
