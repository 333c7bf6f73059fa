"""Every botocore and aiobotocore internal the lean clients use, in one place: the private
attributes they read and the undocumented functions, classes and hooks they call, each
behind one small function here. No other module of the lean clients reads an internal.

botocore gives no public way to do what these do (force a credentials refresh, ask
which handlers an event has, read the settings of a client's HTTP session, run its
standard retry mode or sign a request from a plain map), and a botocore release may
move any of them. ``pyproject.toml`` therefore pins botocore (and boto3) to the minor
release CI tests, 1.40, and :data:`READS` lists each internal with the shape it must
have: ``tests/contract/test_botocore_internals.py`` checks every entry on the installed
botocore and aiobotocore, on real clients and credentials built offline, and names the
one that moved. Each was read in botocore's 1.35 to 1.40 sources and aiobotocore
2.25's, and is tested on the versions the project installs.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, cast

from botocore.auth import SIGNED_HEADERS_BLACKLIST, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.httpsession import create_urllib3_context, get_cert_path
from botocore.retries import quota, standard

SigningKey = Callable[[str, str], bytes]
"""The day's SigV4 signing key for a secret key and a day (``YYYYMMDD``)."""


@dataclass(frozen=True, slots=True)
class Read:
    """One internal used here: ``name`` on ``owner`` (a module, a class, or an object of
    that class when ``on_object``), and the shape the lean clients rely on."""

    owner: str
    name: str
    shape: str
    holds: Callable[[Any], bool]
    on_object: bool = True


def _has(*names: str) -> Callable[[Any], bool]:
    """Whether a value has every attribute of ``names``."""
    return lambda value: all(hasattr(value, name) for name in names)


def _takes(*names: str) -> Callable[[Any], bool]:
    """Whether a value is callable with parameters named ``names`` (a class: its
    constructor's)."""

    def holds(value: Any) -> bool:
        if not callable(value):
            return False
        parameters = inspect.signature(value).parameters
        return all(name in parameters for name in names)

    return holds


def _is_async(value: Any) -> bool:
    return inspect.iscoroutinefunction(value)


def _optional(kind: type | tuple[type, ...]) -> Callable[[Any], bool]:
    return lambda value: value is None or isinstance(value, kind)


CREDENTIALS: Final = "botocore.credentials.RefreshableCredentials"
AIO_CREDENTIALS: Final = "aiobotocore.credentials.AioRefreshableCredentials"
CLIENT: Final = "botocore.client.BaseClient"
AIO_CLIENT: Final = "aiobotocore.client.AioBaseClient"
EVENTS: Final = "botocore.hooks.EventAliaser"
EMITTER: Final = "botocore.hooks.HierarchicalEmitter"
AIO_EMITTER: Final = "aiobotocore.hooks.AioHierarchicalEmitter"
HANDLER_TRIE: Final = "botocore.hooks._PrefixTrie"
URLLIB3_SESSION: Final = "botocore.httpsession.URLLib3Session"
AIOHTTP_SESSION: Final = "aiobotocore.httpsession.AIOHTTPSession"
RETRIES: Final = "botocore.retries.standard"

