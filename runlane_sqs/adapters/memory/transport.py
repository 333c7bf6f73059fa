"""An in-memory wakeup transport with SQS's visibility semantics, driven by a clock."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from runlane_sqs.core.clock import Clock, SystemClock
from runlane_sqs.core.wakeup import Wakeup, delay_seconds
from runlane_sqs.ports.transport import QueueBacklog, ReceivedWakeup


@dataclass
class _Message:
    message_id: str
    body: str
    visible_at: datetime
    receipt: str | None = None
    receive_count: int = 0


class InMemoryTransport:
    """Queues in lists. ``visibility_timeout`` hides received messages like SQS does."""

    def __init__(self, clock: Clock | None = None, visibility_timeout: float = 60.0) -> None:
        self._clock = clock or SystemClock()
        self._visibility = timedelta(seconds=visibility_timeout)
        self._queues: dict[str, list[_Message]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.fail_publish = False
        """Set to make every publish fail, as an SQS outage would."""

    def publish(self, wakeups: Sequence[Wakeup], delay: timedelta | None = None) -> list[Wakeup]:
        if self.fail_publish:
            return list(wakeups)
        visible_at = self._clock.now() + timedelta(seconds=delay_seconds(delay))
        with self._lock:
            for wakeup in wakeups:
                self.send_raw(wakeup.queue, wakeup.to_json(), visible_at)
        return []

    def send_raw(self, queue: str, body: str, visible_at: datetime | None = None) -> None:
        """Put any body on a queue (tests use it for forged and malformed messages)."""
        message = _Message(f"m{next(self._ids)}", body, visible_at or self._clock.now())
        self._queues.setdefault(queue, []).append(message)

    def check_queue(self, queue: str) -> None:
        """Every queue exists in memory."""

    def receive(self, queue: str, max_messages: int, wait_seconds: float) -> list[ReceivedWakeup]:
        now = self._clock.now()
        out: list[ReceivedWakeup] = []
        with self._lock:
            for message in self._queues.get(queue, []):
                if len(out) >= max_messages:
                    break
                if message.visible_at > now:
                    continue
                message.receipt = f"{message.message_id}-r{next(self._ids)}"
                message.receive_count += 1
                message.visible_at = now + self._visibility
                out.append(
                    ReceivedWakeup(
                        queue,
                        message.body,
                        message.receipt,
                        message.message_id,
                        message.receive_count,
                    )
                )
        return out

    def ack(self, messages: Sequence[ReceivedWakeup]) -> None:
        receipts = {m.receipt for m in messages}
        with self._lock:
            for queue, items in self._queues.items():
                self._queues[queue] = [m for m in items if m.receipt not in receipts]

    def release(self, messages: Sequence[ReceivedWakeup]) -> None:
        receipts = {m.receipt for m in messages}
        now = self._clock.now()
        with self._lock:
            for items in self._queues.values():
                for message in items:
                    if message.receipt in receipts:
                        message.visible_at = now

    def backlog(self, queue: str) -> QueueBacklog:
        """Visible, delayed (never received, not yet visible) and in-flight messages."""
        now = self._clock.now()
        with self._lock:
            messages = list(self._queues.get(queue, []))
        hidden = [m for m in messages if m.visible_at > now]
        in_flight = sum(1 for m in hidden if m.receive_count)
        return QueueBacklog(
            visible=len(messages) - len(hidden),
            delayed=len(hidden) - in_flight,
            in_flight=in_flight,
        )

    def depth(self, queue: str) -> int:
        """Messages on the queue, visible or not."""
        with self._lock:
            return len(self._queues.get(queue, []))
