"""Tasks: registered handlers with their queue, retry policy, attempt timeout,
schedules and concurrency limits; queues with their own limits."""

from __future__ import annotations

import importlib.metadata
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypedDict, TypeVar, Unpack, overload

from runlane_sqs.core.batches import Batch, check_batch
from runlane_sqs.core.clock import Duration, to_timedelta
from runlane_sqs.core.config import SHORTEST_RETENTION, RunlaneConfig
from runlane_sqs.core.debounce import TASK_WIDE_KEY, Debounce, check_debounce
from runlane_sqs.core.errors import (
    ConfigurationError,
    InvalidKeyError,
    InvalidPayloadError,
    RunNotSucceeded,
    UnknownTaskError,
)
from runlane_sqs.core.limits import DEFAULT_PAYLOAD_LIMIT_BYTES
from runlane_sqs.core.model import JSON, Run, RunStatus, Slot
from runlane_sqs.core.names import check_key, check_queue, check_task_name
from runlane_sqs.core.options import option_names, refuse_unknown
from runlane_sqs.core.rate_deploys import Spacing, key_pattern, matches
from runlane_sqs.core.rates import (
    RATE_SCOPE,
    Rate,
    RateLimit,
    check_cost,
    key_rate_scope,
    queue_rate_scope,
    task_rate_scope,
)
from runlane_sqs.core.retry import NO_RETRY, RetryPolicy
from runlane_sqs.core.schedules import Schedule
from runlane_sqs.core.slots import (
    KEY_SCOPE,
    QUEUE_SCOPE,
    check_concurrency_key,
    check_limit,
    key_scope,
    queue_scope,
)
from runlane_sqs.core.values import encode_json
from runlane_sqs.engine.context import TaskContext
from runlane_sqs.engine.value_types import PLAIN_TYPES, UNDECLARED, TaskTypes, declared_types

# P is a task's payload type as its handler takes it, R its result type as it returns it.
if TYPE_CHECKING:  # a bare ``Task`` is ``Task[Any, Any]`` (typing_extensions: Python 3.11)
    from typing_extensions import TypeVar as DefaultingTypeVar

    P = DefaultingTypeVar("P", default=Any)
    R = DefaultingTypeVar("R", default=Any)
else:  # the default matters to type checkers only: importing nothing more costs nothing
    P = TypeVar("P")
    R = TypeVar("R")

Handler = Callable[[TaskContext, Any], Any]
KeyFunction = Callable[[Any], str]
"""Gives the concurrency key of a run from its payload."""


@dataclass(frozen=True)
class Queue:
    """A queue of the app (``app.queue``): its name and its fleet-wide concurrency limit
    (``None``: unlimited). Pass it, or its name, as a task's ``queue``."""

    name: str
    concurrency_limit: int | None = None
    rate_limit: RateLimit | None = None
    """How many of its runs may start per interval, fleet-wide (docs/rate-limits.md)."""

    def __str__(self) -> str:
        return self.name


class TaskOptions(TypedDict, total=False):
    """How a handler is registered (``app.task(...)``); each option may be left out."""

    name: str | None
    """The task's name (default ``module.function``), unique per app."""
    queue: str | Queue
    """The queue its runs go to (default ``"default"``); an ``app.queue`` value brings
    its concurrency limit."""
    retry: RetryPolicy | None
    """What a failed attempt is followed by (default: no retry)."""
    timeout: Duration | None
    """A fixed attempt deadline (default none: an attempt runs as long as it heartbeats)."""
    schedules: Iterable[Schedule]
    """:class:`~runlane_sqs.Schedule` values: maintenance creates runs of it by itself."""
    concurrency_key: KeyFunction | None
    """Gives a run's concurrency key from its payload (needs ``key_limit``)."""
    key_limit: int | None
    """At most this many runs with the same concurrency key hold a lease at once, across
    every worker (docs/concurrency.md)."""
    rate_limits: Sequence[RateLimit]
    """How many of its runs may start per interval, fleet-wide; a ``per_key`` one counts
    each concurrency key apart (docs/rate-limits.md)."""
    rate_cost: int
    """What one run takes from each rate limit it is under (default 1)."""
    debounce: Debounce | None
    """Triggers with the same debounce key collapse into one run that starts after a
    quiet period, with the last payload (docs/debounce.md)."""
    batch: Batch | None
    """Triggers with the same batch key add their payloads as the items of one run,
    which starts when full or old enough and receives the list (docs/batches.md)."""
    retention: Duration | None
    """How long its finished runs are kept before DynamoDB's TTL deletes them (default:
    the app's ``retention``; docs/operations.md, "Retention")."""
    pin_version: bool
    """Its runs finish on the app version they started under: a worker of another version
    leaves their wakeups to a worker of that version (docs/versions.md, "Pinning")."""
    payload_type: Any
    """The payload's type, when the handler's annotation cannot say it (a pydantic model,
    a dataclass, a ``TypedDict``; docs/typed-tasks.md)."""
    result_type: Any
    """The result's type, when the handler's return annotation cannot say it."""


