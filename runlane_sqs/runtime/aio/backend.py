"""Async adapters for an app's backend: aiobotocore clients for DynamoDB and SQS, or the
app's own sync ports on threads (in-memory apps, whose DynamoDB store sends its requests
to an in-memory DynamoDB, and custom adapters)."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import boto3

from runlane_sqs.adapters.aws import AwsClients
from runlane_sqs.adapters.dynamodb.aio import AsyncDynamoRunStore
from runlane_sqs.adapters.dynamodb.store import DynamoRunStore
from runlane_sqs.adapters.lean.aio import AsyncLeanClient
from runlane_sqs.adapters.memory.dynamodb import InMemoryDynamoDB
from runlane_sqs.adapters.sqs.aio import AsyncSqsTransport
from runlane_sqs.adapters.sqs.transport import SqsTransport
from runlane_sqs.adapters.threaded import ThreadedStore, ThreadedTransport
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.ports.aio import AsyncRunStore, AsyncWakeupTransport
from runlane_sqs.ports.store import RunStore
from runlane_sqs.ports.transport import WakeupTransport

INSTALL_HINT = "the async worker needs aioboto3: pip install 'runlane-sqs[async]'"


def new_session(models_from: boto3.Session | None = None) -> Any:
    """A default ``aioboto3.Session`` (credentials and region as boto3 finds them).

    With ``models_from``, it reads AWS service models through that session's loader,
    which has parsed them already (about 15 MB less per process than a second copy).
    """
    try:
        import aioboto3  # noqa: PLC0415 (optional extra)
    except ImportError as exc:
        raise ConfigurationError(INSTALL_HINT) from exc
    session = aioboto3.Session()
    if models_from is not None:
        # botocore's component registry is public; boto3 and aioboto3 keep their
        # botocore session in ``_session``.
        loader = models_from._session.get_component("data_loader")
        session._session.register_component("data_loader", loader)
    return session


async def open_ports(
    store: RunStore,
    transport: WakeupTransport,
    aws: AwsClients,
    stack: AsyncExitStack,
    session: Any | None,
) -> tuple[AsyncRunStore, AsyncWakeupTransport]:
    """The async twins of an app's ``store`` and ``transport``; clients close with
    ``stack``."""
    async_store: AsyncRunStore
    async_transport: AsyncWakeupTransport
    if isinstance(store, DynamoRunStore) and not isinstance(store.client, InMemoryDynamoDB):
        client = await open_client(aws, session, "dynamodb", stack)
        async_store = AsyncDynamoRunStore(client, store.table, store.environment)
    else:
        async_store = ThreadedStore(store)
    if isinstance(transport, SqsTransport):
        client = await open_client(aws, session, "sqs", stack)
        async_transport = AsyncSqsTransport(client, transport)
    else:
        async_transport = ThreadedTransport(transport)
    return async_store, async_transport


async def open_client(
    aws: AwsClients, session: Any | None, service: str, stack: AsyncExitStack
) -> Any:
    """The open aiobotocore client of ``service`` (closed with ``stack``), its per-run
    requests sent lean when the app asks for the lean client (``RUNLANE_AWS_CLIENT``)."""
    session = session or new_session(models_from=aws.session)
    client = await stack.enter_async_context(
        session.client(
            service,
            region_name=aws.region,
            endpoint_url=aws.endpoint_url,
            config=aws.botocore_config,
        )
    )
    if not aws.sends_lean(service):
        return client
    credentials = await session.get_credentials()
    attempts = aws.lean_attempts(service, client, credentials)
    if attempts is None:
        return client
    lean = AsyncLeanClient(client, credentials, max_attempts=attempts)
    stack.push_async_callback(lean.close_connections)
    return lean