READS: Final[tuple[Read, ...]] = (
    Read(CREDENTIALS, "_refresh_lock", "a lock", _has("__enter__", "__exit__")),
    Read(CREDENTIALS, "_frozen_credentials", "frozen credentials", _has("access_key", "token")),
    Read(CREDENTIALS, "_protected_refresh", "a method(is_mandatory)", _takes("is_mandatory")),
    Read(AIO_CREDENTIALS, "_refresh_lock", "an asyncio lock", _has("__aenter__", "__aexit__")),
    Read(AIO_CREDENTIALS, "_frozen_credentials", "frozen credentials", _has("access_key")),
    Read(
        AIO_CREDENTIALS,
        "_protected_refresh",
        "a coroutine method(is_mandatory)",
        lambda value: _is_async(value) and _takes("is_mandatory")(value),
    ),
    Read(CLIENT, "_endpoint", "an endpoint with an http_session", _has("http_session")),
    Read(AIO_CLIENT, "_endpoint", "an endpoint with an http_session", _has("http_session")),
    Read(EVENTS, "_emitter", "the emitter it wraps", _has("emit", "register")),
    Read(EMITTER, "_lookup_cache", "a dict of handlers by event", _has("get", "__setitem__")),
    Read(EMITTER, "_handlers", "a trie of handlers", _has("prefix_search")),
    Read(AIO_EMITTER, "_lookup_cache", "a dict of handlers by event", _has("get", "__setitem__")),
    Read(AIO_EMITTER, "_handlers", "a trie of handlers", _has("prefix_search")),
    Read(HANDLER_TRIE, "prefix_search", "a method(key)", _takes("key"), on_object=False),
    Read(URLLIB3_SESSION, "_proxy_config", "proxies by URL", _has("proxy_url_for")),
    Read(URLLIB3_SESSION, "_cert_file", "a client certificate or None", _optional((str, tuple))),
    Read(URLLIB3_SESSION, "_timeout", "urllib3 timeouts", _has("connect_timeout", "read_timeout")),
    Read(URLLIB3_SESSION, "_max_pool_connections", "a pool size", _has("__int__")),
    Read(URLLIB3_SESSION, "_socket_options", "socket options", _optional(list)),
    Read(URLLIB3_SESSION, "_verify", "True, False or a CA bundle", _optional((bool, str))),
    Read(AIOHTTP_SESSION, "_proxy_config", "proxies by URL", _has("proxy_url_for")),
    Read(AIOHTTP_SESSION, "_cert_file", "a client certificate or None", _optional((str, tuple))),
    Read(
        AIOHTTP_SESSION,
        "_timeout",
        "aiohttp timeouts",
        _has("sock_connect", "connect", "sock_read", "total"),
    ),
    Read(AIOHTTP_SESSION, "_max_pool_connections", "a pool size", _has("__int__")),
    Read(AIOHTTP_SESSION, "_connector_args", "aiohttp connector options", _optional(dict)),
    Read(AIOHTTP_SESSION, "_verify", "True, False or a CA bundle", _optional((bool, str))),
    Read("botocore.httpsession", "create_urllib3_context", "a function", callable, False),
    Read("botocore.httpsession", "get_cert_path", "a function(verify)", _takes("verify"), False),
    Read("botocore.auth", "SIGNED_HEADERS_BLACKLIST", "header names", _has("__contains__"), False),
    Read(
        "botocore.auth.SigV4Auth", "headers_to_sign", "a method(request)", _takes("request"), False
    ),
    Read(
        "botocore.auth.SigV4Auth",
        "signature",
        "a method(string_to_sign, request)",
        _takes("string_to_sign", "request"),
        False,
    ),
    Read(
        RETRIES, "StandardRetryConditions", "a class(max_attempts)", _takes("max_attempts"), False
    ),
    Read(RETRIES, "ExponentialBackoff", "a class", callable, False),
    Read(RETRIES, "RetryQuotaChecker", "a class(quota)", _takes("quota"), False),
    Read("botocore.retries.quota", "RetryQuota", "a class", callable, False),
    Read(
        RETRIES,
        "RetryContext",
        "a class(attempt_number, operation_model, parsed_response, http_response, "
        "caught_exception, request_context)",
        _takes(
            "attempt_number",
            "operation_model",
            "parsed_response",
            "http_response",
            "caught_exception",
            "request_context",
        ),
        False,
    ),
    Read(
        f"{RETRIES}.StandardRetryConditions",
        "is_retryable",
        "a method(context)",
        _takes("context"),
        False,
    ),
    Read(
        f"{RETRIES}.ExponentialBackoff",
        "delay_amount",
        "a method(context)",
        _takes("context"),
        False,
    ),
    Read(
        f"{RETRIES}.RetryQuotaChecker",
        "acquire_retry_quota",
        "a method(context)",
        _takes("context"),
        False,
    ),
    Read(
        f"{RETRIES}.RetryQuotaChecker",
        "release_retry_quota",
        "a method(context, http_response)",
        _takes("context", "http_response"),
        False,
    ),
    Read(f"{RETRIES}.RetryContext", "get_retry_metadata", "a method()", callable, False),
)
"""Every internal the functions below use, as the test checks it."""


# --- credentials -------------------------------------------------------------------


def refreshes(credentials: Any) -> bool:
    """Whether ``credentials`` refresh (they have ``_protected_refresh``; botocore 1.35 to
    1.40, aiobotocore 2.25)."""
    return hasattr(credentials, "_protected_refresh")


def refresh_lock(credentials: Any) -> Any:
    """``RefreshableCredentials._refresh_lock``: the lock they refresh under, a threading
    lock (an asyncio one in aiobotocore; botocore 1.35 to 1.40, aiobotocore 2.25)."""
    return credentials._refresh_lock


def frozen_credentials(credentials: Any) -> Any:
    """``RefreshableCredentials._frozen_credentials``: the frozen set last handed out,
    read without refreshing (botocore 1.35 to 1.40, aiobotocore 2.25)."""
    return credentials._frozen_credentials