TASK_OPTIONS = option_names(TaskOptions)


@dataclass(frozen=True)
class Task(Generic[P, R]):
    """A registered handler, generic in the payload it takes and the result it returns.
    Calling the task calls the handler directly."""

    name: str
    fn: Handler
    queue: str = "default"
    retry: RetryPolicy = NO_RETRY
    timeout: timedelta | None = None
    """Fixed attempt deadline; ``None`` lets an attempt run as long as it heartbeats."""
    schedules: tuple[Schedule, ...] = field(default=())
    """When maintenance creates runs of it by itself (bound to this task)."""
    concurrency_key: KeyFunction | None = None
    """Gives a run's concurrency key from its payload (a trigger may give it instead)."""
    key_limit: int | None = None
    """At most this many runs of this task with the same concurrency key hold a lease at
    once, fleet-wide (``None``: no limit per key)."""
    rate_limits: tuple[RateLimit, ...] = ()
    rate_cost: int = 1
    debounce: Debounce | None = None
    """How its triggers collapse (``None``: each trigger creates a run)."""
    batch: Batch | None = None
    """How its triggers gather as items of one run (``None``: each creates a run)."""
    retention: timedelta | None = None
    """How long its finished runs are kept (``None``: the app's ``retention``)."""
    pin_version: bool = False
    """Its runs finish on the app version their first attempt ran under."""
    types: TaskTypes = PLAIN_TYPES
    """Its payload and result types, validated and converted (plain JSON: none)."""

    def __call__(self, ctx: TaskContext, payload: P) -> Any:
        return self.fn(ctx, payload)

    def result_of(self, run: Run) -> R:
        """The result of ``run`` (a finished run of this task, as ``app.runs.wait`` gives
        it) as this task's result type: a model, a dataclass, or the stored JSON when the
        task declares none. Raises :class:`RunNotSucceeded` for a run that did not
        succeed and :class:`ValueError` for a run of another task."""
        if run.task != self.name:
            raise ValueError(f"run {run.id} is a run of {run.task!r}, not {self.name!r}")
        if run.status is not RunStatus.SUCCEEDED:
            raise RunNotSucceeded(run.id, run.status.value)
        value: R = self.types.result_value(run.result)
        return value

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


class TaskDecorator(Protocol):
    """``app.task(...)`` with options: registers the handler it is applied to, generic in
    its payload and result as ``app.task`` bare is."""

    @overload
    def __call__(  # an async handler's R is what it awaits
        self, fn: Callable[[TaskContext, P], Awaitable[R]], /
    ) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[[TaskContext, P], R], /) -> Task[P, R]: ...


@dataclass(frozen=True)
class ScheduleRules:
    """What the app's settings require of every schedule it registers."""

    maintenance_period: timedelta = timedelta(minutes=1)
    payload_limit: int = DEFAULT_PAYLOAD_LIMIT_BYTES


