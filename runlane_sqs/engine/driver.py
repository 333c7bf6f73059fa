"""The driver contract of the per-message path: the calls the path yields, what a
driver implements to perform them, and :func:`drive`, which runs a path to its end.

The path (:mod:`runlane_sqs.engine.message`) performs no I/O itself: it yields the
calls below and is sent each one's result, or thrown its error. A driver performs
them with its own I/O: :class:`runlane_sqs.runtime.executor.Executor` for the sync worker
and the Lambda consumer, :class:`runlane_sqs.runtime.aio.executor.AsyncExecutor` for the
async worker. Tests drive a path by hand to put a race at an exact point
(tests/engine/test_message_path.py).

A driver performs each :data:`DriverCall` by one method of :class:`Performer`. The
calls to one of the engine's sync services (a finished run's bookkeeping, a recheck, a
slot's waiters, a rate limit's reservation) are each an :class:`EngineCall` that the
engine itself serves (:meth:`runlane_sqs.engine.engine.Engine.serve`): a driver has one
method for all of them, and adding one is a class in the module of its concept and one
line of the engine's table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from runlane_sqs.core.clock import Clock
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.machine import HintedClaim, SkipReason, Transition
from runlane_sqs.core.model import JSON, Run
from runlane_sqs.core.rates import ClaimLead
from runlane_sqs.engine.context import TaskContext
from runlane_sqs.engine.observing import NO_SPAN, Observer
from runlane_sqs.engine.tasks import Task, TaskRegistry
from runlane_sqs.ports.telemetry import Span
from runlane_sqs.ports.transport import ReceivedWakeup

log = logging.getLogger("runlane_sqs.worker")
MAX_HOLD = timedelta(seconds=20)
"""The longest a worker keeps a message whose run is due a moment later (its reserved
start under its rate limits, the end of its debounce) rather than publish a wakeup (which
would come after every message queued before it): well inside the queue's visibility
timeout (60 s by default; docs/rate-limits.md)."""


class Disposition(StrEnum):
    """What became of one message."""

    EXECUTED = "executed"
    """An attempt ran; delete the message."""
    SKIPPED = "skipped"
    """A stale, unknown or malformed hint; delete the message."""
    DEFERRED = "deferred"
    """Could not be handled now (unknown task, storage down); leave it for redelivery."""
    RETURNED = "returned"
    """A wakeup of another environment on a queue they share: never deleted, made
    visible again for that environment's workers."""
    HELD = "held"
    """The run sleeps until its reserved start under its rate limits, a moment ahead: the
    worker keeps the message and handles it again then (:class:`Hold`)."""


def log_skip(
    run_id: str, reason: SkipReason, worker_id: str, run: Run | None = None
) -> Disposition:
    """A message acknowledged and ignored (:attr:`Disposition.SKIPPED`), logged with why."""
    extra: dict[str, object] = {"run_id": run_id, "reason": reason.value, "worker_id": worker_id}
    if run is not None:
        extra.update(task=run.task, attempt=run.attempt)
    log.info("ignoring wakeup for run %s: %s", run_id, reason.value, extra=extra)
    return Disposition.SKIPPED


@dataclass(frozen=True, slots=True)
class ReadRun:
    """Read the run a wakeup names. Result: the run, or ``None`` if it is unknown."""

    run_id: str


@dataclass(frozen=True, slots=True)
class ClaimHinted:
    """Claim the run with one write conditioned on the wakeup's hint. Result: the
    claimed run; raises :class:`~runlane_sqs.errors.ConflictError` carrying the stored
    run (``None`` if there is none) when the hint no longer holds."""

    claim: HintedClaim


@dataclass(frozen=True, slots=True)
class Write:
    """Apply a conditional transition. Result: the stored run; raises
    :class:`~runlane_sqs.errors.ConflictError` (with the stored run) if it changed."""

    transition: Transition


@dataclass(frozen=True, slots=True)
class Begin:
    """Start an attempt of a claimed run: build its context and keep its lease alive.
    Result: the :class:`~runlane_sqs.engine.context.TaskContext`."""

    run: Run
    token: str


