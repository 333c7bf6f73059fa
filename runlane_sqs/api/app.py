"""The app: the facade users hold. It owns the task registry and the AWS clients, builds
the engine over DynamoDB and SQS (or the adapters it is given) and hands out workers and
the operator API."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, Unpack, cast, overload

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from runlane_sqs.adapters.aws import AwsClients
from runlane_sqs.adapters.dynamodb.store import DynamoRunStore
from runlane_sqs.adapters.s3 import S3Objects
from runlane_sqs.adapters.sqs.transport import SqsTransport
from runlane_sqs.api.operators import OperatorApis
from runlane_sqs.api.telemetry import Telemetry
from runlane_sqs.api.transactions import Transaction
from runlane_sqs.core.clock import Clock, SystemClock
from runlane_sqs.core.config import RunlaneConfig, RunlaneSettings
from runlane_sqs.core.errors import StorageUnavailable
from runlane_sqs.core.groups import Group
from runlane_sqs.core.limits import MAX_PAYLOAD_LIMIT_BYTES
from runlane_sqs.core.model import JSON, Run
from runlane_sqs.core.options import option_names, refuse_unknown
from runlane_sqs.core.rates import RateLimit
from runlane_sqs.engine.context import Child, GroupOptions, NamedTask, TaskContext
from runlane_sqs.engine.engine import Engine
from runlane_sqs.engine.hooks import AttemptHooks
from runlane_sqs.engine.publishing import Publisher
from runlane_sqs.engine.signals import SignalsApi
from runlane_sqs.engine.tasks import (
    Handler,
    P,
    Queue,
    R,
    ScheduleRules,
    Task,
    TaskDecorator,
    TaskOptions,
    TaskRegistry,
)
from runlane_sqs.engine.tokens import TokensApi
from runlane_sqs.engine.triggering import TriggerManyOptions, TriggerOptions
from runlane_sqs.engine.values import codec_chain
from runlane_sqs.ports.codecs import Codec
from runlane_sqs.ports.objects import ObjectStore
from runlane_sqs.ports.store import RunStore
from runlane_sqs.ports.transport import WakeupTransport

if TYPE_CHECKING:
    from runlane_sqs.engine.maintenance import Maintenance
    from runlane_sqs.runtime.aio.worker import AsyncWorker
    from runlane_sqs.runtime.worker import Worker, WorkerOptions

__all__ = ["AppOptions", "Runlane"]
log = logging.getLogger("runlane_sqs")


class AppParts(TypedDict, total=False):
    """What an app is built from besides its settings: adapters, clock, telemetry and the
    AWS session its clients come from (each left out: the default)."""

    store: RunStore | None
    """Where runs are kept (default: DynamoDB, the ``table`` setting's)."""
    transport: WakeupTransport | None
    """Where wakeups go (default: SQS)."""
    objects: ObjectStore | None
    """Where values over ``inline_limit`` go (default: S3, with a ``payload_bucket``)."""
    codec: Codec | Sequence[Codec] | None
    """What encodes every stored value, one codec or a chain (docs/payloads.md)."""
    clock: Clock | None
    telemetry: Telemetry | None
    """What is traced and measured, and where it goes (docs/observability.md)."""
    session: boto3.Session | None
    """The boto3 session the AWS clients come from."""
    botocore_config: Config | None
    """Retries, timeouts and pool size of the AWS clients (botocore's ``Config``)."""


class AppOptions(RunlaneSettings, AppParts, total=False):
    """Every keyword argument of :class:`Runlane` and :meth:`Runlane.from_env`, declared
    once: the app's settings (:class:`~runlane_sqs.core.config.RunlaneSettings`) and
    its parts (:class:`AppParts`)."""


PART_NAMES = frozenset(AppParts.__annotations__)


APP_OPTIONS = option_names(AppOptions)


def split_options(options: AppOptions) -> tuple[RunlaneSettings, AppParts]:
    """The settings and the parts among ``options``."""
    settings: dict[str, Any] = {}
    parts: dict[str, Any] = {}
    for name, value in options.items():
        (parts if name in PART_NAMES else settings)[name] = value
    return cast(RunlaneSettings, settings), cast(AppParts, parts)


class Runlane(OperatorApis):
    """A runlane-sqs app: one table, one environment, a set of queues.

    Pass ``store``/``transport`` to use other adapters (for example the in-memory ones
    from :mod:`runlane_sqs.testing`); otherwise DynamoDB and SQS clients are built from
    ``session`` (or a default boto3 session), ``region`` and ``endpoint_url``. The SQS
    queue of task queue ``q`` is ``{queue_prefix}{q}`` (unless ``queue_urls`` names it);
    without ``queue_prefix`` that is ``runlane-{environment}-{q}``, so each environment
    has queues of its own. ``telemetry`` says what is traced and measured, and where it
    goes (default :meth:`Telemetry.from_env`; docs/observability.md). ``codec`` (one,
    or a chain applied in order, from :mod:`runlane_sqs.codecs`) encodes every stored
    value, e.g. ``[Zstd(), KmsEncryption(key)]``; ``objects`` is the payload bucket's
    store (default: S3, with a ``payload_bucket``; docs/payloads.md).
    """

    def __init__(
        self, *, config: RunlaneConfig | None = None, **options: Unpack[AppOptions]
    ) -> None:
        if options.keys() - APP_OPTIONS:
            refuse_unknown(options, APP_OPTIONS, "Runlane")
        settings, parts = split_options(options)
        if config is None:
            config = RunlaneConfig.build(**settings)
        else:
            config = config.agreeing_with(settings)
        self.config = config
        self.codecs = codec_chain(parts.get("codec"))
        """What encodes every stored value (docs/payloads.md, "Codecs"), in order."""
        self.telemetry = parts.get("telemetry") or Telemetry.from_env()
        self.observer = self.telemetry.observer(config)
        """Spans and metrics of every engine this app builds (docs/observability.md)."""
        self.clock: Clock = parts.get("clock") or SystemClock()
        self.hooks = AttemptHooks()
        """Code of yours every worker of this app runs around each attempt:
        ``@app.hooks.before_attempt``, ``@app.hooks.after_attempt``,
        ``@app.hooks.on_failure`` (docs/hooks.md)."""
        self.tasks = TaskRegistry(
            ScheduleRules(
                maintenance_period=config.maintenance_period,
                payload_limit=min(config.value_limit, MAX_PAYLOAD_LIMIT_BYTES),
            )
        )
        self.aws = AwsClients(
            region=config.region,
            endpoint_url=config.endpoint_url,
            session=parts.get("session"),
            botocore_config=parts.get("botocore_config"),
        )
        # Clients are built on first use: importing a module that builds an app needs no
        # AWS settings (a missing region is a ConfigurationError at the first request).
        self.rewire(
            store=parts.get("store")
            or DynamoRunStore(self.aws.lazy("dynamodb"), config.table, config.environment),
            transport=parts.get("transport")
            or SqsTransport(
                self.aws.lazy("sqs"),
                queue_prefix=config.sqs_queue_prefix,
                queue_urls=config.queue_urls,
            ),
            clock=self.clock,
            objects=parts.get("objects"),
        )

    def rewire(
        self,
        *,
        store: RunStore,
        transport: WakeupTransport,
        clock: Clock,
        objects: ObjectStore | None = None,
    ) -> None:
        """Run this app (its tasks and configuration) over other adapters and clock, e.g.
        in memory for a test (:func:`runlane_sqs.testing.use_in_memory`). ``objects``
        holds the values over ``inline_limit`` (``None``: the ``payload_bucket`` in S3,
        if the configuration names one). Workers built before keep the adapters they
        were built with."""
        self.store = store
        self.transport = transport
        self.clock = clock
        if objects is None and self.config.payload_bucket:
            objects = S3Objects(self.aws.lazy("s3"), self.config.payload_bucket)
        self.objects = objects
        self.engine = Engine(
            config=self.config,
            clock=clock,
            tasks=self.tasks,
            store=store,
            transport=transport,
            objects=objects,
            codecs=self.codecs,
            observer=self.observer,
            hooks=self.hooks,
        )
        self.forget_apis()  # built again, over this engine, on first use
        self.engine.bulk_carrier = lambda: self.bulk  # maintenance carries on orphaned ones

    @property
    def publisher(self) -> Publisher:
        """Publishes wakeups and repairs refused ones (the engine's)."""
        return self.engine.publisher

    @property
    def maintenance(self) -> Maintenance:
        """``app.maintenance.run_pass()``: one bounded maintenance pass."""
        return self.engine.maintenance

    @property
    def tokens(self) -> TokensApi:
        """Create, read and decide tokens."""
        return self.engine.tokens

    @property
    def signals(self) -> SignalsApi:
        """``app.signals.send(key, payload)`` wakes the runs waiting on ``key``."""
        return self.engine.signals

    @classmethod
    def from_env(cls, **options: Unpack[AppOptions]) -> Runlane:
        """An app configured by ``RUNLANE_TABLE``, ``RUNLANE_ENVIRONMENT``,
        ``RUNLANE_QUEUE_PREFIX``, ``RUNLANE_QUEUE_URLS``, ``RUNLANE_PAYLOAD_BUCKET``,
        ``RUNLANE_LEASE_SECONDS``,
        ``RUNLANE_REPUBLISH_AFTER_SECONDS``, ``RUNLANE_REPUBLISH_MAX_SECONDS``,
        ``RUNLANE_PARK_AFTER_RECEIVES`` and boto3's own variables (``AWS_ENDPOINT_URL``,
        ``AWS_ENDPOINT_URL_DYNAMODB``, ``AWS_ENDPOINT_URL_SQS``, ``AWS_DEFAULT_REGION``,
        credentials). Settings given as keyword arguments win over the variables; the
        other options are :class:`Runlane`'s."""
        settings, parts = split_options(options)
        return cls(config=RunlaneConfig.from_env(**settings), **parts)

    @property
    def botocore_config(self) -> Config:
        """Retries, timeouts and pool size of this app's AWS clients."""
        return self.aws.botocore_config

    @property
    def boto_session(self) -> boto3.Session:
        """The boto3 session the app's clients come from (one, so service models load
        once per process)."""
        return self.aws.session

    def client(self, service: str) -> Any:
        """The boto3 client this app uses for ``service`` (built once)."""
        return self.aws.client(service)

    # tasks --------------------------------------------------------------------------

    @overload
    def task(  # an async handler's R is what it awaits
        self, fn: Callable[[TaskContext, P], Awaitable[R]], /, **options: Unpack[TaskOptions]
    ) -> Task[P, R]: ...

    @overload
    def task(
        self, fn: Callable[[TaskContext, P], R], /, **options: Unpack[TaskOptions]
    ) -> Task[P, R]: ...

    @overload
    def task(self, fn: None = None, /, **options: Unpack[TaskOptions]) -> TaskDecorator: ...

    def task(
        self, fn: Handler | None = None, /, **options: Unpack[TaskOptions]
    ) -> Task | Callable[[Handler], Task]:
        """Register ``def handler(ctx, payload)`` as a task; usable bare or with options
        (:class:`~runlane_sqs.TaskOptions`: ``name``, ``queue``, ``retry``, ``timeout``,
        ``schedules``, ``concurrency_key``, ``key_limit``, ``payload_type``,
        ``result_type``, ...).

        The task is generic in the payload its handler takes and the result it returns,
        read from the handler's annotations: a pydantic model, a dataclass or a
        ``TypedDict`` is validated at every trigger and converted for the handler, and its
        result stored as JSON (docs/typed-tasks.md); plain JSON annotations (or none) cost
        nothing.

        ``name`` defaults to ``module.function``; ``timeout`` is a fixed attempt deadline;
        ``schedules`` (:class:`~runlane_sqs.Schedule` values) make maintenance create runs
        of it by itself. ``key_limit`` lets at most that many runs with the same
        concurrency key (``concurrency_key(payload)``, or given at trigger time) hold a
        lease at once, across every worker; ``queue`` may be an :meth:`queue` with its own
        limit (docs/concurrency.md).
        """

        def register(handler: Handler) -> Task:
            return self.tasks.register(handler, **options)

        return register(fn) if fn is not None else register

    def queue(
        self,
        name: str,
        *,
        concurrency_limit: int | None = None,
        rate_limit: RateLimit | None = None,
    ) -> Queue:
        """Define queue ``name``: with ``concurrency_limit``, at most that many of its runs
        hold a lease at once across every worker process and Lambda; a claim that finds
        the limit reached makes the run wait, and the next free slot wakes it, oldest
        first (docs/concurrency.md). With ``rate_limit``, at most so many of its runs
        start per interval (docs/rate-limits.md). Pass the result as a task's ``queue``."""
        return self.tasks.define_queue(name, concurrency_limit, rate_limit)

    # triggering ---------------------------------------------------------------------

    @overload
    def trigger(
        self, task: Task[P, R], payload: P = ..., **options: Unpack[TriggerOptions]
    ) -> Run: ...

    @overload
    def trigger(
        self, task: str, payload: JSON = None, **options: Unpack[TriggerOptions]
    ) -> Run: ...

    def trigger(
        self, task: Task | str, payload: JSON = None, **options: Unpack[TriggerOptions]
    ) -> Run:
        """Create a run and publish its wakeup (:class:`~runlane_sqs.TriggerOptions`:
        ``idempotency_key``, ``singleton_key``, ``delay``, ``concurrency_key``,
        ``ordering_key``, ``queue``).

        Returns the new run (``run.created`` is True), or the existing run that holds
        ``idempotency_key`` / ``singleton_key`` (``run.created`` is False). If the wakeup
        cannot be published the run stays queued and maintenance publishes it later.
        ``concurrency_key`` overrides the task's key function (tasks with a ``key_limit``).
        Runs with the same ``ordering_key`` execute one at a time in trigger order, each
        after the earlier ones finished (docs/ordering.md). A task with a payload type
        takes a value of it (or one that validates into it: an invalid payload raises
        :class:`~runlane_sqs.errors.InvalidPayloadError` naming each field, and nothing is
        written); an option it does not know raises :class:`TypeError` naming the closest
        one.
        """
        return self.engine.triggers.trigger(task, payload, **options)

    @overload
    def trigger_many(
        self, task: Task[P, R], payloads: Iterable[P], **options: Unpack[TriggerManyOptions]
    ) -> list[Run]: ...

    @overload
    def trigger_many(
        self, task: str, payloads: Iterable[JSON], **options: Unpack[TriggerManyOptions]
    ) -> list[Run]: ...

    def trigger_many(
        self, task: Task | str, payloads: Iterable[JSON], **options: Unpack[TriggerManyOptions]
    ) -> list[Run]:
        """Create one run per payload and publish their wakeups in batches of ten
        (``delay`` and ``queue`` apply to every one)."""
        return self.engine.triggers.trigger_many(task, payloads, **options)

    def transaction(self) -> Transaction:
        """A transaction for your own DynamoDB writes and new runs, committed as one
        ``TransactWriteItems`` (docs/transactions.md)::

            with app.transaction() as tx:
                tx.put("orders", {"id": order_id, "total": 42})
                tx.trigger("orders.ship", {"order": order_id})

        The runs exist if and only if the writes commit; their wakeups are published
        after the commit (the next maintenance pass publishes them if this process
        stops first). ``async with`` commits on a thread."""
        return Transaction(self.engine)

    def group(
        self,
        children: Iterable[Child],
        *,
        then: Child | None = None,
        **options: Unpack[GroupOptions],
    ) -> Group:
        """Start ``(task, payload)`` children as one group (:class:`~runlane_sqs.GroupOptions`:
        ``max_in_flight``, ``tolerate``) and trigger ``then`` once when they have all
        finished (Celery's chord); the callback runs whether the group succeeded or failed,
        and reads which with ``ctx.joined_group()``. Everything is validated before
        anything is written. Inside a handler, ``ctx.map`` and ``ctx.group`` wait for a
        group instead."""
        return self.engine.groups.start(children, then, options)

    @overload
    def chain(self, first: tuple[Task[P, R], P], *tasks: NamedTask | str) -> Group: ...

    @overload
    def chain(self, first: tuple[str, JSON], *tasks: NamedTask | str) -> Group: ...

    def chain(self, first: Child, *tasks: NamedTask | str) -> Group:
        """Run ``first`` (a ``(task, payload)`` pair), then each of ``tasks`` with the
        result of the one before as its payload; the chain stops at a run that fails or
        is cancelled. Each task runs as a group of one child (``app.runs.children`` of the
        returned group id lists the first run; each group opens the next task's).
        ``first``'s payload is validated against its task's payload type before anything
        is written; each later task's payload is the stored result before it, validated
        when its run starts."""
        return self.engine.groups.chain(first, tasks)

    # workers and resources ----------------------------------------------------------

    def worker(
        self, queues: Sequence[str] | None = None, **options: Unpack[WorkerOptions]
    ) -> Worker:
        """A worker for ``queues`` (default: every queue a registered task uses);
        ``options``: ``concurrency`` (handler threads, default 1), ``wait_seconds``,
        ``grace_period``, ``worker_id``."""
        from runlane_sqs.runtime.worker import Worker  # noqa: PLC0415 (not on the Lambda path)

        return Worker(self, queues, **options)

    def async_worker(
        self,
        queues: Sequence[str] | None = None,
        *,
        session: Any | None = None,
        **options: Unpack[WorkerOptions],
    ) -> AsyncWorker:
        """An asyncio worker for ``queues`` (needs the ``async`` extra): ``async def``
        handlers run on its event loop, sync ones on ``concurrency`` threads; ``session``
        is an ``aioboto3.Session`` (default: a new one)."""
        from runlane_sqs.runtime.aio.worker import AsyncWorker  # noqa: PLC0415 (optional extra)

        return AsyncWorker(self, queues, session=session, **options)

    def provision(self, queues: Sequence[str] | None = None) -> None:
        """Create the table, the queues (with dead-letter queues) and the payload bucket
        (with a ``payload_bucket``) if they are absent."""
        from runlane_sqs.adapters import provision  # noqa: PLC0415 (not on the Lambda path)

        names = list(queues) if queues else (self.tasks.queues() or ["default"])
        try:
            provision.provision_table(self.client("dynamodb"), self.config.table)
            if self.config.payload_bucket and isinstance(self.objects, S3Objects):
                provision.provision_bucket(self.client("s3"), self.config.payload_bucket)
            if isinstance(self.transport, SqsTransport):
                transport = self.transport
                provision.provision_queues(
                    self.client("sqs"), [transport.queue_name(q) for q in names]
                )
        except (BotoCoreError, ClientError) as exc:
            endpoint = self.client("dynamodb").meta.endpoint_url
            raise StorageUnavailable(f"provisioning at {endpoint} failed: {exc}") from exc
