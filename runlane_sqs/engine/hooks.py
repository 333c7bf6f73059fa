"""Worker hooks: the app's own code around each attempt (docs/hooks.md).

``app.hooks.before_attempt``, ``app.hooks.after_attempt`` and ``app.hooks.on_failure``
register plain functions that every worker of the app (sync, async, the Lambda consumer)
calls around each attempt's handler, in the thread that runs it (for an ``async def``
handler on the async worker, on its event loop): what Celery's ``task_prerun``,
``task_postrun`` and ``task_failure`` signals are for (closing database connections,
reporting errors). A hook that raises is logged with the run's id and never changes
the attempt. An app with no hooks pays nothing per run: the drivers read one flag.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.engine.context import TaskContext, WaitRequested

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    """How an attempt's handler ended, as ``after_attempt`` hooks see it: what it
    returned, or what it raised (a wait it asked for included)."""

    result: object = None
    """What the handler returned, as stored (a declared result type's JSON; ``None``
    when it raised)."""
    error: BaseException | None = None
    """What the handler raised, if it did, or the conversion of its payload or result
    (:class:`~runlane_sqs.core.errors.PayloadMismatch`,
    :class:`~runlane_sqs.core.errors.InvalidResult`)."""

    @property
    def released(self) -> bool:
        """The handler asked to wait (``ctx.release``, ``ctx.wait_for_signal``, ...):
        the attempt ends without failure."""
        return self.error is not None and is_wait(self.error)

    @property
    def failed(self) -> bool:
        """The handler raised an exception other than a wait (``on_failure`` hooks got
        it): the retry policy decides what follows."""
        return self.error is not None and not is_wait(self.error)


def is_wait(exc: BaseException) -> bool:
    """Whether ``exc`` is a wait the handler asked for (alone, or only waits in an
    exception group, as an ``asyncio.TaskGroup`` raises them)."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(WaitRequested)[1] is None
    return isinstance(exc, WaitRequested)


BeforeAttempt = Callable[[TaskContext], object]
"""``before_attempt(ctx)``: called before the handler."""
AfterAttempt = Callable[[TaskContext, AttemptOutcome], object]
"""``after_attempt(ctx, outcome)``: called after the handler, however it ended."""
OnFailure = Callable[[TaskContext, BaseException], object]
"""``on_failure(ctx, exc)``: called when the handler raised (not a wait), before the
``after_attempt`` hooks."""
H = TypeVar("H", BeforeAttempt, AfterAttempt, OnFailure)


class AttemptHooks:
    """The hooks of one app (``app.hooks``), called in the order they were registered.

    Each hook reads the attempt from its context: ``ctx.run_id``, ``ctx.task``,
    ``ctx.attempt``, ``ctx.log``. Hooks are plain functions (an ``async def`` one is
    refused): keep them short on the async worker's event loop."""

    def __init__(self) -> None:
        self.before: list[BeforeAttempt] = []
        self.after: list[AfterAttempt] = []
        self.failure: list[OnFailure] = []
        self.active = False
        """Whether any hook is registered (what the drivers read on every attempt)."""

    def before_attempt(self, hook: BeforeAttempt) -> BeforeAttempt:
        """Register ``hook(ctx)``, called before each attempt's handler; usable as a
        decorator."""
        self.before.append(_checked(hook, "before_attempt"))
        self.active = True
        return hook

    def after_attempt(self, hook: AfterAttempt) -> AfterAttempt:
        """Register ``hook(ctx, outcome)``, called after each attempt's handler however
        it ended (:class:`AttemptOutcome`); usable as a decorator."""
        self.after.append(_checked(hook, "after_attempt"))
        self.active = True
        return hook

    def on_failure(self, hook: OnFailure) -> OnFailure:
        """Register ``hook(ctx, exc)``, called when an attempt's handler raised an
        exception (not a wait), before the ``after_attempt`` hooks; usable as a
        decorator."""
        self.failure.append(_checked(hook, "on_failure"))
        self.active = True
        return hook

    def call(self, ctx: TaskContext, handler: Callable[[], T]) -> T:
        """``handler()`` with this app's hooks around it; returns what it returned and
        raises what it raised."""
        self._before(ctx)
        try:
            result = handler()
        except BaseException as exc:
            self._after(ctx, AttemptOutcome(error=exc))
            raise
        self._after(ctx, AttemptOutcome(result=result))
        return result

    async def call_async(self, ctx: TaskContext, handler: Callable[[], Awaitable[T]]) -> T:
        """:meth:`call` for an ``async def`` handler: the hooks run on the event loop."""
        self._before(ctx)
        try:
            result = await handler()
        except BaseException as exc:
            self._after(ctx, AttemptOutcome(error=exc))
            raise
        self._after(ctx, AttemptOutcome(result=result))
        return result

    def _before(self, ctx: TaskContext) -> None:
        for hook in self.before:
            try:
                hook(ctx)
            except Exception:
                _log_failed(ctx, "before_attempt", hook)

    def _after(self, ctx: TaskContext, outcome: AttemptOutcome) -> None:
        if outcome.error is not None and outcome.failed:
            for failed in self.failure:
                try:
                    failed(ctx, outcome.error)
                except Exception:
                    _log_failed(ctx, "on_failure", failed)
        for hook in self.after:
            try:
                hook(ctx, outcome)
            except Exception:
                _log_failed(ctx, "after_attempt", hook)


def _checked(hook: H, kind: str) -> H:
    if not callable(hook):
        raise ConfigurationError(f"{kind} hook must be a function, not {hook!r}")
    if inspect.iscoroutinefunction(hook):
        raise ConfigurationError(
            f"{kind} hook {_name(hook)} is async def: hooks are plain functions, called in "
            "the thread that runs the handler (on the async worker's event loop for an async "
            "handler)"
        )
    return hook


def _name(hook: Callable[..., object]) -> str:
    return getattr(hook, "__qualname__", None) or repr(hook)


def _log_failed(ctx: TaskContext, kind: str, hook: Callable[..., object]) -> None:
    """A hook raised: log it with the run's fields (``ctx.log``); the attempt goes on."""
    ctx.log.exception(
        "%s hook %s failed on run %s (attempt %d); the attempt goes on",
        kind,
        _name(hook),
        ctx.run_id,
        ctx.attempt,
        extra={"hook": _name(hook)},
    )
