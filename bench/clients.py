"""The client CPU of one request, botocore against the lean client (issue 34).

For each client kind (``RUNLANE_AWS_CLIENT``: ``botocore``, ``lean``) an
:class:`~runlane_sqs.adapters.aws.AwsClients` is built against the backend, with the
app's default botocore config, and its clients send the per-run requests one at a time
from this process, the sync worker's (boto3) and the async worker's (aiobotocore, opened
as the async worker opens them): a conditional ``UpdateItem`` that returns the item (as a
claim does), a ``GetItem``, a ``SendMessage`` and a ``ReceiveMessage`` that gets it back with the
``DeleteMessageBatch`` of it. Each request is sent :data:`WARM_UP` times, then
``calls`` times measured: the process's CPU time (``time.process_time``, every thread of
this process: nothing else runs in it meanwhile) and the wall time, per request. The
kinds alternate over :data:`ROUNDS` rounds so that a change in the machine's load
shows in both; the figure is each kind's median round.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from bench.backends import Backend
from runlane_sqs.adapters.aws import AWS_CLIENT_KINDS, AwsClients
from runlane_sqs.local import LOCAL_REGION
from runlane_sqs.runtime.aio.backend import new_session, open_client

WARM_UP = 50
ROUNDS = 3
Progress = Callable[[int], None]


@dataclass
class ClientRow:
    """One kind of client and one request: CPU and wall time per request, per round."""

    kind: str
    worker: str
    """``sync`` (boto3's clients) or ``async`` (aiobotocore's)."""
    request: str
    cpu_us: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "worker": self.worker,
            "request": self.request,
            "cpu_us": statistics.median(self.cpu_us) if self.cpu_us else None,
            "wall_ms": statistics.median(self.wall_ms) if self.wall_ms else None,
            "rounds_cpu_us": self.cpu_us,
        }


KEY = {"pk": {"S": "bench"}}
BODY = '{"run":"r","v":1}'


def _claim(table: str) -> dict[str, Any]:
    """A claim-like conditional ``UpdateItem`` that returns the item."""
    return {
        "TableName": table,
        "Key": KEY,
        "UpdateExpression": "SET #seq = #seq + :one, #owner = :owner",
        "ConditionExpression": "attribute_exists(#seq)",
        "ExpressionAttributeNames": {"#seq": "seq", "#owner": "owner"},
        "ExpressionAttributeValues": {":one": {"N": "1"}, ":owner": {"S": "worker-1"}},
        "ReturnValues": "ALL_NEW",
    }


def _deletes(received: dict[str, Any]) -> list[dict[str, str]]:
    handles = [m["ReceiptHandle"] for m in received.get("Messages", [])]
    return [{"Id": str(n), "ReceiptHandle": h} for n, h in enumerate(handles)]


def _requests(clients: AwsClients, table: str, queue_url: str) -> dict[str, Callable[[], Any]]:
    """Each measured request, ready to send with the sync clients."""
    dynamodb, sqs = clients.client("dynamodb"), clients.client("sqs")

    def receive_and_delete() -> Any:
        received = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1)
        if entries := _deletes(received):
            sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)
        return received

    return {
        "UpdateItem": lambda: dynamodb.update_item(**_claim(table)),
        "GetItem": lambda: dynamodb.get_item(TableName=table, Key=KEY, ConsistentRead=True),
        "SendMessage": lambda: sqs.send_message(QueueUrl=queue_url, MessageBody=BODY),
        "ReceiveMessage + DeleteMessageBatch": receive_and_delete,
    }


def _async_requests(
    dynamodb: Any, sqs: Any, table: str, queue_url: str
) -> dict[str, Callable[[], Awaitable[Any]]]:
    """:func:`_requests` for the async clients."""

    async def receive_and_delete() -> Any:
        received = await sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1)
        if entries := _deletes(received):
            await sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)
        return received

    return {
        "UpdateItem": lambda: dynamodb.update_item(**_claim(table)),
        "GetItem": lambda: dynamodb.get_item(TableName=table, Key=KEY, ConsistentRead=True),
        "SendMessage": lambda: sqs.send_message(QueueUrl=queue_url, MessageBody=BODY),
        "ReceiveMessage + DeleteMessageBatch": receive_and_delete,
    }


def _provision(backend: Backend) -> tuple[str, str]:
    """A table with the one item the requests update, and a queue."""
    name = f"bench-clients-{uuid.uuid4().hex[:8]}"
    dynamodb = backend.client("dynamodb")
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.get_waiter("table_exists").wait(TableName=name)
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "bench"}, "seq": {"N": "0"}})
    queue_url = backend.client("sqs").create_queue(QueueName=name)["QueueUrl"]
    return name, queue_url


class _Measure:
    """Sends each request ``warm_up`` times, then ``calls`` times measured, into ``rows``."""

    def __init__(self, calls: int, warm_up: int, progress: Progress) -> None:
        self.calls, self.warm_up, self.progress = calls, warm_up, progress
        self.rows: dict[tuple[str, str, str], ClientRow] = {}
        self.done = 0

    def row(self, kind: str, worker: str, request: str) -> ClientRow:
        return self.rows.setdefault((kind, worker, request), ClientRow(kind, worker, request))

    def record(self, row: ClientRow, cpu: float, wall: float) -> None:
        row.cpu_us.append((time.process_time() - cpu) / self.calls * 1e6)
        row.wall_ms.append((time.perf_counter() - wall) / self.calls * 1e3)
        self.done += 1
        self.progress(self.done)

    def sync(self, kind: str, requests: dict[str, Callable[[], Any]]) -> None:
        for request, call in requests.items():
            row = self.row(kind, "sync", request)
            for _ in range(self.warm_up):
                call()
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(self.calls):
                call()
            self.record(row, cpu, wall)

    async def async_(self, kind: str, clients: AwsClients, table: str, queue_url: str) -> None:
        async with AsyncExitStack() as stack:
            session = new_session(models_from=clients.session)
            dynamodb = await open_client(clients, session, "dynamodb", stack)
            sqs = await open_client(clients, session, "sqs", stack)
            for request, call in _async_requests(dynamodb, sqs, table, queue_url).items():
                row = self.row(kind, "async", request)
                for _ in range(self.warm_up):
                    await call()
                cpu, wall = time.process_time(), time.perf_counter()
                for _ in range(self.calls):
                    await call()
                self.record(row, cpu, wall)


def measure_clients(
    backend: Backend, calls: int, progress: Progress, *, warm_up: int = WARM_UP
) -> list[ClientRow]:
    table, queue_url = _provision(backend)
    measure = _Measure(calls, warm_up, progress)
    for _ in range(ROUNDS):
        for kind in AWS_CLIENT_KINDS:
            # the endpoints and credentials come from the variables the backend set
            clients = AwsClients(region=LOCAL_REGION, endpoint_url=None, aws_client=kind)
            measure.sync(kind, _requests(clients, table, queue_url))
            asyncio.run(measure.async_(kind, clients, table, queue_url))
    return list(measure.rows.values())


STEPS = ROUNDS * len(AWS_CLIENT_KINDS) * 4 * 2
"""Progress steps of :func:`measure_clients`: one per kind, worker, request and round."""
