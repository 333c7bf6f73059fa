"""What a handler sees of its run: :class:`TaskContext`, and its :class:`Cancellation`."""

from __future__ import annotations

import inspect
import json
import logging
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import (
    TYPE_CHECKING,
    Any,
    NoReturn,
    Protocol,
    TypedDict,
    TypeVar,
    Unpack,
    cast,
    overload,
)

from runlane_sqs.core.clock import Duration, to_timedelta
from runlane_sqs.core.errors import (
    ConfigurationError,
    PayloadTooLarge,
    RunlaneError,
    RunNotFound,
    StepError,
)
from runlane_sqs.core.groups import Group, GroupFailed, GroupResults
from runlane_sqs.core.model import JSON, Failure, Run, RunStatus, Wait, WaitKind
from runlane_sqs.core.names import check_key
from runlane_sqs.core.progress import AttemptReport, checked_progress, checked_state
from runlane_sqs.core.replay import (
    PATCH_PREFIX,
    PATCH_SITE,
    Replay,
    patch_name,
    recorded_calls,
    step_call,
    wait_call,
)
from runlane_sqs.core.tokens import Token, TokenNotFound, TokenResult, TokenStatus
from runlane_sqs.core.values import Holder, ValueField, ValuePlace, stored_text
from runlane_sqs.core.waits import wait_name
from runlane_sqs.engine.value_types import TaskTypes
from runlane_sqs.engine.values import Prepared, Values

if TYPE_CHECKING:
    import asyncio

    import typing_extensions

    # a bare ``NamedTask`` is ``NamedTask[Any, Any]`` (typing_extensions: Python 3.11)
    P_contra = typing_extensions.TypeVar("P_contra", contravariant=True, default=Any)
    R_co = typing_extensions.TypeVar("R_co", covariant=True, default=Any)
else:  # the defaults matter to type checkers only
    P_contra = TypeVar("P_contra", contravariant=True)
    R_co = TypeVar("R_co", covariant=True)

T = TypeVar("T")
A = TypeVar("A")
"""A wait's answer (a token's decision, another run's outcome)."""
P = TypeVar("P")
"""A mapped task's payload type."""
R = TypeVar("R")
"""A mapped task's result type."""


class Cancellation(threading.Event):
    """The cancellation signal of one attempt: set once it should stop, never stopping a
    handler by force.

    Set from any thread (the heartbeat, a stopping worker, a Lambda deadline timer). Sync
    handlers check :meth:`~threading.Event.is_set` or block in
    :meth:`~threading.Event.wait`; ``async def`` handlers ``await`` :meth:`wait_async`, on
    whichever event loop they run. asyncio is imported by ``wait_async`` only, which runs
    on an event loop: a sync worker or Lambda function never loads it
    (docs/deploy-lambda.md, "Cold start")."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def set(self) -> None:
        with self._lock:
            super().set()
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, future)

    async def wait_async(self) -> None:
        """Return once the cancellation is set (at once if it already is)."""
        import asyncio  # noqa: PLC0415 (loaded already: this runs on an event loop)

        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self.is_set():
                return
            self._waiters.append((loop, future))
        try:
            await future
        finally:
            with self._lock:
                if (loop, future) in self._waiters:
                    self._waiters.remove((loop, future))


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class RunLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger whose every line carries the run id, task, attempt and worker id."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        extra = dict(self.extra or {})
        extra.update(kwargs.get("extra") or {})
        kwargs["extra"] = extra
        return msg, kwargs


def run_logger(name: str, run: Run, worker_id: str | None = None) -> RunLogger:
    extra: dict[str, Any] = {"run_id": run.id, "task": run.task, "attempt": run.attempt}
    if worker_id is not None:
        extra["worker_id"] = worker_id
    if run.tags:
        extra["tags"] = run.tags
    return RunLogger(logging.getLogger(name), extra)


class WaitRequested(BaseException):
    """Raised by ``ctx.release`` and the ``ctx.wait_for_*`` methods to end the attempt.

    It derives from ``BaseException`` so that ``except Exception:`` in a handler does not
    swallow it. Code after a wait does not run in this attempt: the next attempt starts
    the handler from the beginning (use ``ctx.step`` for side effects that must not repeat).
    """

    def __init__(self, wait: Wait) -> None:
        super().__init__(f"waiting for {wait.kind.value} {wait.target or ''}".strip())
        self.wait = wait


@dataclass(frozen=True, slots=True)
class SignalResult:
    """What ``ctx.wait_for_signal`` returns."""

    status: str
    """``received`` or ``timed_out``."""
    payload: JSON = None

    @property
    def received(self) -> bool:
        return self.status == "received"


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What ``ctx.wait_for_run`` returns: how the other run finished."""

    run_id: str
    status: RunStatus
    result: JSON = None
    failure: Failure | None = None

    @classmethod
    def of(cls, run: Run) -> RunOutcome:
        return cls(run.id, run.status, run.result, run.failure)

    def to_json(self) -> dict[str, JSON]:
        return {
            "run_id": self.run_id,
            "status": self.status.value,
            "result": self.result,
            "failure": self.failure.to_json() if self.failure else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, JSON]) -> RunOutcome:
        failure = data.get("failure")
        return cls(
            run_id=str(data["run_id"]),
            status=RunStatus(data["status"]),
            result=data.get("result"),
            failure=Failure.from_json(failure) if isinstance(failure, dict) else None,
        )


