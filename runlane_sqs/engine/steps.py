"""What the per-message path (:mod:`runlane_sqs.engine.message`) asks its driver to do:
one class per request, and the driving loop a sync driver runs.

A driver performs each request with its own I/O and sends the result back (or throws
the error in): :func:`drive` for the sync worker and the Lambda consumer,
:func:`runlane_sqs.runtime.aio.executor.drive_async` for the async worker.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from runlane_sqs.core.claims import HintedClaim
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import JSON, Run, Slot
from runlane_sqs.engine.context import TaskContext
from runlane_sqs.engine.finishing import finishing_needs_storage
from runlane_sqs.engine.observing import NO_SPAN
from runlane_sqs.engine.outcomes import Disposition, FollowUp, follow_up
from runlane_sqs.engine.tasks import Task
from runlane_sqs.ports.telemetry import Span


@dataclass(frozen=True, slots=True)
class ReadRun:
    """Read the run a wakeup names. Result: the run, or ``None`` if it is unknown."""

    run_id: str


@dataclass(frozen=True, slots=True)
class Write:
    """Apply a conditional transition. Result: the stored run; raises
    :class:`~runlane_sqs.errors.ConflictError` (with the stored run) if it changed."""

    transition: Transition


@dataclass(frozen=True, slots=True)
class ClaimHinted:
    """Claim the run with one write conditioned on the wakeup's hint. Result: the
    claimed run; raises :class:`~runlane_sqs.errors.ConflictError` carrying the stored
    run (``None`` if there is none) when the hint no longer holds."""

    claim: HintedClaim


@dataclass(frozen=True, slots=True)
class Begin:
    """Start an attempt of a claimed run: build its context and keep its lease alive.
    Result: the :class:`~runlane_sqs.engine.context.TaskContext`."""

    run: Run
    token: str


@dataclass(frozen=True, slots=True)
class CallHandler:
    """Call the task's handler. Result: what it returned; raises what it raised."""

    task: Task
    ctx: TaskContext
    payload: JSON
    span: Span = NO_SPAN
    """The attempt's span: the driver makes it current around the call."""


@dataclass(frozen=True, slots=True)
class End:
    """Stop renewing the attempt's lease. Result: ``(latest run, lease lost)``, or
    ``None`` if the attempt was not tracked."""

    run_id: str


@dataclass(frozen=True, slots=True)
class Publish:
    """Publish the run's next wakeup after ``delay`` (repairing a refused send). Result:
    ``None``."""

    run: Run
    delay: timedelta


@dataclass(frozen=True, slots=True)
class Finish:
    """Free a finished run's keys and resume its first waiters. Result: ``None``."""

    run: Run


@dataclass(frozen=True, slots=True)
class Recheck:
    """Resume a run released to wait if its target decided meanwhile. Result: ``None``."""

    run: Run


@dataclass(frozen=True, slots=True)
class WakeWaiters:
    """Slots of these scopes were just freed: wake the oldest run waiting for each.
    Result: ``None``."""

    scopes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RecheckSlot:
    """``run`` just began waiting for ``slot``: wake it if a slot is free by now.
    Result: ``None``."""

    run: Run
    slot: Slot


Request = (
    ReadRun
    | ClaimHinted
    | Write
    | Begin
    | CallHandler
    | End
    | Publish
    | Finish
    | Recheck
    | WakeWaiters
    | RecheckSlot
)
Steps = Generator[Request, Any, Disposition]
"""One message's path: yields requests, returns what became of the message."""
Perform = Callable[[Request], Any]


class Performer(Protocol):
    """What a driver implements: one method per request (sync or ``async def``)."""

    def read(self, request: ReadRun) -> Any: ...
    def claim_hinted(self, request: ClaimHinted) -> Any: ...
    def write(self, request: Write) -> Any: ...
    def begin(self, request: Begin) -> Any: ...
    def call(self, request: CallHandler) -> Any: ...
    def end(self, request: End) -> Any: ...
    def publish(self, request: Publish) -> Any: ...
    def finish(self, request: Finish) -> Any: ...
    def recheck(self, request: Recheck) -> Any: ...
    def wake_waiters(self, request: WakeWaiters) -> Any: ...
    def recheck_slot(self, request: RecheckSlot) -> Any: ...


def performer_table(driver: Performer) -> dict[type, Callable[[Any], Any]]:
    """The driver's method for each request type."""
    return {
        ReadRun: driver.read,
        ClaimHinted: driver.claim_hinted,
        Write: driver.write,
        Begin: driver.begin,
        CallHandler: driver.call,
        End: driver.end,
        Publish: driver.publish,
        Finish: driver.finish,
        Recheck: driver.recheck,
        WakeWaiters: driver.wake_waiters,
        RecheckSlot: driver.recheck_slot,
    }


def advance(steps: Steps, reply: Any, error: BaseException | None) -> Request | Disposition:
    """Hand the path the last request's result (or error); returns its next request, or
    what became of the message once the path is done."""
    try:
        return steps.send(reply) if error is None else steps.throw(error)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def drive(steps: Steps, perform: Perform) -> Disposition:
    """Run ``steps`` to the end, performing each request with ``perform`` (sync I/O)."""
    request = advance(steps, None, None)
    while not isinstance(request, Disposition):
        try:
            reply = perform(request)
        except BaseException as exc:  # the path decides what a failed request means
            request = advance(steps, None, exc)
        else:
            request = advance(steps, reply, None)
    return request


def follow_up_request(run: Run, now: datetime) -> Request | None:
    """What an attempt's recorded outcome calls for next, if anything: the finished run's
    bookkeeping, the next wakeup, or a recheck of the wait it released to."""
    step = follow_up(run)
    if step is FollowUp.FINISHED and finishing_needs_storage(run):
        return Finish(run)
    if step is FollowUp.PUBLISH:
        assert run.due_at is not None
        return Publish(run, run.due_at - now)
    if step is FollowUp.RECHECK:
        return Recheck(run)
    return None
