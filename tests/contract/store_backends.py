"""The adapters every port contract test runs on (test_store_contract.py,
test_store_hinted_claims.py): the in-memory store and transport; the DynamoDB store and
SQS transport over the simulation's services (simulation/services.py, with no fault: the
simulation's answers must be the ones the real services give); and the DynamoDB store
and SQS transport over HTTP (the moto server, or DynamoDB Local and LocalStack in
``make test-aws-local``). tests/contract/conftest.py makes the fixtures available."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

import pytest

from runlane_sqs import ManualClock
from runlane_sqs.adapters.dynamodb.items import table_definition
from runlane_sqs.adapters.dynamodb.store import DynamoRunStore
from runlane_sqs.adapters.provision import provision_queues
from runlane_sqs.adapters.sqs.transport import SqsTransport
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.ports.store import RunStore
from runlane_sqs.ports.transport import WakeupTransport
from runlane_sqs.testing import in_memory_app
from simulation.services import Faults, SimDynamoDB, SimSqs
from simulation.world import EPOCH, World

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
    world: World | None = None
    """The simulated world whose time the simulated SQS keeps, if any."""

    def wait(self, seconds: float) -> None:
        """Let ``seconds`` pass for the transport: the SQS server's clock is real, the
        simulated one's virtual."""
        if self.real_time_transport:
            time.sleep(seconds)
            return
        self.clock.advance(seconds)
        if self.world is not None:
            self.world.run_until(self.world.now_us + int(seconds * 1_000_000))


@pytest.fixture(
    params=["memory", "simulated", pytest.param("dynamodb", marks=pytest.mark.integration)]
)
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
    if store_kind == "simulated":
        return simulated(clock)
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


def simulated(clock: ManualClock) -> Backend:
    """The real adapters over the simulation's DynamoDB and SQS, faults off; virtual time
    kept in step with ``clock``."""
    world = World(0)
    world.now_us = (clock.now() - EPOCH) // timedelta(microseconds=1)
    dynamodb = SimDynamoDB(world, Faults.none())
    dynamodb.inner.create_table(**table_definition(RunlaneConfig.table))
    sqs = SimSqs(world, Faults.none())
    prefix = "runlane-contract-"
    sqs.create(f"{prefix}{QUEUE}")
    sqs.visibility_us = int(MEMORY_VISIBILITY_SECONDS * 1_000_000)
    return Backend(
        "simulated",
        DynamoRunStore(dynamodb, RunlaneConfig.table, "test"),
        SqsTransport(sqs, queue_prefix=prefix),
        clock,
        "test",
        MEMORY_VISIBILITY_SECONDS,
        real_time_transport=False,
        world=world,
    )