@dataclass(frozen=True, slots=True)
class CallHandler:
    """Call the task's handler with the payload opened. Result: what it returned, sealed
    (:meth:`runlane_sqs.engine.values.Values.seal`); raises what it raised, or why the
    payload could not be opened or the result kept."""

    task: Task
    ctx: TaskContext
    payload: JSON
    """The payload as stored (a large one still sealed)."""
    span: Span = NO_SPAN
    """The attempt's span: the driver makes it current around the call."""


@dataclass(frozen=True, slots=True)
class End:
    """Stop renewing the attempt's lease. Result: ``(latest run, lease lost, last
    report)`` (the report the outcome's write carries, ``None`` if there is none to
    carry), or ``None`` if the attempt was not tracked."""

    run_id: str
    token: str | None = None
    """The attempt's lease token: a newer attempt of the same run may be in flight on the
    same worker (this one's lease expired and the run was claimed again)."""


@dataclass(frozen=True, slots=True)
class Publish:
    """Publish the run's next wakeup after ``delay`` (repairing a refused send). Result:
    ``None``."""

    run: Run
    delay: timedelta


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait ``delay``, a moment (a run woken just before it is due, SQS's delays being
    whole seconds; a claimed run before its reserved start under its rate limits, when
    its handler is entered). Result: ``None``."""

    delay: timedelta


@dataclass(frozen=True, slots=True)
class Hold:
    """Keep ``message`` and handle it again at ``until`` (at most :data:`MAX_HOLD`
    ahead), instead of publishing a wakeup that would wait in the queue behind every
    other message. Result: whether the driver can (a worker can; the Lambda consumer
    cannot)."""

    message: ReceivedWakeup
    until: datetime


class EngineCall:
    """A call to one of the engine's sync services, served by the engine
    (:meth:`runlane_sqs.engine.engine.Engine.serve`): the sync driver on its own thread,
    the async one on a thread off its loop. Result: what the service returns."""

    __slots__ = ()


DriverCall = ReadRun | ClaimHinted | Write | Begin | CallHandler | End | Publish | Pause | Hold
"""What the path yields besides an :class:`EngineCall`."""
Handling = Generator[DriverCall | EngineCall, Any, Disposition]
"""One message's handling: yields calls, returns what became of the message."""
Perform = Callable[[DriverCall | EngineCall], Any]


class Performer(Protocol):
    """What a driver implements: one method per call (sync or ``async def``)."""

    def read(self, call: ReadRun) -> Any: ...
    def claim_hinted(self, call: ClaimHinted) -> Any: ...
    def write(self, call: Write) -> Any: ...
    def begin(self, call: Begin) -> Any: ...
    def call_handler(self, call: CallHandler) -> Any: ...
    def end(self, call: End) -> Any: ...
    def publish(self, call: Publish) -> Any: ...
    def pause(self, call: Pause) -> Any: ...
    def hold(self, call: Hold) -> Any: ...
    def serve(self, call: EngineCall) -> Any: ...


def performer_table(driver: Performer) -> dict[type, Callable[[Any], Any]]:
    """The driver's method for each call type but :class:`EngineCall`, which its
    ``serve`` performs."""
    return {
        ReadRun: driver.read,
        ClaimHinted: driver.claim_hinted,
        Write: driver.write,
        Begin: driver.begin,
        CallHandler: driver.call_handler,
        End: driver.end,
        Publish: driver.publish,
        Pause: driver.pause,
        Hold: driver.hold,
    }


class WorkerIdentity(Protocol):
    """What the path's special cases (:mod:`.rates`, :mod:`.slots`, :mod:`.debouncing`,
    :mod:`.pinning`, :mod:`.withdrawal`) read of the path that handles the message."""

    tasks: TaskRegistry
    clock: Clock
    config: RunlaneConfig
    worker_id: str
    observer: Observer
    app_version: str | None
    claim_lead: ClaimLead


def next_call(
    handling: Handling, reply: Any, error: BaseException | None
) -> DriverCall | EngineCall | Disposition:
    """Hand the path the last call's result (or error); returns its next call, or
    what became of the message once the path is done."""
    try:
        return handling.send(reply) if error is None else handling.throw(error)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def drive(handling: Handling, perform: Perform) -> Disposition:
    """Run ``handling`` to the end, performing each call with ``perform`` (sync I/O):
    the path gets each call's result, or its error, and yields its next call."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            call = handling.send(reply) if error is None else handling.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            reply, error = perform(call), None
        except BaseException as exc:  # the path decides what a failed call means
            reply, error = None, exc
