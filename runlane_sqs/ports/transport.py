"""The wakeup transport port: how wakeups travel.

Adapters: :mod:`runlane_sqs.adapters.sqs.transport` (SQS) and
:mod:`runlane_sqs.adapters.memory.transport` (in memory, for tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from runlane_sqs.core.wakeup import Wakeup


@dataclass(frozen=True, slots=True)
class ReceivedWakeup:
    """A message taken from a queue: its body and the handle that deletes it."""

    queue: str
    body: str
    receipt: str
    message_id: str
    receive_count: int = 1


class WakeupTransport(Protocol):
    """Delivery of wakeup hints."""

    def publish(self, wakeups: Sequence[Wakeup], delay: timedelta | None = None) -> list[Wakeup]:
        """Send wakeups (batched); returns those not sent: an SQS error, or a delay that a
        FIFO queue cannot hold (the caller then leaves them to maintenance)."""
        ...

    def check_queue(self, queue: str) -> None:
        """Raise :class:`~runlane_sqs.core.errors.MissingResourceError` if ``queue`` is absent."""
        ...

    def receive(
        self, queue: str, max_messages: int, wait_seconds: float
    ) -> list[ReceivedWakeup]: ...

    def ack(self, messages: Sequence[ReceivedWakeup]) -> None:
        """Delete handled messages (batched)."""
        ...

    def release(self, messages: Sequence[ReceivedWakeup]) -> None:
        """Make received but unstarted messages visible again at once."""
        ...


@dataclass(frozen=True, slots=True)
class QueueBacklog:
    """A queue's approximate counts (SQS's ``ApproximateNumberOfMessages*``)."""

    visible: int
    delayed: int
    in_flight: int

    @property
    def drained(self) -> bool:
        """No visible message waits to be received: every one that has become visible
        was received at least once (the in-flight ones are being handled; a delayed one
        is not in line yet, and its run counts its place in line from when it becomes
        visible)."""
        return self.visible == 0


@runtime_checkable
class BacklogProbe(Protocol):
    """A transport that can count a queue's messages (maintenance reads it once per
    queue and pass, to tell a wakeup waiting in line from a lost one)."""

    def backlog(self, queue: str) -> QueueBacklog:
        """Raises :class:`~runlane_sqs.core.errors.TransportError` when it cannot."""
        ...


@runtime_checkable
class DeadLetterProbe(Protocol):
    """A transport that can count the messages its queues' dead-letter queues hold."""

    def dead_letters(self, queue: str) -> int | None:
        """``None`` when ``queue`` has no dead-letter queue; raises
        :class:`~runlane_sqs.core.errors.TransportError` when it cannot count."""
        ...


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message taken from the dead-letter queue of ``queue`` (hidden from other readers
    until it is returned or deleted)."""

    queue: str
    """The logical queue whose dead-letter queue holds it."""
    url: str
    """The dead-letter queue's URL (returning or deleting it needs no look-up)."""
    body: str
    receipt: str
    message_id: str
    receive_count: int
    """Receives counted since it reached the dead-letter queue (1: this one)."""
    sent_at: datetime | None
    """When it was first sent (to its source queue)."""


@runtime_checkable
class DeadLetterQueues(Protocol):
    """A transport whose queues' dead-letter queues can be read and emptied."""

    def take_dead_letters(self, queue: str, limit: int, hold: timedelta) -> list[DeadLetter] | None:
        """Up to ``limit`` messages of ``queue``'s dead-letter queue, hidden for ``hold``;
        ``None`` when ``queue`` has no dead-letter queue."""
        ...

    def return_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        """Make ``letters`` visible in their dead-letter queue again at once."""
        ...

    def delete_dead_letters(self, letters: Sequence[DeadLetter]) -> None: ...

    def resend(self, letter: DeadLetter) -> None:
        """Send ``letter``'s body, as it is, to its source queue."""
        ...
