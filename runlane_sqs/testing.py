"""Helpers for users' tests: in-memory adapters and a clock that only moves when told.

from runlane_sqs import Runlane
from runlane_sqs.testing import in_memory_app

app = in_memory_app()
@app.task(name="send")
def send(ctx, payload): ...
app.trigger("send", {"to": "a@example.com"})
assert app.worker().drain() == 1
"""

from __future__ import annotations

from typing import Any

from runlane_sqs.adapters.memory.store import InMemoryRunStore
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.api.app import Runlane
from runlane_sqs.core.clock import ManualClock

__all__ = ["InMemoryRunStore", "InMemoryTransport", "ManualClock", "in_memory_app"]


def in_memory_app(
    environment: str = "test", clock: ManualClock | None = None, **options: Any
) -> Runlane:
    """A :class:`Runlane` app backed by in-memory storage and transport."""
    clock = clock or ManualClock()
    return Runlane(
        environment=environment,
        clock=clock,
        store=InMemoryRunStore(environment),
        transport=InMemoryTransport(clock),
        **options,
    )