class AttemptServices(Protocol):
    """What the worker gives a context for steps and waits (storage access, the clock)."""

    values: Values
    """Seals step results and opens what the attempt reads back."""

    def now(self) -> datetime: ...

    def run(self) -> Run:
        """The latest stored state of the attempt's run."""
        ...

    def record_step(self, name: str, value: JSON) -> None:
        """Record step ``name``'s value (its result and call site, as kept)."""
        ...

    def get_token(self, token_id: str) -> Token | None: ...

    def report(self, report: AttemptReport) -> None:
        """Take in what the attempt reports about itself; written later, coalesced (no
        I/O here)."""
        ...

    def open_value(self, value: JSON, place: ValuePlace) -> JSON:
        """A value the run holds (a step's result, a wait's), opened: read from the payload
        bucket if it is kept there."""
        ...

    def get_run(self, run_id: str) -> Run | None:
        """Read another run (no write)."""
        ...

    def watch_run(self, run_id: str) -> Run | None:
        """Mark another run as awaited (so that its end resumes its waiters) and read it."""
        ...

    def open_group(
        self, wait_name: str, children: Iterable[Child], options: GroupOptions
    ) -> Group: ...

    def get_group(self, group_id: str) -> Group | None: ...

    def group_children(self, group_id: str, start: int, limit: int) -> list[Run | None]: ...

    def task_types(self, task: str) -> TaskTypes:
        """The payload and result types registered task ``task`` declares (raises
        :class:`~runlane_sqs.core.errors.UnknownTaskError`)."""
        ...


DEFAULT_MAX_IN_FLIGHT = 100
"""Children of one group running at once unless it says otherwise."""


class GroupOptions(TypedDict, total=False):
    """How a group runs its children (``ctx.map``, ``ctx.group``, ``app.group``); each
    option may be left out."""

    max_in_flight: int
    """Children running at once, at most (default :data:`DEFAULT_MAX_IN_FLIGHT`): a
    finishing child lets the next item start."""
    tolerate: int | float
    """Children that may fail or be cancelled before the group fails: a count, or a
    fraction of the items below 1 (default 0)."""
    tags: Mapping[str, str] | None
    """Tags every child (and the callback) is created with (docs/tags.md)."""
    inherit_tags: bool
    """Children take the parent run's tags too, ``tags`` added to them (a key in both
    takes its value from ``tags``); default False: a child carries only ``tags``. Only
    from a run (``ctx.map``, ``ctx.group``)."""


