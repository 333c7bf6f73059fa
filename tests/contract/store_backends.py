"""The adapters every port contract test runs on (test_store_contract.py,
test_store_hinted_claims.py): the in-memory store and transport, and the DynamoDB store
and SQS transport over HTTP (the moto server, or DynamoDB Local and LocalStack in
``make test-aws-local``). tests/contract/conftest.py makes the fixtures available."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

import pytest

from runlane_sqs import ManualClock
from runlane_sqs.adapters.provision import provision_queues
from runlane_sqs.ports.store import RunStore
from runlane_sqs.ports.transport import WakeupTransport
from runlane_sqs.testing import in_memory_app

QUEUE = "contract"
LEASE = timedelta(seconds=30)
MEMORY_VISIBILITY_SECONDS = 60.0
"""The visibility timeout of the transport :func:`in_memory_app` builds (its default)."""
SQS_VISIBILITY_SECONDS = 1.0
"""The visibility timeout of the SQS queue these tests use: real seconds, kept short."""
VISIBILITY_MARGIN_SECONDS = 0.3
REVISIBILITY_POLLS = 6
"""Extra polls (each after the margin) allowed for a message to become visible again."""


@dataclass
class Backend:
    """One adapter pair under contract, and how to let time pass for its transport."""

    kind: str
    store: RunStore
    transport: WakeupTransport
    clock: ManualClock
    environment: str
    visibility_timeout: float
    real_time_transport: bool

    def wait(self, seconds: float) -> None:
        """Let ``seconds`` pass for the transport: the SQS server's clock is real."""
        if self.real_time_transport:
            time.sleep(seconds)
        else:
            self.clock.advance(seconds)


@pytest.fixture(params=["memory", pytest.param("dynamodb", marks=pytest.mark.integration)])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def backend(store_kind: str, request: pytest.FixtureRequest) -> Backend:
    clock = ManualClock()
    if store_kind == "memory":
        app = in_memory_app(clock=clock)
        return Backend(
            store_kind,
            app.store,
            app.transport,
            clock,
            app.config.environment,
            MEMORY_VISIBILITY_SECONDS,
            real_time_transport=False,
        )
    make_app = request.getfixturevalue("make_app")
    app = make_app(clock=clock)
    app.provision()
    provision_queues(
        app.client("sqs"),
        [app.config.sqs_queue_name(QUEUE)],
        visibility_timeout=int(SQS_VISIBILITY_SECONDS),
    )
    return Backend(
        store_kind,
        app.store,
        app.transport,
        clock,
        app.config.environment,
        SQS_VISIBILITY_SECONDS,
        real_time_transport=True,
    )
