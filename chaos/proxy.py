"""The chaos suite's faults for the proxy in front of DynamoDB (tests/faults.py): every
worker and maintenance request goes through it, and it

- answers a share of requests itself, without forwarding them, with DynamoDB's
  throttling error (``ProvisionedThroughputExceededException``, HTTP 400) or an
  ``InternalServerError`` (HTTP 500), at a steady rate or, inside a burst window, a
  higher one;
- forwards a share of writes and then drops the response (the write is applied, the
  client sees the connection close), as when a network loses a response;
- answers HTTP 500 while DynamoDB itself is down (being restarted).

Counts what it injected, per kind.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from tests.faults import SERVER_ERROR, THROTTLE, fault_proxy

__all__ = ["DROPPED_RESPONSE", "UPSTREAM_DOWN", "FaultPlan", "fault_proxy"]

DROPPED_RESPONSE = "dropped_response"
UPSTREAM_DOWN = "upstream_down"

WRITE_TARGETS = frozenset(
    f"DynamoDB_20120810.{name}"
    for name in ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem")
)


@dataclass
class FaultPlan:
    """What the proxy injects; the harness changes ``error_rate`` and the burst window
    while it runs. Errors are half throttling, half 500s."""

    error_rate: float = 0.0
    burst_rate: float = 0.0
    burst_until: float = 0.0
    """``time.monotonic()`` until which ``burst_rate`` applies instead of ``error_rate``."""
    drop_rate: float = 0.0
    """Share of writes whose response is dropped after DynamoDB applied them."""
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

    def error_for(self, target: str) -> str | None:
        """The error to answer this request with, or ``None`` to forward it."""
        with self.lock:
            rate = self.burst_rate if time.monotonic() < self.burst_until else self.error_rate
            if self._random.random() >= rate:
                return None
            kind = THROTTLE if self._random.random() < 0.5 else SERVER_ERROR
            self.injected[kind] += 1
            return kind

    def drops(self, target: str, body: bytes) -> bool:
        with self.lock:
            self.forwarded += 1
            if target in WRITE_TARGETS and self._random.random() < self.drop_rate:
                self.injected[DROPPED_RESPONSE] += 1
                return True
            return False

    def upstream_down(self) -> None:
        with self.lock:
            self.injected[UPSTREAM_DOWN] += 1