class NamedTask(Protocol[P_contra, R_co]):
    """A registered task (:class:`~runlane_sqs.Task`), as groups name their children's:
    generic, as the task is, in the payload it takes and the result it returns."""

    @property
    def name(self) -> str: ...

    def __call__(self, ctx: TaskContext, payload: P_contra, /) -> Any: ...

    def result_of(self, run: Run) -> R_co: ...


Child = tuple[NamedTask | str, JSON]
"""One child of a group: its task (or the task's name) and its payload."""
Converter = Callable[[JSON], Any] | None
"""Gives a child's stored result as its task's result type (``None``: kept as JSON)."""


@dataclass
class TaskContext:
    """Passed as the first argument to every handler.

    ``cancellation`` is set when the worker shuts down, when the lease is lost, when the
    run is cancelled or when the attempt passes its deadline: long handlers should check
    :attr:`cancelled` (or wait on the event; ``await ctx.until_cancelled()`` in async
    handlers) and return early. Setting it never stops a handler by force.
    """

    run_id: str
    task: str
    attempt: int
    environment: str
    worker_id: str
    log: RunLogger
    schedule_id: str | None = None
    """The schedule that made the run, if one did."""
    scheduled_for: datetime | None = None
    """The schedule occurrence the run is (``None``: not an occurrence), e.g. the hour an
    hourly report covers, whenever the run actually starts."""
    joined_group_id: str | None = None
    """The group whose join triggered this run (a group's callback): see
    :meth:`joined_group`."""
    cancellation: Cancellation = field(default_factory=Cancellation)
    services: AttemptServices | None = field(default=None, repr=False)
    _waits: dict[tuple[WaitKind, str | None], int] = field(default_factory=dict, repr=False)
    _steps: set[str] = field(default_factory=set, repr=False)
    _replay: Replay | None = field(default=None, repr=False)

    trace_id: str | None = None
    """The attempt's trace id (32 hex digits) when tracing is on; every line of
    :attr:`log` carries it as ``trace_id``."""

    @classmethod
    def for_attempt(cls, run: Run, worker_id: str, services: AttemptServices) -> TaskContext:
        """The context of ``run``'s current attempt, its lines on ``runlane_sqs.task``."""
        return cls(
            run_id=run.id,
            task=run.task,
            attempt=run.attempt,
            environment=run.environment,
            worker_id=worker_id,
            log=run_logger("runlane_sqs.task", run, worker_id),
            schedule_id=run.schedule_id,
            scheduled_for=run.scheduled_for,
            joined_group_id=run.joined_group,
            services=services,
        )

    @property
    def cancelled(self) -> bool:
        return self.cancellation.is_set()

    def trace(self, trace_id: str) -> None:
        """Name the attempt's trace in :attr:`trace_id` and on every line of :attr:`log`."""
        self.trace_id = trace_id
        self.log.extra = {**(self.log.extra or {}), "trace_id": trace_id}

    async def until_cancelled(self) -> None:
        """Return once the attempt is asked to stop; race it against your own work, e.g.
        ``asyncio.wait({work, asyncio.ensure_future(ctx.until_cancelled())}, ...)``."""
        await self.cancellation.wait_async()

    def _services(self) -> AttemptServices:
        if self.services is None:
            raise RunlaneError("steps and waits need a context created by a worker")
        return self.services

    def _replaying(self) -> Replay:
        """This attempt's durable calls against those earlier attempts recorded (read from
        the run as it was at this attempt's first durable call)."""
        if self._replay is None:
            self._replay = Replay(recorded_calls(self._services().run()))
        return self._replay

    def _replayed(self, call: str) -> None:
        """Check ``call`` against the calls earlier attempts recorded; raises
        :class:`HistoryDiverged` when the code no longer matches them
        (:mod:`runlane_sqs.core.replay`)."""
        self._replaying().call(call)

    def _release_to(self, wait: Wait) -> NoReturn:
        """End the attempt to wait for ``wait``: a new call, checked against the history
        first (a wait answered at once, its target already decided, records nothing)."""
        self._replayed(wait_call(wait.name))
        raise WaitRequested(wait)

    def _answered(self, answer: A | Wait) -> A:
        """``answer``, or the end of the attempt when it is the wait to release to."""
        if isinstance(answer, Wait):
            self._release_to(answer)
        return answer

    def _next_wait(self, kind: WaitKind, target: str | None) -> tuple[str, JSON]:
        """The name of this wait in the attempt, and its recorded result if any."""
        count = self._waits.get((kind, target), 0) + 1
        self._waits[(kind, target)] = count
        name = wait_name(kind, target, count)
        services = self._services()
        run = services.run()
        if name in run.wait_results:
            self._replayed(wait_call(name))
        place = ValuePlace(Holder.RUN, run.id, ValueField.WAIT, name)
        return name, services.open_value(run.wait_results.get(name), place)

    # progress and state ----------------------------------------------------------

    def progress(
        self, done: int | float, total: int | float | None = None, message: str | None = None
    ) -> None:
        """Say how far this attempt got: ``done`` of ``total`` (numbers, ``total`` if
        known), with an optional ``message``. Readable from any process
        (``app.runs.get(id).progress``, ``runlane-sqs runs watch``). Cheap to call often,
        from ``def`` and ``async def`` handlers alike: nothing is written here; at most
        one write per run per ``progress_interval`` carries the latest report, and the
        last one rides on the attempt's outcome (docs/progress.md). A report the store
        refuses (this attempt's lease is gone) is logged, never raised."""
        services = self._services()
        checked = checked_progress(done, total, message, attempt=self.attempt, now=services.now())
        services.report(AttemptReport(progress=checked))

    def set_state(self, value: JSON) -> None:
        """Keep a small JSON value (at most 8 KiB as JSON) on the run, readable from any
        process as ``run.state``; written like :meth:`progress` (coalesced, the last
        value wins). ``None`` clears it."""
        self._services().report(AttemptReport(state=checked_state(value)))

    # waits -----------------------------------------------------------------------

    def release(self, *, delay: Duration | None = None, until: datetime | None = None) -> NoReturn:
        """End this attempt without failure; the run is due again after ``delay`` or at
        ``until`` (any length: the due time lives in DynamoDB). Costs no retry.

        Write ``return ctx.release(...)``; it raises :class:`WaitRequested`.
        """
        if (delay is None) == (until is None):
            raise ConfigurationError("ctx.release takes exactly one of delay= or until=")
        now = self._services().now()
        if until is None:
            assert delay is not None
            until = now + to_timedelta(delay, "delay")
        elif until.tzinfo is None:
            raise ConfigurationError("ctx.release(until=...) needs a timezone-aware datetime")
        count = self._waits.get((WaitKind.TIME, None), 0) + 1
        self._waits[(WaitKind.TIME, None)] = count
        raise WaitRequested(Wait(WaitKind.TIME, wait_name(WaitKind.TIME, None, count), None, until))

    def wait_for_signal(self, key: str, timeout: Duration | None = None) -> SignalResult:
        """Wait until ``app.signals.send(key, ...)`` is sent after this wait began.

        Returns the signal's payload at this same wait in the next attempt, or a
        ``timed_out`` result once ``timeout`` passes first.
        """
        key = check_key("signal", key)
        name, result = self._next_wait(WaitKind.SIGNAL, key)
        if isinstance(result, dict):
            return SignalResult(str(result.get("status")), result.get("payload"))
        until = None
        if timeout is not None:
            until = self._services().now() + to_timedelta(timeout, "timeout")
        self._release_to(Wait(WaitKind.SIGNAL, name, key, until))

    def wait_for_token(self, token_id: str) -> TokenResult:
        """The token's decision; waits (releasing the lease) while it is pending."""
        name, recorded = self._begin_token_wait(token_id)
        if recorded is not None:
            return recorded
        return self._answered(_token_decision(name, token_id, self._services().get_token(token_id)))

    async def wait_for_token_async(self, token_id: str) -> TokenResult:
        """:meth:`wait_for_token` for ``async def`` handlers: the read runs on a thread,
        so the event loop (other attempts, heartbeats) keeps going."""
        name, recorded = self._begin_token_wait(token_id)
        if recorded is not None:
            return recorded
        token = await _on_thread(self._services().get_token, token_id)
        return self._answered(_token_decision(name, token_id, token))

    def _begin_token_wait(self, token_id: str) -> tuple[str, TokenResult | None]:
        name, result = self._next_wait(WaitKind.TOKEN, token_id)
        if isinstance(result, dict):
            return name, TokenResult(TokenStatus(result["status"]), result.get("value"))
        return name, None

    def wait_for_run(self, run_id: str) -> RunOutcome:
        """How run ``run_id`` finished; waits (releasing the lease) until it has."""
        name, recorded = self._begin_run_wait(run_id)
        if recorded is not None:
            return recorded
        services = self._services()
        if self._replaying().unreached():
            finished = self._finished_before(name, run_id, services.get_run(run_id))
            if finished is not None:
                return finished
        return self._answered(_run_outcome(name, run_id, services.watch_run(run_id)))

    async def wait_for_run_async(self, run_id: str) -> RunOutcome:
        """:meth:`wait_for_run` for ``async def`` handlers (its read and write run on a
        thread)."""
        name, recorded = self._begin_run_wait(run_id)
        if recorded is not None:
            return recorded
        services = self._services()
        if self._replaying().unreached():
            other = await _on_thread(services.get_run, run_id)
            finished = self._finished_before(name, run_id, other)
            if finished is not None:
                return finished
        watched = await _on_thread(services.watch_run, run_id)
        return self._answered(_run_outcome(name, run_id, watched))

    def _begin_run_wait(self, run_id: str) -> tuple[str, RunOutcome | None]:
        if run_id == self.run_id:
            raise ConfigurationError("a run cannot wait for itself")
        name, result = self._next_wait(WaitKind.RUN, run_id)
        return name, RunOutcome.from_json(result) if isinstance(result, dict) else None

    def _finished_before(self, name: str, run_id: str, other: Run | None) -> RunOutcome | None:
        """A new run wait while calls the history recorded are still ahead, checked before
        the watch writes anything: how ``other`` (read, not watched) finished if it had (a
        wait answered at once is no call); otherwise this wait is a new call, and the
        history refuses it (:class:`HistoryDiverged`) before the run is marked watched."""
        answer = _run_outcome(name, run_id, other)
        if isinstance(answer, Wait):
            self._replayed(wait_call(name))
            return None
        return answer

    # groups ----------------------------------------------------------------------

    @overload
    def map(
        self, task: NamedTask[P, R], items: Iterable[P], **options: Unpack[GroupOptions]
    ) -> GroupResults[R]: ...

    @overload
    def map(
        self, task: str, items: Iterable[JSON], **options: Unpack[GroupOptions]
    ) -> GroupResults[Any]: ...

    def map(
        self, task: NamedTask | str, items: Iterable[JSON], **options: Unpack[GroupOptions]
    ) -> GroupResults[Any]:
        """Run ``task`` once per item as child runs, at most ``max_in_flight`` at once, and
        wait (releasing the lease) until they have all finished: the next attempt gets
        the group's results here. Raises :class:`GroupFailed` when more than ``tolerate``
        children (a count, or a fraction below 1) failed or were cancelled.

        Each item is validated against the task's payload type before anything is
        written, and a task that declares a result type gives its children's results as
        that type (docs/typed-tasks.md).

        ``items`` may be a generator that pages through a source: it is read once, when
        the group is first opened, and its items are kept with the group, never in this
        run's item; a later attempt finds the group and does not read it again."""
        children = ((task, item) for item in items)
        return self._open_group(children, self._result_type(task), options)

    @overload
    async def map_async(
        self, task: NamedTask[P, R], items: Iterable[P], **options: Unpack[GroupOptions]
    ) -> GroupResults[R]: ...

    @overload
    async def map_async(
        self, task: str, items: Iterable[JSON], **options: Unpack[GroupOptions]
    ) -> GroupResults[Any]: ...

    async def map_async(
        self, task: NamedTask | str, items: Iterable[JSON], **options: Unpack[GroupOptions]
    ) -> GroupResults[Any]:
        """:meth:`map` for ``async def`` handlers (its writes run on a thread)."""
        children = ((task, item) for item in items)
        return await self._open_group_async(children, self._result_type(task), options)

    def group(
        self, children: Iterable[Child], **options: Unpack[GroupOptions]
    ) -> GroupResults[Any]:
        """:meth:`map` over ``(task, payload)`` pairs, each child its own task (their
        results are the stored JSON)."""
        return self._open_group(children, None, options)

    async def group_async(
        self, children: Iterable[Child], **options: Unpack[GroupOptions]
    ) -> GroupResults[Any]:
        """:meth:`group` for ``async def`` handlers (its writes run on a thread)."""
        return await self._open_group_async(children, None, options)

    def _open_group(
        self, children: Iterable[Child], convert: Converter, options: GroupOptions
    ) -> GroupResults[Any]:
        name, joined = self._begin_group(convert)
        if joined is not None:
            return joined
        self._replayed(wait_call(name))  # opening a group starts its children
        group = self._services().open_group(name, children, options)
        return self._group_outcome(name, group, convert)

    async def _open_group_async(
        self, children: Iterable[Child], convert: Converter, options: GroupOptions
    ) -> GroupResults[Any]:
        name, joined = self._begin_group(convert)
        if joined is not None:
            return joined
        self._replayed(wait_call(name))  # opening a group starts its children
        group = await _on_thread(self._services().open_group, name, children, options)
        return self._group_outcome(name, group, convert)

    def _result_type(self, task: NamedTask | str) -> Converter:
        """What gives a mapped task's stored result as its result type (``None``: the
        task declares none, its results stay JSON)."""
        types = self._services().task_types(task if isinstance(task, str) else task.name)
        return types.result_value if types.result is not None else None

    def joined_group(self) -> GroupResults[Any] | None:
        """In a group's callback: the group whose join triggered this run (``None`` in
        any other run). Its children's results are read from storage when iterated."""
        if self.joined_group_id is None:
            return None
        group = self._services().get_group(self.joined_group_id)
        if group is None:
            return None
        return GroupResults.of(group.summary(), self._reader(group.id))

    def _begin_group(self, convert: Converter) -> tuple[str, GroupResults[Any] | None]:
        """The name of this group wait, and its results if an earlier attempt joined it."""
        name, recorded = self._next_wait(WaitKind.GROUP, None)
        return name, self._joined(recorded, convert) if isinstance(recorded, dict) else None

    def _group_outcome(self, name: str, group: Group, convert: Converter) -> GroupResults[Any]:
        if group.closed:  # no children, or all counted before the release was asked
            return self._joined(group.summary(), convert)
        self._release_to(Wait(WaitKind.GROUP, name, group.id))

    def _joined(self, summary: dict[str, JSON], convert: Converter) -> GroupResults[Any]:
        results = GroupResults.of(summary, self._reader(str(summary["group"])), convert)
        if not results.ok:
            raise GroupFailed(results)
        return results

    def _reader(self, group_id: str) -> Callable[[int, int], list[Run | None]]:
        services = self._services()
        return lambda start, limit: services.group_children(group_id, start, limit)

    # patches ---------------------------------------------------------------------

    def patched(self, patch_id: str) -> bool:
        """Whether this run takes the new branch of a change made under running runs:
        ``True`` for a run that reaches this point first under code that has it, ``False``
        for one whose history was already past it (its old code went on to calls it
        recorded). A ``True`` is recorded in the run (one write, the first time), so the
        answer never changes for a run (docs/versions.md, "Patches")."""
        name, recorded = self._begin_patch(patch_id)
        if recorded is not None:
            return recorded
        prepared_step, _ = self._storable(name, True, PATCH_SITE)
        services = self._services()
        services.record_step(name, services.values.keep(prepared_step).value)
        return True

    async def patched_async(self, patch_id: str) -> bool:
        """:meth:`patched` for ``async def`` handlers (its write runs on a thread)."""
        name, recorded = self._begin_patch(patch_id)
        if recorded is not None:
            return recorded
        prepared_step, _ = self._storable(name, True, PATCH_SITE)
        services = self._services()
        await _on_thread(services.record_step, name, services.values.keep(prepared_step).value)
        return True

    def deprecate_patch(self, patch_id: str) -> None:
        """Mark where ``patched(patch_id)`` was, once its old branch is deleted and only
        the new code is left: runs that recorded the patch replay past it as before (no
        write). Remove the call once ``runs versions`` shows no run that started before
        the patch still unfinished."""
        name = patch_name(patch_id)
        self._use_once(name, "patch")
        call = step_call(name)
        if call in self._replaying().recorded:
            self._replayed(call)

    def _begin_patch(self, patch_id: str) -> tuple[str, bool | None]:
        """The patch's step name, and the answer when it needs no write: ``True`` when
        recorded, ``False`` when recorded calls are still unreached."""
        name = patch_name(patch_id)
        self._use_once(name, "patch")
        replay, call = self._replaying(), step_call(name)
        if call in replay.recorded:
            replay.call(call)
            return name, True
        if replay.unreached():
            return name, False  # the history went on past this point without the patch
        replay.call(call)
        return name, None

    def _use_once(self, name: str, what: str) -> None:
        if name in self._steps:
            raise StepError(f"{what} {name!r} is used twice in one attempt; names must be unique")
        self._steps.add(name)

    # durable steps ---------------------------------------------------------------

    def step(self, name: str, fn: Callable[[], T]) -> T:
        """Call ``fn`` once per run: its JSON result is recorded under this attempt's lease,
        and later attempts get the recorded result without calling ``fn`` again."""
        site = _call_site()
        found, value = self._begin_step(name, site)
        if not found:
            prepared_step, value = self._storable(name, fn(), site)
            services = self._services()
            services.record_step(name, services.values.keep(prepared_step).value)
        return cast(T, value)

    async def step_async(self, name: str, fn: Callable[[], Awaitable[T] | T]) -> T:
        """:meth:`step` for ``async def`` handlers: ``fn`` may be a coroutine function,
        and the write runs on a thread, so the event loop keeps going."""
        site = _call_site()
        found, value = self._begin_step(name, site)
        if not found:
            produced = fn()
            if inspect.isawaitable(produced):
                produced = await produced
            services = self._services()
            if services.values.codecs:  # a codec may call KMS: not on the event loop
                prepared_step, value = await _on_thread(self._storable, name, produced, site)
            else:
                prepared_step, value = self._storable(name, produced, site)
            kept = services.values.keep  # a large step's object is written on a thread
            stored = (
                (await _on_thread(kept, prepared_step))
                if prepared_step.offloaded
                else kept(prepared_step)
            )
            await _on_thread(services.record_step, name, stored.value)
        return cast(T, value)

    def _begin_step(self, name: str, site: str) -> tuple[bool, JSON]:
        """Check the name; the recorded value, if this step ran in an earlier attempt."""
        if not isinstance(name, str) or not 0 < len(name) <= MAX_STEP_NAME_CHARS:
            raise StepError(f"step name must be 1 to {MAX_STEP_NAME_CHARS} characters")
        if name.startswith(PATCH_PREFIX):
            raise StepError(f"step name {name!r}: {PATCH_PREFIX!r} starts ctx.patched's names")
        self._use_once(name, "step")
        self._replayed(step_call(name))
        services = self._services()
        run = services.run()
        place = ValuePlace(Holder.RUN, run.id, ValueField.STEP, name)
        recorded = services.open_value(run.steps.get(name), place)
        if not isinstance(recorded, dict):
            return False, None
        if recorded.get("site") != site:
            raise StepError(
                f"step {name!r} was recorded from {recorded.get('site')}, not {site}; "
                "give each step its own name"
            )
        return True, recorded.get("value")

    def _storable(self, name: str, produced: object, site: str) -> tuple[Prepared, JSON]:
        """The step's value (its result and call site) checked and encoded, not yet kept,
        and ``produced`` as later attempts will get it back from storage (checked JSON)."""
        services = self._services()
        values, what = services.values, f"result of step {name!r}"
        text = values.check(produced, what=what)
        value: JSON = json.loads(text)
        step_text = f'{{"value":{text},"site":{json.dumps(site)}}}'
        place = ValuePlace(Holder.RUN, services.run().id, ValueField.STEP, name)
        prepared_step = values.prepare_text(
            {"value": value, "site": site}, step_text, what=what, place=place
        )
        stored_bytes = REFERENCE_BYTES if prepared_step.offloaded else len(prepared_step.data)
        check_item_budget(self._services().run(), stored_bytes, f"step {name!r}")
        return prepared_step, value