def mandatory_refresh(credentials: Any) -> Any:
    """``RefreshableCredentials._protected_refresh(is_mandatory=True)``: refresh now, the
    lock held (a coroutine in aiobotocore; botocore 1.35 to 1.40, aiobotocore 2.25)."""
    return credentials._protected_refresh(is_mandatory=True)


# --- clients and their events -------------------------------------------------------


def client_http_session(client: Any) -> Any:
    """``BaseClient._endpoint.http_session``: the HTTP session a botocore or aiobotocore
    client sends with, ``None`` without one (botocore 1.35 to 1.40, aiobotocore 2.25)."""
    return getattr(getattr(client, "_endpoint", None), "http_session", None)


def handlers_of(events: Any, event: str) -> Any:
    """The handlers a client's emitter would call for ``event``, found as it finds them:
    ``EventAliaser._emitter``, then ``HierarchicalEmitter._lookup_cache`` and
    ``_handlers.prefix_search`` (botocore 1.35 to 1.40, aiobotocore 2.25); empty unless
    something registered one."""
    emitter = getattr(events, "_emitter", events)
    cache = emitter._lookup_cache
    handlers = cache.get(event)
    if handlers is None:
        handlers = cache[event] = emitter._handlers.prefix_search(event)
    return handlers


# --- HTTP sessions: botocore's URLLib3Session and aiobotocore's AIOHTTPSession ---------


def proxy_config(http_session: Any) -> Any:
    """``_proxy_config`` of a botocore or aiobotocore HTTP session, ``None`` for another
    kind of session (botocore 1.35 to 1.40, aiobotocore 2.25)."""
    return getattr(http_session, "_proxy_config", None)


def client_certificate(http_session: Any) -> Any:
    """``_cert_file`` of an HTTP session: its client certificate, if any (botocore 1.35 to
    1.40, aiobotocore 2.25)."""
    return getattr(http_session, "_cert_file", None)


def is_urllib3_session(http_session: Any) -> bool:
    """Whether the session has ``_verify``, as botocore's ``URLLib3Session`` has
    (botocore 1.35 to 1.40)."""
    return hasattr(http_session, "_verify")


def is_aiohttp_session(http_session: Any) -> bool:
    """Whether the session has ``_connector_args``, as aiobotocore's ``AIOHTTPSession``
    has (aiobotocore 2.25)."""
    return hasattr(http_session, "_connector_args")


def session_timeout(http_session: Any) -> Any:
    """``_timeout`` of an HTTP session: urllib3's ``Timeout`` in botocore, aiohttp's
    ``ClientTimeout`` in aiobotocore (botocore 1.35 to 1.40, aiobotocore 2.25)."""
    return http_session._timeout


def pool_size(http_session: Any) -> int:
    """``_max_pool_connections`` of an HTTP session (botocore 1.35 to 1.40, aiobotocore
    2.25)."""
    return int(http_session._max_pool_connections)


def socket_options(http_session: Any) -> list[Any]:
    """``URLLib3Session._socket_options``: the options set on each socket (botocore 1.35
    to 1.40)."""
    return list(http_session._socket_options or [])


def connector_args(http_session: Any) -> dict[str, Any]:
    """``AIOHTTPSession._connector_args``: the aiohttp connector's options (aiobotocore
    2.25)."""
    return dict(http_session._connector_args or {})


def tls_context(http_session: Any) -> ssl.SSLContext:
    """The TLS settings of an HTTP session: botocore's default context
    (``botocore.httpsession.create_urllib3_context``) verifying with the CA bundle of its
    ``_verify`` (``get_cert_path``; botocore's own when ``True``), or not verifying if
    ``False`` (botocore 1.35 to 1.40, aiobotocore 2.25)."""
    verify = http_session._verify
    context: ssl.SSLContext = create_urllib3_context()
    if verify is False:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.load_verify_locations(cafile=get_cert_path(verify))
    return context


# --- botocore's standard retry mode (botocore.retries, undocumented) --------------------


@dataclass(frozen=True, slots=True)
class StandardRetries:
    """botocore's standard retry mode for one client: ``StandardRetryConditions``,
    ``ExponentialBackoff`` and a ``RetryQuotaChecker`` (botocore 1.35 to 1.40)."""

    conditions: Any
    backoff: Any
    quota: Any


