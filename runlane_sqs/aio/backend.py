"""Async adapters for an app's backend: aiobotocore clients for DynamoDB and SQS, or the
app's own sync ports on threads (in-memory apps, custom adapters)."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import boto3

from runlane_sqs.aio.dynamodb import AsyncDynamoRunStore
from runlane_sqs.aio.ports import (
    AsyncRunStore,
    AsyncWakeupTransport,
    ThreadedStore,
    ThreadedTransport,
)
from runlane_sqs.aio.sqs import AsyncSqsTransport
from runlane_sqs.errors import ConfigurationError
from runlane_sqs.storage.dynamodb import DynamoRunStore
from runlane_sqs.transport.sqs import SqsTransport

if TYPE_CHECKING:
    from runlane_sqs.app import Runlane

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
    app: Runlane, stack: AsyncExitStack, session: Any | None
) -> tuple[AsyncRunStore, AsyncWakeupTransport]:
    """The async store and transport for ``app``; clients close with ``stack``."""
    store: AsyncRunStore
    transport: AsyncWakeupTransport
    if isinstance(app.store, DynamoRunStore):
        client = await stack.enter_async_context(_client(app, session, "dynamodb"))
        store = AsyncDynamoRunStore(client, app.store.table, app.store.environment)
    else:
        store = ThreadedStore(app.store)
    if isinstance(app.transport, SqsTransport):
        client = await stack.enter_async_context(_client(app, session, "sqs"))
        transport = AsyncSqsTransport(client, app.transport)
    else:
        transport = ThreadedTransport(app.transport)
    return store, transport


def _client(app: Runlane, session: Any | None, service: str) -> Any:
    session = session or new_session(models_from=app.boto_session)
    return session.client(
        service,
        region_name=app.config.region,
        endpoint_url=app.config.endpoint_url,
        config=app.botocore_config,
    )
