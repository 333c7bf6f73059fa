"""The app's configuration: one frozen dataclass, readable from the environment."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from functools import cached_property
from typing import Any, TypedDict, Unpack

from runlane_sqs.core.clock import Duration, to_timedelta
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.limits import (
    DEFAULT_BUCKET_PAYLOAD_LIMIT_BYTES,
    DEFAULT_IDEMPOTENCY_RETENTION_DAYS,
    DEFAULT_INLINE_LIMIT_BYTES,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_PAYLOAD_LIMIT_BYTES,
    DEFAULT_RETENTION_DAYS,
    MAX_BUCKET_PAYLOAD_LIMIT_BYTES,
    MAX_PAYLOAD_LIMIT_BYTES,
)
from runlane_sqs.core.machine import RepublishPolicy
from runlane_sqs.core.names import check_app_version, check_environment, check_queue
from runlane_sqs.core.parking import DEFAULT_PARK_AFTER_RECEIVES
from runlane_sqs.core.progress import DEFAULT_PROGRESS_INTERVAL_SECONDS, MIN_PROGRESS_INTERVAL
from runlane_sqs.core.redaction import Redact

ENV_TABLE = "RUNLANE_TABLE"
ENV_ENVIRONMENT = "RUNLANE_ENVIRONMENT"
ENV_QUEUE_PREFIX = "RUNLANE_QUEUE_PREFIX"
ENV_QUEUE_URLS = "RUNLANE_QUEUE_URLS"
ENV_PAYLOAD_BUCKET = "RUNLANE_PAYLOAD_BUCKET"
"""``name=url`` pairs separated by commas, e.g. ``default=https://sqs...,emails=https://...``."""
DEFAULT_QUEUE_PREFIX = "runlane-{environment}-"
"""The SQS queue prefix of an app given none: its environment's own queues."""
ENV_LEASE_SECONDS = "RUNLANE_LEASE_SECONDS"
ENV_PROGRESS_INTERVAL_SECONDS = "RUNLANE_PROGRESS_INTERVAL_SECONDS"
ENV_REPUBLISH_AFTER_SECONDS = "RUNLANE_REPUBLISH_AFTER_SECONDS"
ENV_REPUBLISH_MAX_SECONDS = "RUNLANE_REPUBLISH_MAX_SECONDS"
ENV_PARK_AFTER_RECEIVES = "RUNLANE_PARK_AFTER_RECEIVES"
ENV_MAINTENANCE_PERIOD_SECONDS = "RUNLANE_MAINTENANCE_PERIOD_SECONDS"
ENV_RETENTION_SECONDS = "RUNLANE_RETENTION_SECONDS"
ENV_APP_VERSION = "RUNLANE_APP_VERSION"
ENV_OPEN_LEGACY_VALUES = "RUNLANE_OPEN_LEGACY_VALUES"
"""``true`` or ``false`` (also ``1``/``0``, ``yes``/``no``)."""
FLAGS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
SECONDS_VARIABLES = {
    ENV_RETENTION_SECONDS: "retention",
    ENV_MAINTENANCE_PERIOD_SECONDS: "maintenance_period",
    ENV_LEASE_SECONDS: "lease_duration",
    ENV_PROGRESS_INTERVAL_SECONDS: "progress_interval",
    ENV_REPUBLISH_AFTER_SECONDS: "republish_after",
    ENV_REPUBLISH_MAX_SECONDS: "republish_max",
}
"""Variables holding a number of seconds, and the setting each one sets."""
TEXT_VARIABLES = {ENV_PAYLOAD_BUCKET: "payload_bucket", ENV_APP_VERSION: "app_version"}
"""Variables holding a text setting (checked as the setting is), and the setting each sets."""


class RunlaneSettings(TypedDict, total=False):
    """An app's settings as keyword arguments (``Runlane(...)``, ``Runlane.from_env(...)``,
    :meth:`RunlaneConfig.build`): the fields of :class:`RunlaneConfig`, durations also as
    seconds. A setting left out keeps its default."""

    table: str
    environment: str
    queue_prefix: str | None
    queue_urls: Mapping[str, str]
    region: str | None
    endpoint_url: str | None
    lease_duration: Duration
    progress_interval: Duration
    payload_limit: int | None
    payload_bucket: str | None
    inline_limit: int
    idempotency_retention: Duration
    retention: Duration | None
    republish_after: Duration
    republish_max: Duration
    redact: Redact | None
    maintenance_period: Duration
    park_after_receives: int
    app_version: str | None
    open_legacy_values: bool


