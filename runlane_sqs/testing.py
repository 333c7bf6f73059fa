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

from runlane_sqs.adapters.dynamodb.items import table_definition
from runlane_sqs.adapters.dynamodb.keys import RUN_SK, run_pk
from runlane_sqs.adapters.dynamodb.runs import run_from_wire
from runlane_sqs.adapters.dynamodb.store import DynamoRunStore
from runlane_sqs.adapters.memory.dynamodb import InMemoryDynamoDB
from runlane_sqs.adapters.memory.objects import InMemoryObjects
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.api.app import Runlane
from runlane_sqs.api.telemetry import Telemetry
from runlane_sqs.core.clock import ManualClock
from runlane_sqs.core.config import RunlaneConfig, RunlaneSettings
from runlane_sqs.core.model import Run
from runlane_sqs.ports.codecs import Codec

__all__ = [
    "InMemoryDynamoDB",
    "InMemoryRunStore",
    "InMemoryTransport",
    "ManualClock",
    "in_memory_app",
    "use_in_memory",
]


class InMemoryRunStore(DynamoRunStore):
    """The DynamoDB run store over an in-memory DynamoDB: the same requests and answers
    as on AWS, with no AWS. ``dynamodb`` is the fake it sends them to (a new one unless
    given, so two stores can share one), where ``table`` is created if absent."""

    def __init__(
        self,
        environment: str = "dev",
        *,
        table: str = RunlaneConfig.table,
        dynamodb: InMemoryDynamoDB | None = None,
    ) -> None:
        self.dynamodb = dynamodb or InMemoryDynamoDB()
        """The in-memory DynamoDB holding the table: read its items with ``items``."""
        if table not in self.dynamodb.table_names():
            self.dynamodb.create_table(**table_definition(table))
        super().__init__(self.dynamodb, table, environment)

    def all_runs(self) -> list[Run]:
        """Every run of the environment, as stored."""
        prefix = run_pk(self.environment, "")
        return [
            run_from_wire(item)
            for item in self.dynamodb.items(self.table)
            if item["sk"]["S"] == RUN_SK and item["pk"]["S"].startswith(prefix)
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
        store=InMemoryRunStore(
            settings["environment"], table=settings.get("table", RunlaneConfig.table)
        ),
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
        store=InMemoryRunStore(environment, table=app.config.table),
        transport=InMemoryTransport(clock),
        clock=clock,
        objects=InMemoryObjects(bucket) if bucket else None,
    )
    return clock