MAX_STEP_NAME_CHARS = 128
RUN_DATA_BUDGET_BYTES = 256 * 1024
"""Payload, result, step results and wait results of one run together stay under this,
leaving the rest of DynamoDB's 400 KB item for history and state."""
REFERENCE_BYTES = 512
"""At least what the item keeps of a value kept in the payload bucket (its reference)."""


def run_data_bytes(run: Run) -> int:
    """Roughly what a run's data occupies in its item: the stored text of its payload,
    result, step and wait results (a large value's reference, not the value)."""
    texts = [stored_text(run.payload), stored_text(run.result)]
    for entries in (run.steps, run.wait_results):
        texts += [name + stored_text(entry) for name, entry in entries.items()]
    return sum(len(text.encode()) for text in texts)


def check_item_budget(run: Run, adding: int, what: str) -> None:
    """Refuse data that would overfill the run's item (the attempt then fails for good,
    while there is still room to record why)."""
    total = run_data_bytes(run) + adding
    if total > RUN_DATA_BUDGET_BYTES:
        raise PayloadTooLarge(f"{what} with this run's other data", total, RUN_DATA_BUDGET_BYTES)


def _token_decision(name: str, token_id: str, token: Token | None) -> TokenResult | Wait:
    """The token's decision, or the wait for it while it is pending."""
    if token is None:
        raise TokenNotFound(token_id)
    if token.is_decided:
        return token.result
    return Wait(WaitKind.TOKEN, name, token_id)


def _run_outcome(name: str, run_id: str, other: Run | None) -> RunOutcome | Wait:
    """How the other run finished, or the wait for it while it runs."""
    if other is None:
        raise RunNotFound(run_id)
    if other.is_terminal:
        return RunOutcome.of(other)
    return Wait(WaitKind.RUN, name, run_id)


async def _on_thread(fn: Callable[..., T], *args: object) -> T:
    """``asyncio.to_thread``: asyncio is imported here, on the event loop running this,
    so a sync worker or Lambda function never loads it."""
    import asyncio  # noqa: PLC0415 (loaded already: this runs on an event loop)

    return await asyncio.to_thread(fn, *args)


def _call_site() -> str:
    """``module.function`` that called ``ctx.step`` or ``ctx.step_async`` (stable across
    line edits; an awaiting coroutine's frame is the caller of the coroutine it awaits)."""
    frame = sys._getframe(2)
    return f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_name}"
