"""The backends a behaviour test runs on: the in-memory app, and the emulators (the
embedded moto server, or DynamoDB Local + LocalStack SQS with
``RUNLANE_TEST_BACKEND=aws-local``), both with a clock the test moves by hand.

The ``backend`` fixture (tests/behaviour/conftest.py) gives one per parameter;
``backend.app(register=...)`` builds an app on it. A scenario that only the in-memory
backend can play (it reads in-memory internals, or needs SQS delays to follow the manual
clock) says so with ``@ONLY_MEMORY``, one that checks DynamoDB items or requests with
``@ONLY_AWS``, each with the reason in its docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from runlane_sqs import ManualClock, Runlane
from runlane_sqs.adapters.memory.transport import InMemoryTransport
from runlane_sqs.testing import InMemoryRunStore, in_memory_app
from tests.emulators import queue_counts, queue_url

MEMORY = "memory"
AWS = "aws"
BACKENDS = [
    pytest.param(MEMORY, id=MEMORY),
    pytest.param(AWS, id=AWS, marks=pytest.mark.integration),
]
ONLY_MEMORY = pytest.mark.parametrize("backend", [MEMORY], indirect=True)
"""Run a behaviour test on the in-memory backend only."""
ONLY_AWS = pytest.mark.parametrize(
    "backend", [pytest.param(AWS, id=AWS, marks=pytest.mark.integration)], indirect=True
)
"""Run a behaviour test on the emulators only: a check of DynamoDB items or requests that
memory has no equivalent of."""


@dataclass
class Backend:
    """Where the test's apps keep their runs and send their wakeups."""

    kind: str
    clock: ManualClock
    request: pytest.FixtureRequest

    @property
    def real(self) -> bool:
        """Whether this is DynamoDB and SQS (an emulator) rather than memory."""
        return self.kind == AWS

    def app(
        self,
        *,
        register: Callable[[Runlane], object] | None = None,
        queues: Sequence[str] | None = None,
        clock: ManualClock | None = None,
        **options: Any,
    ) -> Runlane:
        """A new app on this backend with the test's clock (or ``clock``); ``register``
        adds its tasks, and on the emulators the table and queues are provisioned."""
        clock = clock or self.clock
        if not self.real:
            app = in_memory_app(clock=clock, **options)
        else:
            make_app: Callable[..., Runlane] = self.request.getfixturevalue("make_app")
            app = make_app(clock=clock, **options)
        if register is not None:
            register(app)
        if self.real:
            app.provision(queues)
        return app

    def table(self, app: Runlane) -> Any:
        """What answers DynamoDB's requests for ``app``'s table: the emulator's client,
        or the in-memory DynamoDB. A test plays someone who writes items behind the
        library's back with it."""
        if self.real:
            return self.request.getfixturevalue("dynamodb")
        assert isinstance(app.store, InMemoryRunStore)
        return app.store.dynamodb

    def write_attribute(self, app: Runlane, key: dict[str, Any], name: str, text: str) -> None:
        """Set the string attribute ``name`` of the item at ``key`` (DynamoDB's form) of
        ``app``'s table to ``text``, behind the library's back."""
        self.table(app).update_item(
            TableName=app.config.table,
            Key=key,
            UpdateExpression="SET #a = :v",
            ExpressionAttributeNames={"#a": name},
            ExpressionAttributeValues={":v": {"S": text}},
        )

    def depth(self, app: Runlane, queue: str = "default") -> int:
        """Messages on ``queue``, received or not, delayed or not."""
        if isinstance(app.transport, InMemoryTransport):
            return app.transport.depth(queue)
        sqs = self.request.getfixturevalue("sqs")
        counts = queue_counts(sqs, queue_url(sqs, app, queue))
        return counts["visible"] + counts["in_flight"] + counts["delayed"]
