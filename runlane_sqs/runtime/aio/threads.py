"""A bounded pool of daemon threads for sync handlers under the async worker.

Daemon threads, as in the sync worker: a handler that ignores cancellation cannot keep
the process alive after shutdown (``concurrent.futures`` threads would be joined).
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
_Job = tuple[Callable[[], object], asyncio.Future[object], asyncio.AbstractEventLoop]


class DaemonThreads:
    """``size`` threads started on first use; :meth:`run` awaits a call on one of them.

    One pool per worker session: after :meth:`close`, a thread still in an abandoned
    handler takes no further job."""

    def __init__(self, size: int, name: str = "runlane-handler") -> None:
        self._size = size
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    async def run(self, fn: Callable[[], T]) -> T:
        if not self._threads:
            self._start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[object] = loop.create_future()
        context = contextvars.copy_context()
        self._jobs.put((lambda: context.run(fn), future, loop))
        return await future  # type: ignore[return-value]

    def _start(self) -> None:
        for i in range(self._size):
            thread = threading.Thread(
                target=_work, args=(self._jobs,), name=f"{self._name}-{i}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        """Let idle threads exit; a thread still in a handler exits when it returns."""
        for _ in self._threads:
            self._jobs.put(None)
        self._threads = []
        self._jobs = queue.SimpleQueue()


def _work(jobs: queue.SimpleQueue[_Job | None]) -> None:
    """A thread's loop, bound to the queue of the pool that started it."""
    while (job := jobs.get()) is not None:
        fn, future, loop = job
        if future.cancelled():  # its attempt was abandoned before a thread was free
            continue
        try:
            result = fn()
        except BaseException as exc:  # handed to the awaiting attempt as it is
            _settle(loop, future, None, exc)
        else:
            _settle(loop, future, result, None)


def _settle(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[object],
    result: object,
    error: BaseException | None,
) -> None:
    def settle() -> None:
        if future.done():  # the awaiting attempt was cancelled
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    if not loop.is_closed():
        loop.call_soon_threadsafe(settle)
