"""The client CPU of one request, botocore against the lean client (issue 34).

For each client kind (``RUNLANE_AWS_CLIENT``: ``botocore``, ``lean``) an
:class:`~runlane_sqs.adapters.aws.AwsClients` is built against the backend, with the
app's default botocore config, and sends the per-run requests one at a time from this
process: a conditional ``UpdateItem`` that returns the item (as a claim does), a
``GetItem``, a ``SendMessage`` and a ``ReceiveMessage`` that gets it back with the
``DeleteMessageBatch`` of it. Each request is sent :data:`WARM_UP` times, then
``calls`` times measured: the process's CPU time (``time.process_time``, every thread of
this process: nothing else runs in it meanwhile) and the wall time, per request. The
kinds alternate over :data:`ROUNDS` rounds so that a change in the machine's load
shows in both; the figure is each kind's median round.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.backends import Backend
from runlane_sqs.adapters.aws import AWS_CLIENT_KINDS, AwsClients
from runlane_sqs.local import LOCAL_REGION

WARM_UP = 50
ROUNDS = 3
Progress = Callable[[int], None]


@dataclass
class ClientRow:
    """One kind of client and one request: CPU and wall time per request, per round."""

    kind: str
    request: str
    cpu_us: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "request": self.request,
            "cpu_us": statistics.median(self.cpu_us) if self.cpu_us else None,
            "wall_ms": statistics.median(self.wall_ms) if self.wall_ms else None,
            "rounds_cpu_us": self.cpu_us,
        }


def _requests(clients: AwsClients, table: str, queue_url: str) -> dict[str, Callable[[], Any]]:
    """Each measured request, ready to send."""
    dynamodb, sqs = clients.client("dynamodb"), clients.client("sqs")
    key = {"pk": {"S": "bench"}}

    def claim() -> Any:
        return dynamodb.update_item(
            TableName=table,
            Key=key,
            UpdateExpression="SET #seq = #seq + :one, #owner = :owner",
            ConditionExpression="attribute_exists(#seq)",
            ExpressionAttributeNames={"#seq": "seq", "#owner": "owner"},
            ExpressionAttributeValues={":one": {"N": "1"}, ":owner": {"S": "worker-1"}},
            ReturnValues="ALL_NEW",
        )

    def read() -> Any:
        return dynamodb.get_item(TableName=table, Key=key, ConsistentRead=True)

    def send() -> Any:
        return sqs.send_message(QueueUrl=queue_url, MessageBody='{"run":"r","v":1}')

    def receive_and_delete() -> Any:
        received = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1)
        handles = [m["ReceiptHandle"] for m in received.get("Messages", [])]
        entries = [{"Id": str(n), "ReceiptHandle": h} for n, h in enumerate(handles)]
        if entries:
            sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)
        return received

    return {
        "UpdateItem": claim,
        "GetItem": read,
        "SendMessage": send,
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


def measure_clients(
    backend: Backend, calls: int, progress: Progress, *, warm_up: int = WARM_UP
) -> list[ClientRow]:
    table, queue_url = _provision(backend)
    rows: dict[tuple[str, str], ClientRow] = {}
    done = 0
    for _ in range(ROUNDS):
        for kind in AWS_CLIENT_KINDS:
            # the endpoints and credentials come from the variables the backend set
            clients = AwsClients(region=LOCAL_REGION, endpoint_url=None, aws_client=kind)
            for request, call in _requests(clients, table, queue_url).items():
                row = rows.setdefault((kind, request), ClientRow(kind, request))
                for _ in range(warm_up):
                    call()
                cpu, wall = time.process_time(), time.perf_counter()
                for _ in range(calls):
                    call()
                row.cpu_us.append((time.process_time() - cpu) / calls * 1e6)
                row.wall_ms.append((time.perf_counter() - wall) / calls * 1e3)
                done += 1
                progress(done)
    return list(rows.values())


STEPS = ROUNDS * len(AWS_CLIENT_KINDS) * 4
"""Progress steps of :func:`measure_clients`: one per kind, request and round."""
