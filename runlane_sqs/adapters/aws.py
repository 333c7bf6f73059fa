"""The AWS clients of one app: one boto3 session, one client per service, built once."""

from __future__ import annotations

import logging
import os
import platform
import threading
from collections.abc import Mapping
from importlib import metadata
from typing import Any, Final, Literal

import boto3
from botocore.config import Config
from botocore.exceptions import NoRegionError

from runlane_sqs.adapters.lean.client import LeanClient
from runlane_sqs.adapters.lean.protocol import HOT_OPERATIONS, lean_unsupported
from runlane_sqs.core.errors import ConfigurationError

log = logging.getLogger("runlane_sqs.aws")

REGION_VARIABLES = ("AWS_DEFAULT_REGION", "AWS_REGION")


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


USER_AGENT = (
    f"runlane-sqs/{_version('runlane-sqs')} Boto3/{boto3.__version__} "
    f"Python/{platform.python_version()} {platform.system()}/{platform.release()}"
)
"""The ``User-Agent`` of every request, built once (boto3 appends ``Botocore/...``).
Without a fixed one, botocore rebuilds and sanitises its default string twice per
request: about half of its own CPU time per call (docs/performance.md, "Worker CPU")."""

DEFAULT_RETRY_MODE: Final = "standard"
DEFAULT_MAX_ATTEMPTS: Final = 5
"""Attempts per request in all: the first and up to four retries (``AWS_MAX_ATTEMPTS``
counts the same way)."""
DEFAULT_BOTOCORE_CONFIG = Config(
    retries={"mode": DEFAULT_RETRY_MODE, "total_max_attempts": DEFAULT_MAX_ATTEMPTS},
    connect_timeout=5,
    read_timeout=30,
    max_pool_connections=50,
    # Requests come from the builders in adapters/dynamodb/ (runs.py, tokens.py,
    # requests.py and each record's module) and adapters/sqs/transport.py, not from
    # user input; AWS validates them anyway.
    # Client-side validation cost about a millisecond of CPU per run
    # (docs/performance.md).
    parameter_validation=False,
    user_agent=USER_AGENT,
)


RETRY_MODES = ("legacy", "standard", "adaptive")
ENV_MAX_ATTEMPTS = "AWS_MAX_ATTEMPTS"
ENV_RETRY_MODE = "AWS_RETRY_MODE"
ENV_AWS_CLIENT = "RUNLANE_AWS_CLIENT"
AwsClientKind = Literal["botocore", "lean"]
AWS_CLIENT_KINDS: Final = ("botocore", "lean")
DEFAULT_AWS_CLIENT: Final[AwsClientKind] = "lean"
"""How the per-run requests are sent (``RUNLANE_AWS_CLIENT``): by the botocore client,
or by the lean client (:mod:`runlane_sqs.adapters.lean`)."""


def aws_client_kind(environ: Mapping[str, str] = os.environ) -> AwsClientKind:
    """The client ``RUNLANE_AWS_CLIENT`` asks for (:data:`DEFAULT_AWS_CLIENT` when unset);
    a bad value is a :class:`ConfigurationError`."""
    value = environ.get(ENV_AWS_CLIENT, "").strip().lower() or DEFAULT_AWS_CLIENT
    if value == "lean":
        return "lean"
    if value == "botocore":
        return "botocore"
    raise ConfigurationError(
        f"{ENV_AWS_CLIENT} must be one of {', '.join(AWS_CLIENT_KINDS)}, not {value!r}"
    )


def total_attempts(config: Config) -> int | None:
    """Attempts per request under ``config``'s standard retry mode (``None``: another
    mode, which only the botocore client follows)."""
    retries: dict[str, Any] = getattr(config, "retries", None) or {}
    if retries.get("mode", "legacy") != "standard":
        return None
    if "total_max_attempts" in retries:
        return int(retries["total_max_attempts"])
    if "max_attempts" in retries:
        return int(retries["max_attempts"]) + 1
    return 3


def lean_refused_by(config: Config) -> str | None:
    """Why a botocore config keeps the lean client off (``None``: it does not): it
    honours the options of the botocore client's HTTP session (read from it), the user
    agent and the standard retry mode; client-side parameter validation and other
    signers are botocore's alone."""
    if total_attempts(config) is None:
        return "its retry mode is not standard"
    if getattr(config, "parameter_validation", True) is not False:
        return "it validates parameters on the client (set parameter_validation=False)"
    signer = getattr(config, "signature_version", None)
    if signer not in (None, "v4"):
        return f"it signs with {signer}"
    return None