class TaskRegistry:
    """Tasks by name. Names are unique per app, and so are schedule ids."""

    def __init__(self, rules: ScheduleRules | None = None) -> None:
        self._tasks: dict[str, Task] = {}
        self._schedules: dict[str, Schedule] = {}
        self._queues: dict[str, Queue] = {}
        self._rules = rules or ScheduleRules()

    def define_queue(
        self, name: str, concurrency_limit: int | None, rate_limit: RateLimit | None = None
    ) -> Queue:
        """A queue with its limits; defining it again with other limits is an error (one
        deploy has one concurrency limit and one rate limit per queue)."""
        if rate_limit is not None and (not isinstance(rate_limit, RateLimit) or rate_limit.per_key):
            raise ConfigurationError(
                f"queue {name!r}: rate_limit is a RateLimit without per_key (a queue's runs "
                f"have no one key), not {rate_limit!r}"
            )
        queue = Queue(
            name=check_queue(name),
            concurrency_limit=None
            if concurrency_limit is None
            else check_limit(concurrency_limit, f"queue {name!r} concurrency_limit"),
            rate_limit=rate_limit,
        )
        known = self._queues.get(queue.name)
        if known is not None and known != queue:
            raise ConfigurationError(
                f"queue {queue.name!r} is already defined with concurrency_limit "
                f"{known.concurrency_limit} and rate_limit {known.rate_limit}"
            )
        self._queues[queue.name] = queue
        return queue

    def queue(self, name: str) -> Queue:
        """The queue ``name`` as defined (an undefined queue has no limit)."""
        return self._queues.get(name) or Queue(name)

    def defined_queues(self) -> list[Queue]:
        """Every queue a task uses or ``app.queue`` defined, by name."""
        names = set(self._queues) | {t.queue for t in self._tasks.values()}
        return [self.queue(name) for name in sorted(names)]

    def register(self, fn: Handler, **options: Unpack[TaskOptions]) -> Task:
        """Register handler ``fn`` as a task with ``options``; raises
        :class:`ConfigurationError` before anything is kept (:class:`TypeError` for an
        option it does not know)."""
        if options.keys() - TASK_OPTIONS:
            refuse_unknown(options, TASK_OPTIONS, "task")
        name = options.get("name") or f"{fn.__module__}.{fn.__qualname__}"
        task_name = check_task_name(name)
        if task_name in self._tasks:
            raise ConfigurationError(f"task {task_name!r} is already registered")
        if not callable(fn):
            raise ConfigurationError(f"task {task_name!r} handler is not callable")
        queue = self._queue_name(options.get("queue", "default"))
        concurrency_key, key_limit = options.get("concurrency_key"), options.get("key_limit")
        rate_limits = _check_rate_limits(task_name, options.get("rate_limits", ()))
        _check_key_limit(task_name, concurrency_key, key_limit, any(r.per_key for r in rate_limits))
        timeout, debounce, batch = (
            options.get("timeout"),
            options.get("debounce"),
            options.get("batch"),
        )
        if debounce is not None and batch is not None:
            raise ConfigurationError(
                f"task {task_name!r}: a task is debounced or batched, not both (a batch's "
                "run takes every item; a debounced run, the last payload)"
            )
        types = declared_types(
            fn,
            task_name,
            payload_type=options.get("payload_type", UNDECLARED),
            result_type=options.get("result_type", UNDECLARED),
            batched=batch is not None,
        )
        bound = self._check_schedules(task_name, queue, types, options.get("schedules", ()))
        task = Task(
            name=task_name,
            fn=fn,
            queue=queue,
            retry=options.get("retry") or NO_RETRY,
            timeout=to_timedelta(timeout, "timeout") if timeout is not None else None,
            schedules=bound,
            concurrency_key=concurrency_key,
            key_limit=key_limit,
            rate_limits=rate_limits,
            rate_cost=check_cost(options.get("rate_cost", 1)),
            debounce=check_debounce(task_name, debounce) if debounce is not None else None,
            batch=check_batch(task_name, batch) if batch is not None else None,
            retention=_check_retention(task_name, options.get("retention")),
            pin_version=_check_pin(task_name, options.get("pin_version", False)),
            types=types,
        )
        for schedule in bound:  # a schedule's payload must give a key now, not at a pass
            concurrency_key_of(task, types.trigger_payload(schedule.payload)[0], None)
        self._tasks[task_name] = task
        self._schedules.update((s.id, s) for s in bound)
        return task

    def _queue_name(self, queue: str | Queue) -> str:
        """The name of a new task's queue; a :class:`Queue` value is defined with it."""
        if isinstance(queue, Queue):
            return self.define_queue(queue.name, queue.concurrency_limit, queue.rate_limit).name
        return check_queue(queue)

    def _check_schedules(
        self, task: str, queue: str, types: TaskTypes, schedules: Iterable[Schedule]
    ) -> tuple[Schedule, ...]:
        """Every schedule of a new task, bound to it, its payload validated against the
        task's payload type and kept as JSON; raises before anything is kept."""
        if isinstance(schedules, Schedule) or not isinstance(schedules, Iterable):
            raise ConfigurationError(f"task {task!r}: schedules must be a list of Schedule")
        bound: list[Schedule] = []
        for schedule in schedules:
            if not isinstance(schedule, Schedule):
                raise ConfigurationError(
                    f"task {task!r}: schedules must be Schedule values, not {schedule!r}"
                )
            if schedule.id in self._schedules or any(s.id == schedule.id for s in bound):
                raise ConfigurationError(f"schedule id {schedule.id!r} is already registered")
            gap = schedule.fires_more_often_than(self._rules.maintenance_period)
            if gap is not None:
                raise ConfigurationError(
                    f"schedule {schedule.id!r}: its occurrences can be {gap} apart, less "
                    f"than the maintenance period {self._rules.maintenance_period} "
                    "(maintenance creates the runs)"
                )
            try:
                payload = types.trigger_payload(schedule.payload)[1]
            except InvalidPayloadError as exc:
                raise ConfigurationError(f"schedule {schedule.id!r}: {exc}") from exc
            encode_json(
                payload,
                what=f"schedule {schedule.id!r} payload",
                limit_bytes=self._rules.payload_limit,
            )
            bound.append(replace(schedule.for_task(task, queue), payload=payload))
        return tuple(bound)

    def schedules(self) -> list[Schedule]:
        """Every schedule of every registered task, bound to its task."""
        return list(self._schedules.values())

    def schedule(self, schedule_id: str) -> Schedule | None:
        return self._schedules.get(schedule_id)

    def get(self, name: str) -> Task | None:
        return self._tasks.get(name)

    def resolve(self, task_or_name: Task | str) -> Task:
        name = task_or_name.name if isinstance(task_or_name, Task) else task_or_name
        task = self._tasks.get(name) if isinstance(name, str) else None
        if task is None:
            raise UnknownTaskError(str(name), list(self._tasks))
        return task

    def names(self) -> list[str]:
        return sorted(self._tasks)

    def queues(self) -> list[str]:
        return sorted({t.queue for t in self._tasks.values()})

    def installed_version(self) -> str | None:
        """``name==version`` of the installed distribution the handlers' modules come
        from (the first by name when they come from several), or ``None`` when none does:
        the app version recorded when none is configured (docs/versions.md)."""
        packages = {
            module.partition(".")[0]
            for module in (getattr(t.fn, "__module__", None) for t in self._tasks.values())
            if module and not module.startswith("runlane_sqs")
        }
        if not packages:
            return None
        owners = importlib.metadata.packages_distributions()
        names = sorted({name for package in packages for name in owners.get(package, ())})
        for name in names:
            try:
                return f"{name}=={importlib.metadata.version(name)}"
            except importlib.metadata.PackageNotFoundError:
                continue
        return None

    def slots_for(self, run: Run) -> tuple[Slot, ...]:
        """The slots a claim of ``run`` takes under this app's limits."""
        slots: list[Slot] = []
        limit = self.queue(run.queue).concurrency_limit
        if limit is not None:
            slots.append(Slot(queue_scope(run.queue), limit))
        task = self._tasks.get(run.task)
        if task is not None and task.key_limit is not None and run.concurrency_key is not None:
            slots.append(Slot(key_scope(run.task, run.concurrency_key), task.key_limit))
        return tuple(slots)

    def scope_limit(self, scope: str) -> tuple[bool, int | None]:
        """``(known, limit)`` of a limit's scope under this app's code: ``known`` is False
        when the app does not define the queue or register the task (``limit`` is then
        ``None`` and means nothing); a known scope with ``limit`` ``None`` is unlimited
        now (a deploy removed the limit)."""
        kind, _, name = scope.partition("#")
        if kind == QUEUE_SCOPE:
            known = name in self._queues or any(t.queue == name for t in self._tasks.values())
            return known, self.queue(name).concurrency_limit if known else None
        task = self._tasks.get(name.partition("#")[0]) if kind == KEY_SCOPE else None
        return task is not None, task.key_limit if task is not None else None

    def rates_for(self, run: Run) -> tuple[Rate, ...]:
        """The rate limits a claim of ``run`` reserves its start under."""
        rates: list[Rate] = []
        queue_limit = self.queue(run.queue).rate_limit
        if queue_limit is not None:
            rates.append(queue_limit.rate_in(queue_rate_scope(run.queue)))
        task = self._tasks.get(run.task)
        for limit in task.rate_limits if task is not None else ():
            if not limit.per_key:
                rates.append(limit.rate_in(task_rate_scope(run.task, limit.per_us)))
            elif run.concurrency_key is not None:
                scope = key_rate_scope(run.task, limit.per_us, run.concurrency_key)
                rates.append(limit.rate_in(scope))
        return tuple(rates)

    def rate_patterns(self) -> dict[str, Spacing]:
        """Every rate limit this app's code sets, as claims apply it, by pattern: a
        queue's or task's scope, or the scope prefix of a task's per-key limit
        (:mod:`runlane_sqs.core.rate_deploys`)."""
        found: dict[str, Spacing] = {}
        for queue in self.defined_queues():
            if queue.rate_limit is not None:
                rate = queue.rate_limit.rate_in(queue_rate_scope(queue.name))
                found[rate.scope] = (rate.interval_us, rate.tolerance_us)
        for task in self._tasks.values():
            for limit in task.rate_limits:
                pattern = (
                    key_pattern(task.name, limit.per_us)
                    if limit.per_key
                    else task_rate_scope(task.name, limit.per_us)
                )
                rate = limit.rate_in(pattern)
                found[pattern] = (rate.interval_us, rate.tolerance_us)
        return found

    def knows_pattern(self, pattern: str) -> bool:
        """Whether this app registers the task or uses the queue a limit's pattern is of:
        only then does its code say whether the limit is still set."""
        kind, _, rest = pattern.removeprefix(f"{RATE_SCOPE}#").partition("#")
        if kind == "queue":
            return self.scope_limit(queue_scope(rest))[0]
        return rest.partition("#")[0] in self._tasks

    def defined_rates(
        self, keys: Iterable[str] = (), stored: Iterable[str] = ()
    ) -> list[tuple[str, RateLimit]]:
        """The rate limits this app's code sets, by scope: every queue's and task's, and
        each task's per-key one for ``keys`` and for each of the ``stored`` scopes (those
        with a record) it has."""
        checked = [check_concurrency_key(key) for key in keys]
        recorded = sorted(set(stored))
        found = [
            (queue_rate_scope(q.name), q.rate_limit)
            for q in self.defined_queues()
            if q.rate_limit is not None
        ]
        for task in sorted(self._tasks.values(), key=lambda t: t.name):
            for limit in task.rate_limits:
                if not limit.per_key:
                    found.append((task_rate_scope(task.name, limit.per_us), limit))
                else:
                    pattern = key_pattern(task.name, limit.per_us)
                    asked = {key_rate_scope(task.name, limit.per_us, k) for k in checked}
                    asked.update(scope for scope in recorded if matches(scope, pattern))
                    found += [(scope, limit) for scope in sorted(asked)]
        return found

    def keyed_rates(self) -> bool:
        """Whether a task of this app has a per-key rate limit."""
        return any(limit.per_key for t in self._tasks.values() for limit in t.rate_limits)

    def limited(self, task: Task, queue: str) -> bool:
        """Whether runs of ``task`` on ``queue`` may need slots or a reserved start
        (their claim reads first)."""
        limits = self.queue(queue)
        return (
            task.key_limit is not None
            or bool(task.rate_limits)
            or limits.concurrency_limit is not None
            or limits.rate_limit is not None
        )


