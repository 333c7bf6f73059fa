"""The chaos suite's faults for the proxy in front of DynamoDB and SQS (tests/faults.py):
every request of the workers, of maintenance and of the harness's triggers goes through
it. For DynamoDB it

- answers a share of requests itself, without forwarding them, with DynamoDB's
  throttling error (``ProvisionedThroughputExceededException``, HTTP 400) or an
  ``InternalServerError`` (HTTP 500), at a steady rate or, inside a burst window, a
  higher one;
- forwards a share of writes and then drops the response (the write is applied, the
  client sees the connection close), as when a network loses a response;
- answers HTTP 500 while DynamoDB itself is down (being restarted).

For SQS it

- answers a share of every kind of request (send, receive, delete, visibility) with
  SQS's ``RequestThrottled`` (HTTP 400) or ``InternalError`` (HTTP 500);
- forwards a share of sends and drops the response: the message is queued, the sender
  sees an error (and sends again);
- forwards a share of sends twice: the queue holds the message twice, as SQS's
  at-least-once delivery allows;
- answers a share of deletes at once and forwards them only after the visibility
  timeout: the message is received again before its delete lands.

Counts what it injected, per kind.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from tests.faults import SERVER_ERROR, SQS_SERVER_ERROR, SQS_THROTTLE, THROTTLE, fault_proxy

__all__ = ["DROPPED_RESPONSE", "UPSTREAM_DOWN", "FaultPlan", "fault_proxy"]

DROPPED_RESPONSE = "dropped_response"
UPSTREAM_DOWN = "upstream_down"
LOST_SEND = "lost_send"
DOUBLE_SEND = "double_send"
LATE_DELETE = "late_delete"

WRITE_TARGETS = frozenset(
    f"DynamoDB_20120810.{name}"
    for name in ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem")
)
SQS = "AmazonSQS."
SEND_TARGETS = frozenset({"AmazonSQS.SendMessage", "AmazonSQS.SendMessageBatch"})
DELETE = "AmazonSQS.DeleteMessage"
DELETE_BATCH = "AmazonSQS.DeleteMessageBatch"


@dataclass
class FaultPlan:
    """What the proxy injects; the harness changes ``error_rate`` and the burst window
    while it runs. Errors are half throttling, half 500s."""

    error_rate: float = 0.0
    burst_rate: float = 0.0
    burst_until: float = 0.0
    """``time.monotonic()`` until which ``burst_rate`` applies instead of ``error_rate``."""
    drop_rate: float = 0.0
    """Share of DynamoDB writes whose response is dropped after DynamoDB applied them."""
    sqs_error_rate: float = 0.0
    lost_send_rate: float = 0.0
    double_send_rate: float = 0.0
    late_delete_rate: float = 0.0
    late_delete_seconds: float = 65.0
    """After the queues' visibility timeout (60 s)."""
    seed: int = 0
    injected: Counter[str] = field(default_factory=Counter)
    forwarded: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def burst(self, rate: float, seconds: float) -> None:
        with self.lock:
            self.burst_rate = rate
            self.burst_until = time.monotonic() + seconds

    def _hit(self, rate: float) -> bool:
        return self._random.random() < rate

    def error_for(self, target: str) -> str | None:
        """The error to answer this request with, or ``None`` to forward it."""
        with self.lock:
            if target.startswith(SQS):
                rate, kinds = self.sqs_error_rate, (SQS_THROTTLE, SQS_SERVER_ERROR)
            else:
                in_burst = time.monotonic() < self.burst_until
                rate = self.burst_rate if in_burst else self.error_rate
                kinds = (THROTTLE, SERVER_ERROR)
            if not self._hit(rate):
                return None
            kind = kinds[0] if self._random.random() < 0.5 else kinds[1]
            self.injected[kind] += 1
            return kind

    def drops(self, target: str, body: bytes) -> bool:
        with self.lock:
            self.forwarded += 1
            if target in WRITE_TARGETS and self._hit(self.drop_rate):
                self.injected[DROPPED_RESPONSE] += 1
                return True
            if target in SEND_TARGETS and self._hit(self.lost_send_rate):
                self.injected[LOST_SEND] += 1
                return True
            return False

    def copies(self, target: str, body: bytes) -> int:
        with self.lock:
            if target in SEND_TARGETS and self._hit(self.double_send_rate):
                self.injected[DOUBLE_SEND] += 1
                return 1
            return 0

    def deferred(self, target: str, body: bytes) -> tuple[float, bytes] | None:
        with self.lock:
            if target not in (DELETE, DELETE_BATCH) or not self._hit(self.late_delete_rate):
                return None
            self.injected[LATE_DELETE] += 1
        if target == DELETE:
            return self.late_delete_seconds, b"{}"
        entries = json.loads(body).get("Entries", [])
        answer = {"Successful": [{"Id": e["Id"]} for e in entries], "Failed": []}
        return self.late_delete_seconds, json.dumps(answer).encode()

    def upstream_down(self) -> None:
        with self.lock:
            self.injected[UPSTREAM_DOWN] += 1
