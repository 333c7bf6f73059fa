"""The AWS clients of one app: one boto3 session, one client per service, built once."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

DEFAULT_BOTOCORE_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5},
    connect_timeout=5,
    read_timeout=30,
    max_pool_connections=50,
    # Requests come from the builders in adapters/dynamodb/requests.py and
    # adapters/sqs/transport.py, not from user input; AWS validates them anyway.
    # Client-side validation cost about a millisecond of CPU per run
    # (docs/performance.md).
    parameter_validation=False,
)


class AwsClients:
    """Builds and keeps the boto3 clients for ``region`` and ``endpoint_url``.

    One session per app, so AWS service models load once per process.
    """

    def __init__(
        self,
        *,
        region: str | None,
        endpoint_url: str | None,
        session: boto3.Session | None = None,
        botocore_config: Config | None = None,
    ) -> None:
        self.region = region
        self.endpoint_url = endpoint_url
        self.botocore_config = botocore_config or DEFAULT_BOTOCORE_CONFIG
        self._session = session
        self._clients: dict[str, Any] = {}

    @property
    def session(self) -> boto3.Session:
        if self._session is None:
            self._session = boto3.session.Session()
        return self._session

    def client(self, service: str) -> Any:
        """The client for ``service`` (built on first use)."""
        if service not in self._clients:
            self._clients[service] = self.session.client(
                service,  # type: ignore[call-overload]
                region_name=self.region,
                endpoint_url=self.endpoint_url,
                config=self.botocore_config,
            )
        return self._clients[service]