def _check_retention(task: str, retention: Duration | None) -> timedelta | None:
    if retention is None:
        return None
    kept = to_timedelta(retention, f"task {task!r} retention")
    if kept < SHORTEST_RETENTION:
        raise ConfigurationError(
            f"task {task!r}: retention must be at least {SHORTEST_RETENTION}, not {kept}"
        )
    return kept


def retention_for(
    task: Task | None, config: RunlaneConfig, *, idempotency_key: str | None = None
) -> timedelta | None:
    """How long a new run of ``task`` is kept once finished: the task's retention, else
    the app's; at least the idempotency retention when it holds an idempotency key (its
    key must not outlive it). ``None``: kept until pruned."""
    kept = task.retention if task is not None and task.retention is not None else config.retention
    if kept is not None and idempotency_key is not None:
        return max(kept, config.idempotency_retention)
    return kept


def _check_key_limit(
    task: str, key: KeyFunction | None, limit: int | None, keyed_rates: bool
) -> None:
    if key is not None and not callable(key):
        raise ConfigurationError(
            f"task {task!r}: concurrency_key must be a function of the payload"
        )
    if key is not None and limit is None and not keyed_rates:
        raise ConfigurationError(
            f"task {task!r}: concurrency_key needs a key_limit or a per_key rate limit"
        )
    if limit is not None:
        check_limit(limit, f"task {task!r} key_limit")