@dataclass(frozen=True)
class RunlaneConfig:
    """Everything a :class:`~runlane_sqs.Runlane` app needs to know about its backend."""

    table: str = "runlane"
    environment: str = "dev"
    queue_prefix: str | None = None
    """SQS queue for logical queue ``q`` is named ``{queue_prefix}{q}`` unless in
    ``queue_urls``. ``None`` (the default) means ``runlane-{environment}-``, so each
    environment has queues of its own; give a prefix to name queues otherwise (two
    environments given the same prefix share its queues)."""
    queue_urls: Mapping[str, str] = field(default_factory=dict)
    region: str | None = None
    endpoint_url: str | None = None
    """Overrides every service endpoint (boto3 also reads ``AWS_ENDPOINT_URL``)."""
    lease_duration: timedelta = timedelta(seconds=DEFAULT_LEASE_SECONDS)
    progress_interval: timedelta = timedelta(seconds=DEFAULT_PROGRESS_INTERVAL_SECONDS)
    """At most one write of what an attempt reports (``ctx.progress``, ``ctx.set_state``)
    per run per this interval; the last report rides on the outcome (docs/progress.md)."""
    payload_limit: int | None = None
    """Largest payload, result, step result, signal payload or token value, in bytes of
    compact JSON (``None``: 64 KiB, or 100 MiB with a ``payload_bucket``);
    :attr:`value_limit` is the limit in effect."""
    payload_bucket: str | None = None
    """The S3 bucket of values over ``inline_limit`` (docs/payloads.md). Without one,
    every value is kept in its record and ``payload_limit`` is at most 128 KiB."""
    inline_limit: int = DEFAULT_INLINE_LIMIT_BYTES
    """Largest value kept in its record when there is a ``payload_bucket``."""
    idempotency_retention: timedelta = timedelta(days=DEFAULT_IDEMPOTENCY_RETENTION_DAYS)
    retention: timedelta | None = timedelta(days=DEFAULT_RETENTION_DAYS)
    """How long a finished run is kept before DynamoDB's TTL deletes it (a task's
    ``retention`` overrides it; ``None``: kept until ``runs prune``; docs/operations.md,
    "Retention")."""
    republish_after: timedelta = timedelta(minutes=5)
    """How long a published wakeup is trusted before maintenance publishes another
    (doubling on each republish of the same due run, up to ``republish_max``)."""
    republish_max: timedelta = timedelta(hours=1)
    redact: Redact | None = field(default=None, compare=False, repr=False)
    """Applied to every failure message and traceback before it is stored or logged
    (docs/operations.md, "Secrets in failures and logs")."""
    maintenance_period: timedelta = timedelta(minutes=1)
    """How often maintenance runs (the template's EventBridge rate): no schedule may fire
    more often, and a schedule's occurrence found within a few periods is on time."""
    park_after_receives: int = DEFAULT_PARK_AFTER_RECEIVES
    """Receives of a wakeup by workers that do not register its task before the run is
    parked (docs/operations.md, "Parked runs")."""
    app_version: str | None = None
    """The version of the code this process runs (a release, a build or commit id),
    recorded on each attempt it runs and on each run it starts (docs/versions.md).
    ``None``: the version of the installed distribution the app's handlers come from,
    if there is one."""
    open_legacy_values: bool = False
    """Also open stored values an app with codecs would not write today (docs/payloads.md,
    "Migrating values"): plain JSON, an envelope of part of the app's chain (in its
    order), and values a ``KmsEncryption`` of an earlier version sealed without binding
    them to their place. Off by default: such a value is refused (``ValueUnreadable``),
    because whoever can write the table could put it there. Turn it on only while
    values written before a change of codecs are still being read."""

    @property
    def sqs_queue_prefix(self) -> str:
        """The prefix of the SQS names of this app's queues: ``queue_prefix``, or
        ``runlane-{environment}-`` when none was given."""
        if self.queue_prefix is not None:
            return self.queue_prefix
        return DEFAULT_QUEUE_PREFIX.format(environment=self.environment)

    def sqs_queue_name(self, queue: str) -> str:
        """The SQS name of logical queue ``queue``: the last part of its ``queue_urls``
        URL, or ``{sqs_queue_prefix}{queue}``."""
        url = self.queue_urls.get(queue)
        if url is not None:
            return url.rstrip("/").rsplit("/", 1)[-1]
        return f"{self.sqs_queue_prefix}{queue}"

    @property
    def value_limit(self) -> int:
        """The largest value in bytes of compact JSON: ``payload_limit``, or its default."""
        if self.payload_limit is not None:
            return self.payload_limit
        if self.payload_bucket:
            return DEFAULT_BUCKET_PAYLOAD_LIMIT_BYTES
        return DEFAULT_PAYLOAD_LIMIT_BYTES

    @cached_property
    def republish(self) -> RepublishPolicy:
        """How often wakeups of a due run are republished (built once: every write of a
        due time reads it)."""
        return RepublishPolicy(
            after=self.republish_after,
            max_after=self.republish_max,
            review_after=self.lease_duration,
        )

    def __post_init__(self) -> None:
        check_environment(self.environment)
        if self.app_version is not None:
            check_app_version(self.app_version)
        if not self.table or not isinstance(self.table, str):
            raise ConfigurationError("table must be a non-empty DynamoDB table name")
        for name in self.queue_urls:
            check_queue(name)
        self._check_value_limits()
        self._check_attempt_durations()
        if not isinstance(self.park_after_receives, int) or self.park_after_receives < 1:
            raise ConfigurationError("park_after_receives must be a whole number of at least 1")
        if self.retention is not None and self.retention < SHORTEST_RETENTION:
            raise ConfigurationError(
                f"retention must be at least {SHORTEST_RETENTION} (or None: kept until "
                f"pruned), not {self.retention}"
            )
        if not isinstance(self.open_legacy_values, bool):
            raise ConfigurationError("open_legacy_values must be True or False")
        if self.maintenance_period < timedelta(seconds=1):
            raise ConfigurationError("maintenance_period must be at least 1 second")
        if not timedelta(seconds=1) <= self.republish_after <= self.republish_max:
            raise ConfigurationError(
                "republish_after must be at least 1 s and at most republish_max"
            )

    def _check_attempt_durations(self) -> None:
        if self.lease_duration < timedelta(seconds=3):
            raise ConfigurationError("lease_duration must be at least 3 seconds")
        if not MIN_PROGRESS_INTERVAL <= self.progress_interval <= self.lease_duration:
            raise ConfigurationError(
                f"progress_interval must be at least {MIN_PROGRESS_INTERVAL.total_seconds()} s "
                f"and at most lease_duration, not {self.progress_interval.total_seconds()} s"
            )

    def _check_value_limits(self) -> None:
        if self.payload_bucket is not None:
            check_bucket(self.payload_bucket)
        highest = MAX_BUCKET_PAYLOAD_LIMIT_BYTES if self.payload_bucket else MAX_PAYLOAD_LIMIT_BYTES
        limit = self.payload_limit
        if limit is not None and (not isinstance(limit, int) or not 1 <= limit <= highest):
            where = "with a payload_bucket" if self.payload_bucket else "without a payload_bucket"
            raise ConfigurationError(
                f"payload_limit must be a whole number of bytes from 1 to {highest} {where}"
            )
        inline = self.inline_limit
        if not isinstance(inline, int) or not 1 <= inline <= MAX_PAYLOAD_LIMIT_BYTES:
            raise ConfigurationError(
                f"inline_limit must be a whole number of bytes from 1 to {MAX_PAYLOAD_LIMIT_BYTES}"
            )

    @classmethod
    def build(cls, **settings: Unpack[RunlaneSettings]) -> RunlaneConfig:
        """Like the constructor, but durations may be given as seconds."""
        return cls(**_values(settings))

    def agreeing_with(self, settings: RunlaneSettings) -> RunlaneConfig:
        """This configuration, given ``settings`` beside it (``Runlane(config=...,
        lease_duration=...)``): a setting it holds already is accepted, one that says
        otherwise is a :class:`ConfigurationError` naming it (none is dropped)."""
        given = replace(self, **_values(settings))  # a name that is no setting: TypeError
        conflicts = [
            f"{name}={getattr(given, name)} where the config has {getattr(self, name)}"
            for name in settings
            if getattr(given, name) != getattr(self, name)
        ]
        if conflicts:
            raise ConfigurationError(
                "settings given with config= must agree with it: "
                + "; ".join(conflicts)
                + " (set them in the config: dataclasses.replace(config, ...))"
            )
        return self

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: Unpack[RunlaneSettings]
    ) -> RunlaneConfig:
        """Read ``RUNLANE_*`` variables; endpoints and region come from boto3's own.
        ``overrides`` (keyword arguments in code) win over the variables. An invalid value
        is a :class:`ConfigurationError` naming its variable."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        if table := env.get(ENV_TABLE):
            values["table"] = table
        if environment := env.get(ENV_ENVIRONMENT):
            values["environment"] = environment
        if prefix := env.get(ENV_QUEUE_PREFIX):
            values["queue_prefix"] = prefix
        if urls := env.get(ENV_QUEUE_URLS):
            values["queue_urls"] = parse_queue_urls(urls)
        read: dict[str, str] = {}  # setting -> "VARIABLE=value", to name it in an error
        kinds: list[tuple[str, str, type[str] | type[float] | type[int] | type[bool]]] = [
            *((v, k, str) for v, k in TEXT_VARIABLES.items()),
            *((v, k, float) for v, k in SECONDS_VARIABLES.items()),
            (ENV_PARK_AFTER_RECEIVES, "park_after_receives", int),
            (ENV_OPEN_LEGACY_VALUES, "open_legacy_values", bool),
        ]
        for variable, setting, kind in kinds:
            text = env.get(variable, "").strip()
            if text and setting not in overrides:
                values[setting] = parse_variable(variable, text, kind)
                read[setting] = f"{variable}={text}"
        values.update(overrides)
        try:
            return cls(**_values(values))
        except ConfigurationError as exc:
            named = [v for k, v in read.items() if k in str(exc)]
            if not named:
                raise
            raise ConfigurationError(f"{exc} (set by {', '.join(named)})") from None


SHORTEST_RETENTION = timedelta(hours=1)
OPTIONAL_DURATIONS = frozenset({"retention"})
"""Durations that may be ``None``."""


def _values(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` as :class:`RunlaneConfig` holds them: durations (the fields whose
    default is a ``timedelta``) as ``timedelta``, ``queue_urls`` as a dict of its own."""
    durations = {f.name for f in fields(RunlaneConfig) if isinstance(f.default, timedelta)}
    values = dict(settings)
    for name in durations & values.keys():
        if values[name] is not None or name not in OPTIONAL_DURATIONS:
            values[name] = to_timedelta(values[name], name)
    if "queue_urls" in values:
        values["queue_urls"] = dict(values["queue_urls"])
    return values


