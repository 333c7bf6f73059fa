"""The app: task registry, triggers, workers and provisioning over one backend."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, overload

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from runlane_sqs.clock import Clock, SystemClock
from runlane_sqs.config import RunlaneConfig
from runlane_sqs.core import machine
from runlane_sqs.core.durations import Duration, to_timedelta
from runlane_sqs.core.model import JSON, LinkKind, Run
from runlane_sqs.core.payload import encode_json
from runlane_sqs.core.retry import RetryPolicy
from runlane_sqs.errors import RunlaneError, StorageUnavailable
from runlane_sqs.maintenance import Maintenance
from runlane_sqs.outcomes import finishing_needs_storage, keys_to_release
from runlane_sqs.ports import RunStore, WakeupTransport
from runlane_sqs.provision import provision_queues, provision_table
from runlane_sqs.publishing import Publisher
from runlane_sqs.resuming import RESUME_BATCH, resume_waiters, run_finished
from runlane_sqs.runs import IdempotencyApi, RunsApi
from runlane_sqs.signals import SignalsApi
from runlane_sqs.storage.dynamodb import DynamoRunStore
from runlane_sqs.tasks import Handler, Task, TaskRegistry
from runlane_sqs.tokens import TokensApi
from runlane_sqs.transport.sqs import SqsTransport
from runlane_sqs.triggering import TriggerRequest, create, validate_keys
from runlane_sqs.worker import Worker

if TYPE_CHECKING:
    from runlane_sqs.aio import AsyncWorker

log = logging.getLogger("runlane_sqs")
DEFAULT_BOTOCORE_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5},
    connect_timeout=5,
    read_timeout=30,
    max_pool_connections=50,
    # Requests come from the builders in storage/requests.py and transport/sqs.py, not
    # from user input; AWS validates them anyway. Client-side validation cost about a
    # millisecond of CPU per run (docs/performance.md).
    parameter_validation=False,
)


class Runlane:
    """A runlane-sqs app: one table, one environment, a set of queues.

    Pass ``store``/``transport`` to use other adapters (for example the in-memory ones
    from :mod:`runlane_sqs.testing`); otherwise DynamoDB and SQS clients are built from
    ``session`` (or a default boto3 session), ``region`` and ``endpoint_url``.
    """

    def __init__(
        self,
        table: str = "runlane",
        environment: str = "dev",
        *,
        queue_prefix: str = "runlane-",
        queue_urls: Mapping[str, str] | None = None,
        region: str | None = None,
        endpoint_url: str | None = None,
        session: boto3.Session | None = None,
        botocore_config: Config | None = None,
        clock: Clock | None = None,
        lease_duration: Duration = 60,
        payload_limit: int | None = None,
        idempotency_retention: Duration = timedelta(days=30),
        republish_after: Duration = timedelta(minutes=5),
        republish_max: Duration = timedelta(hours=1),
        config: RunlaneConfig | None = None,
        store: RunStore | None = None,
        transport: WakeupTransport | None = None,
    ) -> None:
        if config is None:
            extra: dict[str, Any] = {}
            if payload_limit is not None:
                extra["payload_limit"] = payload_limit
            config = RunlaneConfig.build(
                table=table,
                environment=environment,
                queue_prefix=queue_prefix,
                queue_urls=dict(queue_urls or {}),
                region=region,
                endpoint_url=endpoint_url,
                lease_duration=lease_duration,
                idempotency_retention=idempotency_retention,
                republish_after=republish_after,
                republish_max=republish_max,
                **extra,
            )
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.tasks = TaskRegistry()
        self._session = session
        self._botocore_config = botocore_config or DEFAULT_BOTOCORE_CONFIG
        self._clients: dict[str, Any] = {}
        self.store: RunStore = store or DynamoRunStore(
            self.client("dynamodb"), config.table, config.environment
        )
        self.transport: WakeupTransport = transport or SqsTransport(
            self.client("sqs"), queue_prefix=config.queue_prefix, queue_urls=config.queue_urls
        )
        self.publisher = Publisher(self.store, self.transport, self.clock)
        self.runs = RunsApi(self)
        self.idempotency = IdempotencyApi(self)
        self.maintenance = Maintenance(self)
        self.signals = SignalsApi(self)
        self.tokens = TokensApi(self)

    @classmethod
    def from_env(cls, **overrides: Any) -> Runlane:
        """An app configured by ``RUNLANE_TABLE``, ``RUNLANE_ENVIRONMENT``,
        ``RUNLANE_QUEUE_PREFIX``, ``RUNLANE_QUEUE_URLS`` and boto3's own variables
        (``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_DYNAMODB``, ``AWS_ENDPOINT_URL_SQS``,
        ``AWS_DEFAULT_REGION``, credentials)."""
        adapters = {
            k: overrides.pop(k)
            for k in ("session", "botocore_config", "clock", "store", "transport")
            if k in overrides
        }
        return cls(config=RunlaneConfig.from_env(**overrides), **adapters)

    @property
    def botocore_config(self) -> Config:
        """Retries, timeouts and pool size of this app's AWS clients."""
        return self._botocore_config

    @property
    def boto_session(self) -> boto3.Session:
        """The boto3 session the app's clients come from (one, so service models load
        once per process)."""
        if self._session is None:
            self._session = boto3.session.Session()
        return self._session

    def client(self, service: str) -> Any:
        """The boto3 client this app uses for ``service`` (built once)."""
        if service not in self._clients:
            self._clients[service] = self.boto_session.client(
                service,  # type: ignore[call-overload]
                region_name=self.config.region,
                endpoint_url=self.config.endpoint_url,
                config=self._botocore_config,
            )
        return self._clients[service]

    # tasks --------------------------------------------------------------------------

    @overload
    def task(
        self,
        fn: Handler,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
    ) -> Task: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
    ) -> Callable[[Handler], Task]: ...

    def task(
        self,
        fn: Handler | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
    ) -> Task | Callable[[Handler], Task]:
        """Register ``def handler(ctx, payload)`` as a task; usable bare or with options.

        ``name`` defaults to ``module.function``; ``timeout`` is a fixed attempt deadline.
        """

        def register(handler: Handler) -> Task:
            return self.tasks.register(
                handler, name=name, queue=queue, retry=retry, timeout=timeout
            )

        return register(fn) if fn is not None else register

    # triggering ---------------------------------------------------------------------

    def trigger(
        self,
        task: Task | str,
        payload: JSON = None,
        *,
        idempotency_key: str | None = None,
        singleton_key: str | None = None,
        delay: Duration | None = None,
    ) -> Run:
        """Create a run and publish its wakeup.

        Returns the new run (``run.created`` is True), or the existing run that holds
        ``idempotency_key`` / ``singleton_key`` (``run.created`` is False). If the wakeup
        cannot be published the run stays queued and maintenance publishes it later.
        """
        request = self._request(task, payload, idempotency_key, singleton_key, delay)
        run = self._create(request)
        if run.created:
            self.publisher.publish_new([run])
        return run

    def trigger_many(
        self, task: Task | str, payloads: Iterable[JSON], *, delay: Duration | None = None
    ) -> list[Run]:
        """Create one run per payload and publish their wakeups in batches of ten."""
        requests = [self._request(task, p, None, None, delay) for p in payloads]
        runs = [self._create(r) for r in requests]
        self.publisher.publish_new(runs)
        return runs

    def _request(
        self,
        task: Task | str,
        payload: JSON,
        idempotency_key: str | None,
        singleton_key: str | None,
        delay: Duration | None,
    ) -> TriggerRequest:
        resolved = self.tasks.resolve(task)
        idem, single = validate_keys(idempotency_key, singleton_key)
        payload_json = encode_json(payload, what="payload", limit_bytes=self.config.payload_limit)
        wait = to_timedelta(delay, "delay") if delay is not None else None
        self.transport.check_queue(resolved.queue)  # a clear error before any write
        return TriggerRequest(
            task=resolved.name,
            queue=resolved.queue,
            payload=payload,
            payload_json=payload_json,
            due_at=self.clock.now() + wait if wait else None,
            idempotency_key=idem,
            singleton_key=single,
        )

    def _create(self, request: TriggerRequest) -> Run:
        run = create(
            self.store,
            request,
            environment=self.config.environment,
            now=self.clock.now(),
            idempotency_retention=self.config.idempotency_retention,
            republish=self.config.republish,
        )
        log.info(
            "triggered run %s of %s" if run.created else "trigger returned existing run %s of %s",
            run.id,
            run.task,
            extra={"run_id": run.id, "task": run.task},
        )
        return run

    def publish(self, run: Run, *, delay: timedelta | None = None) -> bool:
        """Publish one wakeup for ``run``; False if SQS refused (maintenance repairs it)."""
        return self.publisher.publish_many([run], delay=delay) == 1

    def relaunch(
        self, task: Task, source: Run, run_id: str, link: tuple[str, LinkKind, str, str]
    ) -> Run:
        """Create a run of ``task`` with ``source``'s payload, linked to ``source``."""
        run, event = machine.new_run(
            run_id=run_id,
            environment=self.config.environment,
            task=task.name,
            queue=task.queue,
            payload=source.payload,
            now=self.clock.now(),
            republish=self.config.republish,
            source=link,
        )
        payload_json = encode_json(
            source.payload, what="payload", limit_bytes=self.config.payload_limit
        )
        self.store.create_run(run, event, payload_json)
        self.publisher.publish_new([run])
        return run

    def after_finished(self, run: Run) -> None:
        """What follows a run reaching a terminal status: free its keys and resume a first
        batch of runs waiting for it (maintenance polls for the rest)."""
        if not finishing_needs_storage(run):
            return
        self.release_keys(run)
        if run.watched:
            try:
                resume_waiters(self, run_finished(run), limit=RESUME_BATCH)
            except RunlaneError as exc:
                log.warning(
                    "resuming runs waiting for %s failed: %s",
                    run.id,
                    exc,
                    extra={"run_id": run.id, "task": run.task},
                )

    def release_keys(self, run: Run) -> None:
        """Free the keys a finished run no longer holds (idempotency: only on failure).

        Best effort: a key left behind is taken over by the next trigger that finds its
        owner finished, so a failure here is logged, not raised."""
        for kind, key in keys_to_release(run):
            try:
                self.store.release_key(kind, run.task, key, run.id)
            except RunlaneError as exc:
                log.warning(
                    "could not release %s key of run %s: %s",
                    kind.value,
                    run.id,
                    exc,
                    extra={"run_id": run.id, "task": run.task},
                )

    # workers and resources ----------------------------------------------------------

    def worker(
        self,
        queues: Sequence[str] | None = None,
        *,
        concurrency: int = 1,
        **options: Any,
    ) -> Worker:
        """A worker for ``queues`` (default: every queue a registered task uses)."""
        return Worker(self, queues, concurrency=concurrency, **options)

    def async_worker(
        self,
        queues: Sequence[str] | None = None,
        *,
        concurrency: int = 1,
        **options: Any,
    ) -> AsyncWorker:
        """An asyncio worker for ``queues`` (needs the ``async`` extra): ``async def``
        handlers run on its event loop, sync ones on ``concurrency`` threads."""
        from runlane_sqs.aio import AsyncWorker  # noqa: PLC0415 (optional extra)

        return AsyncWorker(self, queues, concurrency=concurrency, **options)

    def provision(self, queues: Sequence[str] | None = None) -> None:
        """Create the table and the queues (with dead-letter queues) if they are absent."""
        names = list(queues) if queues else (self.tasks.queues() or ["default"])
        try:
            provision_table(self.client("dynamodb"), self.config.table)
            if isinstance(self.transport, SqsTransport):
                transport = self.transport
                provision_queues(self.client("sqs"), [transport.queue_name(q) for q in names])
        except (BotoCoreError, ClientError) as exc:
            endpoint = self.client("dynamodb").meta.endpoint_url
            raise StorageUnavailable(f"provisioning at {endpoint} failed: {exc}") from exc
