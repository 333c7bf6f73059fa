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

from collections.abc import Sequence
from typing import Unpack

from runlane_sqs.adapters.memory.dynamodb import InMemoryDynamoDB
from runlane_sqs.adapters.memory.objects import InMemoryObjects
from runlane_sqs.adapters.memory.store import InMemoryRunStore
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.api.app import Runlane
from runlane_sqs.api.telemetry import Telemetry
from runlane_sqs.core.clock import ManualClock
from runlane_sqs.core.config import RunlaneSettings
from runlane_sqs.ports.codecs import Codec

__all__ = [
    "InMemoryDynamoDB",
    "InMemoryRunStore",
    "InMemoryTransport",
    "ManualClock",
    "in_memory_app",
    "use_in_memory",
]


def in_memory_app(
    *,
    clock: ManualClock | None = None,
    telemetry: Telemetry | None = None,
    codec: Codec | Sequence[Codec] | None = None,
    **settings: Unpack[RunlaneSettings],
) -> Runlane:
    """A :class:`Runlane` app backed by in-memory storage and transport (and objects,
    with a ``payload_bucket``), in environment ``test`` unless ``settings`` name
    another."""
    clock = clock or ManualClock()
    settings.setdefault("environment", "test")
    bucket = settings.get("payload_bucket")
    return Runlane(
        clock=clock,
        store=InMemoryRunStore(settings["environment"]),
        transport=InMemoryTransport(clock),
        objects=InMemoryObjects(bucket) if bucket else None,
        codec=codec,
        telemetry=telemetry,
        **settings,
    )


def use_in_memory(app: Runlane, clock: ManualClock | None = None) -> ManualClock:
    """Run ``app`` (yours, built with ``Runlane.from_env()`` in your module) over fresh
    in-memory storage and transport with a manual clock, so its tasks can be triggered
    and drained in a test with no AWS settings. Returns the clock.

    The pytest fixture ``runlane_in_memory`` does this and puts the app back after the
    test (see docs/testing.md).
    """
    clock = clock or ManualClock()
    environment, bucket = app.config.environment, app.config.payload_bucket
    app.rewire(
        store=InMemoryRunStore(environment),
        transport=InMemoryTransport(clock),
        clock=clock,
        objects=InMemoryObjects(bucket) if bucket else None,
    )
    return clock
