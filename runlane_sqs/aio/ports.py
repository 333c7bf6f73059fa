"""The async side of the two ports, and adapters that run any sync port off the loop.

Only what the per-message path needs is async: reading a run, writing transitions and
renewals, and moving wakeups. Everything rarer (key releases, resuming waiters) goes
through the app's sync ports on a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Protocol

from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import Lease, Run
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.ports import ReceivedWakeup, RunStore, WakeupTransport


class AsyncRunStore(Protocol):
    """The run store calls of the per-message path (see :class:`~runlane_sqs.ports.RunStore`)."""

    async def get_run(self, run_id: str) -> Run | None: ...

    async def apply(self, transition: Transition) -> Run: ...

    async def renew_lease(self, run: Run, lease: Lease) -> Run: ...


class AsyncWakeupTransport(Protocol):
    """See :class:`~runlane_sqs.ports.WakeupTransport`."""

    async def publish(
        self, wakeups: Sequence[Wakeup], delay: timedelta | None = None
    ) -> list[Wakeup]: ...

    async def receive(
        self, queue: str, max_messages: int, wait_seconds: float
    ) -> list[ReceivedWakeup]: ...

    async def ack(self, messages: Sequence[ReceivedWakeup]) -> None: ...

    async def release(self, messages: Sequence[ReceivedWakeup]) -> None: ...


class ThreadedStore:
    """A sync :class:`RunStore` (the in-memory one, a custom adapter) run on threads."""

    def __init__(self, store: RunStore) -> None:
        self._store = store

    async def get_run(self, run_id: str) -> Run | None:
        return await asyncio.to_thread(self._store.get_run, run_id)

    async def apply(self, transition: Transition) -> Run:
        return await asyncio.to_thread(self._store.apply, transition)

    async def renew_lease(self, run: Run, lease: Lease) -> Run:
        return await asyncio.to_thread(self._store.renew_lease, run, lease)


class ThreadedTransport:
    """A sync :class:`WakeupTransport` run on threads."""

    def __init__(self, transport: WakeupTransport) -> None:
        self._transport = transport

    async def publish(
        self, wakeups: Sequence[Wakeup], delay: timedelta | None = None
    ) -> list[Wakeup]:
        return await asyncio.to_thread(self._transport.publish, wakeups, delay)

    async def receive(
        self, queue: str, max_messages: int, wait_seconds: float
    ) -> list[ReceivedWakeup]:
        return await asyncio.to_thread(self._transport.receive, queue, max_messages, wait_seconds)

    async def ack(self, messages: Sequence[ReceivedWakeup]) -> None:
        await asyncio.to_thread(self._transport.ack, messages)

    async def release(self, messages: Sequence[ReceivedWakeup]) -> None:
        await asyncio.to_thread(self._transport.release, messages)
