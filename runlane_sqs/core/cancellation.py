"""The cancellation signal of one attempt: a ``threading.Event`` async code can await.

Set from any thread (the heartbeat, a stopping worker, a Lambda deadline timer). Sync
handlers check :meth:`~threading.Event.is_set` or block in :meth:`~threading.Event.wait`;
``async def`` handlers ``await`` :meth:`Cancellation.wait_async`, on whichever event loop
they run. asyncio is imported by ``wait_async`` only, which runs on an event loop: a
sync worker or Lambda function never loads it (docs/deploy-lambda.md, "Cold start").
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio


class Cancellation(threading.Event):
    """Set once an attempt should stop; never stops a handler by force."""

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