def default_botocore_config(environ: Mapping[str, str] = os.environ) -> Config:
    """:data:`DEFAULT_BOTOCORE_CONFIG`, with the retries that ``AWS_MAX_ATTEMPTS`` and
    ``AWS_RETRY_MODE`` ask for (the AWS SDKs' own variables; a client config would
    otherwise hide them). A bad value is a :class:`ConfigurationError`."""
    mode = environ.get(ENV_RETRY_MODE, "").strip()
    attempts = environ.get(ENV_MAX_ATTEMPTS, "").strip()
    if not mode and not attempts:
        return DEFAULT_BOTOCORE_CONFIG
    if mode and mode not in RETRY_MODES:
        raise ConfigurationError(
            f"{ENV_RETRY_MODE} must be one of {', '.join(RETRY_MODES)}, not {mode!r}"
        )
    if attempts and (not attempts.isdigit() or not 1 <= int(attempts) <= 100):
        raise ConfigurationError(
            f"{ENV_MAX_ATTEMPTS} must be a whole number from 1 to 100, not {attempts!r}"
        )
    retries: Any = {
        "mode": mode or DEFAULT_RETRY_MODE,
        "total_max_attempts": int(attempts) if attempts else DEFAULT_MAX_ATTEMPTS,
    }
    return DEFAULT_BOTOCORE_CONFIG.merge(Config(retries=retries))


def with_fixed_user_agent(config: Config) -> Config:
    """``config``, with :data:`USER_AGENT` unless it sets a user agent of its own."""
    if getattr(config, "user_agent", None) is not None:
        return config
    return config.merge(Config(user_agent=USER_AGENT))


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
        aws_client: AwsClientKind | None = None,
    ) -> None:
        self.region = region
        self.endpoint_url = endpoint_url
        self.botocore_config = (
            with_fixed_user_agent(botocore_config) if botocore_config else default_botocore_config()
        )
        self.aws_client: AwsClientKind = aws_client or aws_client_kind()
        self._session = session
        self._clients: dict[str, Any] = {}
        self._building = threading.Lock()

    @property
    def session(self) -> boto3.Session:
        if self._session is None:
            self._session = boto3.session.Session()
        return self._session

    def client(self, service: str) -> Any:
        """The client for ``service`` (built on first use); raises
        :class:`~runlane_sqs.errors.ConfigurationError` when no region is configured."""
        client = self._clients.get(service)
        if client is not None:
            return client
        # once, whichever thread asks first: a worker's attempt threads all want the
        # DynamoDB client at their first claim, and a boto3 session is not thread-safe
        with self._building:
            if service not in self._clients:
                self._clients[service] = self._build(service)
        return self._clients[service]

    def _build(self, service: str) -> Any:
        config = self.botocore_config
        if service == "s3" and self._endpoint_set(service):
            # an emulator serves every bucket at one host: address buckets by path
            config = config.merge(Config(s3={"addressing_style": "path"}))
        try:
            client = self.session.client(
                service,  # type: ignore[call-overload]
                region_name=self.region,
                endpoint_url=self.endpoint_url,
                config=config,
            )
        except NoRegionError:
            raise ConfigurationError(
                f"no AWS region for the {service} client: set "
                f"{' or '.join(REGION_VARIABLES)} (or pass region= to Runlane)"
            ) from None
        return self._lean(service, client) if self.sends_lean(service) else client

    def _endpoint_set(self, service: str) -> bool:
        """Whether ``service`` is sent to an endpoint of the app's or the environment's
        choosing (``endpoint_url``, ``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_<SERVICE>``)."""
        variables = ("AWS_ENDPOINT_URL", f"AWS_ENDPOINT_URL_{service.upper()}")
        return bool(self.endpoint_url) or any(os.environ.get(v) for v in variables)

    def sends_lean(self, service: str) -> bool:
        """Whether the lean client is asked for and sends some of ``service``'s requests."""
        return self.aws_client == "lean" and service in HOT_OPERATIONS

    def _lean(self, service: str, client: Any) -> Any:
        credentials = self.session.get_credentials()
        attempts = self.lean_attempts(service, client, credentials)
        if attempts is None:
            return client
        return LeanClient(client, credentials, max_attempts=attempts)

    def lean_attempts(self, service: str, client: Any, credentials: Any) -> int | None:
        """The attempts per request of a lean client of ``client`` (a botocore or an
        aiobotocore client of ``service``); ``None`` when the lean client cannot send
        its requests as botocore would, which the log says once per client."""
        reason = lean_unsupported(client) or lean_refused_by(self.botocore_config)
        if credentials is None:
            reason = "no credentials were found (botocore raises the error)"
        attempts = total_attempts(self.botocore_config)
        if reason is None and attempts is not None:
            return attempts
        log.warning(
            "%s=lean: the %s client sends its requests with botocore: %s",
            ENV_AWS_CLIENT,
            service,
            reason,
        )
        return None

    def lazy(self, service: str) -> LazyClient:
        """A stand-in for :meth:`client` that builds the client on its first use, so an
        app can be constructed (and imported) with no AWS settings at all."""
        return LazyClient(self, service)


class LazyClient:
    """Forwards every attribute to the client of ``service``, built on first use."""

    def __init__(self, clients: AwsClients, service: str) -> None:
        self._clients = clients
        self._service = service

    def __getattr__(self, name: str) -> Any:
        return getattr(self._clients.client(self._service), name)


def endpoint_of(client: Any) -> str | None:
    """The endpoint a boto3 client sends its requests to, if it has one."""
    return getattr(getattr(client, "meta", None), "endpoint_url", None)