def standard_retries(max_attempts: int) -> StandardRetries:
    """The standard mode's conditions, backoff and retry quota, as botocore builds them
    for a client of ``max_attempts`` (botocore 1.35 to 1.40)."""
    return StandardRetries(
        standard.StandardRetryConditions(max_attempts=max_attempts),
        standard.ExponentialBackoff(),
        standard.RetryQuotaChecker(quota.RetryQuota()),
    )


def retry_context(**attempt: Any) -> Any:
    """``botocore.retries.standard.RetryContext`` of an attempt (its ``attempt_number``,
    ``operation_model``, ``parsed_response``, ``http_response``, ``caught_exception`` and
    ``request_context``; botocore 1.35 to 1.40)."""
    return standard.RetryContext(**attempt)


def retry_delay(retries: StandardRetries, context: Any) -> float | None:
    """How long to wait before retrying the attempt of ``context``, ``None`` for no retry:
    ``is_retryable``, ``acquire_retry_quota`` and ``delay_amount`` (botocore 1.35 to
    1.40)."""
    if retries.conditions.is_retryable(context) and retries.quota.acquire_retry_quota(context):
        return float(retries.backoff.delay_amount(context))
    return None


def release_retry_quota(retries: StandardRetries, request: Any, http_response: Any) -> None:
    """``RetryQuotaChecker.release_retry_quota`` with a call's request context, as
    botocore's ``after-call`` handler calls it (botocore 1.35 to 1.40)."""
    checker: Any = retries.quota
    checker.release_retry_quota(request, http_response)


def retry_metadata(context: Any) -> dict[str, Any]:
    """``RetryContext.get_retry_metadata``: what the retries add to ``ResponseMetadata``
    (botocore 1.35 to 1.40)."""
    return dict(context.get_retry_metadata())


# --- SigV4 signing from a plain map (SigV4Auth's hooks, undocumented) -----------------


class _SignedHeaders(dict[str, str]):
    """The headers to sign, lower-cased, each once: what ``SigV4Auth`` reads of them
    (its own map is an ``email`` message, built twice per request)."""

    def get_all(self, name: str) -> list[str]:
        return [self[name]]


class JsonSigV4(SigV4Auth):
    """botocore's ``SigV4Auth`` with two of its hooks replaced: ``headers_to_sign`` takes
    the headers from a plain map, minus ``SIGNED_HEADERS_BLACKLIST`` (the request carries
    its ``Host``, so the signer does not parse the URL for it twice), and ``signature``
    uses the day's key from ``signing_key`` (botocore derives it for every request; the
    day is ``request.context["timestamp"]``'s; botocore 1.35 to 1.40)."""

    def __init__(
        self, credentials: Any, service: str, region: str, signing_key: SigningKey
    ) -> None:
        super().__init__(credentials, service, region)
        self._signing_key = signing_key

    def headers_to_sign(self, request: Any) -> Any:
        signed = request.to_sign  # read twice per signature, once the date is in
        if signed is None:
            lowered = ((name.lower(), value) for name, value in request.headers.items())
            signed = _SignedHeaders(
                (name, value) for name, value in lowered if name not in SIGNED_HEADERS_BLACKLIST
            )
            request.to_sign = signed
        return signed

    def signature(self, string_to_sign: str, request: Any) -> str:
        day = request.context["timestamp"][0:8]
        key = self._signing_key(str(self.credentials.secret_key), day)
        return hmac.new(key, string_to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


@dataclass(slots=True)
class _Signable:
    """What ``SigV4Auth.add_auth`` reads and writes of a request, without botocore's
    ``AWSRequest`` (whose headers are an ``email`` message): a JSON ``POST``."""

    url: str
    headers: dict[str, str]
    body: bytes
    method: str = "POST"
    params: dict[str, str] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    to_sign: _SignedHeaders | None = None
    """The headers to sign, once :class:`JsonSigV4` has read them."""


def sign_post(
    url: str,
    headers: dict[str, str],
    body: bytes,
    *,
    credentials: Any,
    scope: tuple[str, str],
    signing_key: SigningKey,
) -> None:
    """Sign a JSON ``POST`` of ``body`` to ``url`` with ``credentials`` (frozen) for
    ``scope`` (its service's signing name and its region), adding the signature's headers
    to ``headers``: :class:`JsonSigV4`'s ``add_auth`` given a plain object in place of an
    ``AWSRequest``, of which it reads and writes only what that object has (botocore 1.35
    to 1.40)."""
    signer = JsonSigV4(credentials, *scope, signing_key)
    signer.add_auth(cast(AWSRequest, _Signable(url, headers, body)))
