"""Adapters that run any sync port off the event loop, on threads (the in-memory
adapters, a custom adapter), for the async worker."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

from runlane_sqs.core.machine import HintedClaim, Transition
from runlane_sqs.core.model import Lease, Run
from runlane_sqs.core.progress import AttemptReport
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.ports.store import RunStore
from runlane_sqs.ports.transport import ReceivedWakeup, WakeupTransport


class ThreadedStore:
    """A sync :class:`RunStore` (the in-memory one, a custom adapter) run on threads."""

    def __init__(self, store: RunStore) -> None:
        self._store = store

    async def get_run(self, run_id: str) -> Run | None:
        return await asyncio.to_thread(self._store.get_run, run_id)

    async def apply(self, transition: Transition) -> Run:
        return await asyncio.to_thread(self._store.apply, transition)

    async def claim_hinted(self, claim: HintedClaim) -> Run:
        return await asyncio.to_thread(self._store.claim_hinted, claim)

    async def renew_lease(self, run: Run, lease: Lease) -> Run:
        return await asyncio.to_thread(self._store.renew_lease, run, lease)

    async def report_progress(self, run: Run, token: str, report: AttemptReport) -> Run:
        return await asyncio.to_thread(self._store.report_progress, run, token, report)


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
