"""What a FIFO queue and the event source mapping promise about order, checked on every
batch the mapping receives.

SQS itself returns no message of a message group while another message of that group
is in flight, and returns a group's messages in the order they were sent. Both emulators
do so (moto 5.2.5 and LocalStack 4.9.2, checked when this was written), so the mapping
does not hold messages back itself: it only checks, and records as a violation,

- a message received while a batch holding another message of its group, not received
  again with it, is still being invoked (Lambda keeps at most one batch of a group in
  flight). The same messages may come back meanwhile: the consumer makes the records it
  reports for lack of time visible again itself (``ChangeMessageVisibility`` to 0) just
  before it returns;
- a group's records out of sequence-number order within a batch;
- a group's message received while an earlier one of the group (a lower sequence number)
  that the mapping received in another batch has not been deleted;
- a group's message received for the first time after a later one of the group, or
  again after a later one was deleted.

A message moved to the dead-letter queue would count as not deleted: the tests keep
the receive count below ``maxReceiveCount``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from tests.esm.records import fifo_group, sequence_number


class FifoOrder:
    """Violations of FIFO order seen so far (thread-safe)."""

    def __init__(self) -> None:
        self.violations: list[str] = []
        self._seen: dict[str, dict[str, int]] = {}
        """group -> message id -> sequence number, of every message received."""
        self._deleted: set[str] = set()
        self._in_flight: dict[str, Counter[str]] = {}
        """group -> message id -> batches holding it that are being invoked."""
        self._lock = threading.Lock()

    def received(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Check a batch as it is received, and count its groups as in flight."""
        with self._lock:
            groups = {g for m in messages if (g := fifo_group(m)) is not None}
            batch = {m["MessageId"] for m in messages}
            for message in messages:
                self._check_in_flight(message, batch)
            for message in messages:
                if (group := fifo_group(message)) is not None:
                    self._in_flight.setdefault(group, Counter())[message["MessageId"]] += 1
            for message in messages:
                self._check_order(message, batch)
            for group in groups:
                numbers = [sequence_number(m) for m in messages if fifo_group(m) == group]
                if numbers != sorted(numbers, key=lambda n: n or 0):
                    self.violations.append(f"group {group} out of order in a batch: {numbers}")

    def _check_in_flight(self, message: Mapping[str, Any], batch: set[str]) -> None:
        group = fifo_group(message)
        holding = self._in_flight.get(group, Counter()) if group is not None else Counter()
        others = sorted(i for i, n in holding.items() if n and i not in batch)
        if others:
            self.violations.append(
                f"group {group}: {message['MessageId']} received while {others} in flight"
            )

    def _check_order(self, message: Mapping[str, Any], batch: set[str]) -> None:
        group, number = fifo_group(message), sequence_number(message)
        message_id = message["MessageId"]
        if group is None or number is None:
            self.violations.append(f"message {message_id} has no group or sequence number")
            return
        seen = self._seen.setdefault(group, {})
        new = message_id not in seen
        others = {i: n for i, n in seen.items() if i not in batch}
        earlier = sorted(i for i, n in others.items() if n < number and i not in self._deleted)
        if earlier:
            self.violations.append(f"group {group}: {message_id} received before {earlier}")
        later = sorted(i for i, n in others.items() if n > number and (new or i in self._deleted))
        if later:
            self.violations.append(f"group {group}: {message_id} received after {later}")
        seen[message_id] = number

    def deleted(self, message_ids: Sequence[str]) -> None:
        with self._lock:
            self._deleted.update(message_ids)

    def finished(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """A batch's invocations are over: its groups are no longer in flight."""
        with self._lock:
            for message in messages:
                if (group := fifo_group(message)) is not None:
                    self._in_flight[group][message["MessageId"]] -= 1