def _check_rate_limits(task: str, limits: object) -> tuple[RateLimit, ...]:
    """A task's rate limits: at most one per interval, and one per key per interval."""
    if isinstance(limits, RateLimit) or not isinstance(limits, Iterable):
        raise ConfigurationError(f"task {task!r}: rate_limits must be a list of RateLimit")
    found = tuple(limits)
    seen: set[tuple[int, bool]] = set()
    for limit in found:
        if not isinstance(limit, RateLimit):
            raise ConfigurationError(
                f"task {task!r}: rate_limits must be RateLimit values, not {limit!r}"
            )
        shape = (limit.per_us, limit.per_key)
        if shape in seen:
            raise ConfigurationError(
                f"task {task!r}: two rate limits per {limit.per}"
                + (" per key" if limit.per_key else "")
                + ": keep the stricter one"
            )
        seen.add(shape)
    return found


def concurrency_key_of(task: Task, payload: JSON, given: object) -> str | None:
    """A new run's concurrency key: ``given`` at trigger time, else the task's function
    of the payload. Raises :class:`InvalidKeyError` (the trigger fails, nothing is
    written) when the function raises or gives no valid key."""
    if given is not None:
        if task.key_limit is None and not any(r.per_key for r in task.rate_limits):
            raise InvalidKeyError(
                f"task {task.name!r} has no key_limit and no per_key rate limit: a "
                "concurrency key would limit nothing"
            )
        return check_concurrency_key(given)
    if task.concurrency_key is None:
        return None
    return check_concurrency_key(key_from(task, task.concurrency_key, "concurrency_key", payload))