def parse_variable(
    variable: str, text: str, kind: type[str] | type[float] | type[int] | type[bool]
) -> str | float | bool:
    """The setting ``variable``'s value ``text`` holds: text, a number or a flag."""
    if kind is bool:
        if text.lower() not in FLAGS:
            raise ConfigurationError(f"{variable} must be true or false, not {text!r}")
        return FLAGS[text.lower()]
    if issubclass(kind, str):
        return text
    return parse_number(variable, text, kind)


def parse_number(variable: str, text: str, kind: type[float] | type[int]) -> float:
    """The number in ``variable``'s value ``text``: seconds (``float``) or a count (``int``)."""
    try:
        number = kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number of seconds"
        raise ConfigurationError(f"{variable} must be {what}, not {text!r}") from None
    if not math.isfinite(number):
        raise ConfigurationError(f"{variable} must be finite, not {text!r}")
    return number


_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def check_bucket(name: object) -> str:
    """``name`` if it is a valid S3 bucket name, else a :class:`ConfigurationError`."""
    if not isinstance(name, str) or not _BUCKET_NAME.match(name) or ".." in name:
        raise ConfigurationError(
            f"payload_bucket {name!r} is not an S3 bucket name (3 to 63 lowercase letters, "
            "digits, dots and hyphens, starting and ending with a letter or digit)"
        )
    return name


def parse_queue_urls(text: str) -> dict[str, str]:
    urls: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        name, sep, url = pair.partition("=")
        if not sep or not name.strip() or not url.strip():
            raise ConfigurationError(f"{ENV_QUEUE_URLS} entry {pair!r} is not name=url")
        urls[check_queue(name.strip())] = url.strip()
    return urls