def key_from(task: Task, function: Callable[[Any], object], what: str, payload: JSON) -> str:
    """What a task's key ``function`` gives for ``payload``; :class:`InvalidKeyError` when
    it raises or gives no string."""
    try:
        key = function(payload)
    except Exception as exc:
        raise InvalidKeyError(
            f"the {what} function of task {task.name!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(key, str):
        raise InvalidKeyError(
            f"the {what} function of task {task.name!r} returned {type(key).__name__}, not a string"
        )
    return key


GATHERED_OPTIONS = ("delay", "ordering_key", "idempotency_key", "singleton_key")
"""Trigger options a debounced or batched trigger refuses: its run's due time is its
rule's, and the run it goes to is its key's (docs/debounce.md, docs/batches.md)."""


def debounce_key_of(task: Task, payload: JSON, options: Mapping[str, object]) -> str | None:
    """A trigger's debounce key (``None`` for a task without a debounce): the trigger's
    ``debounce_key``, else the task's key function of the payload, else the task-wide
    key. Raises :class:`InvalidKeyError` before anything is written."""
    rule = task.debounce
    return _gathering_key(task, payload, options, "debounce", None if rule is None else (rule.key,))


def batch_key_of(task: Task, payload: JSON, options: Mapping[str, object]) -> str | None:
    """A trigger's batch key (``None`` for a task without a batch): the trigger's
    ``batch_key``, else the task's key function of the payload, else the task-wide key.
    Raises :class:`InvalidKeyError` before anything is written."""
    rule = task.batch
    return _gathering_key(task, payload, options, "batch", None if rule is None else (rule.key,))


def _gathering_key(
    task: Task,
    payload: JSON,
    options: Mapping[str, object],
    kind: str,
    rule: tuple[Callable[[Any], str] | None] | None,
) -> str | None:
    """The ``kind`` key (debounce, batch) of a trigger of ``task``, whose rule has the key
    function ``rule[0]`` (``rule`` ``None``: the task has no such rule)."""
    given = options.get(f"{kind}_key")
    if rule is None:
        if given is not None:
            raise InvalidKeyError(
                f"task {task.name!r} has no {kind}: register it with {kind}="
                f"{kind.capitalize()}(...) to give triggers a {kind}_key"
            )
        return None
    refused = [name for name in GATHERED_OPTIONS if options.get(name) is not None]
    if refused:
        raise InvalidKeyError(
            f"task {task.name!r} has a {kind}: a trigger cannot also have "
            f"{', '.join(refused)} (its run starts when its {kind} says, and later "
            "triggers of its key go to it)"
        )
    if given is not None:
        return check_key(kind, given)
    (function,) = rule
    if function is None:
        return TASK_WIDE_KEY
    return check_key(kind, key_from(task, function, f"{kind} key", payload))


def _check_pin(task: str, pin: object) -> bool:
    if not isinstance(pin, bool):
        raise ConfigurationError(f"task {task!r}: pin_version is True or False, not {pin!r}")
    return pin
