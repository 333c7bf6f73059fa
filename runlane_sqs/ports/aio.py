"""The async side of the two ports.

Only what the per-message path needs is async: reading a run, writing transitions and
renewals, and moving wakeups. Everything rarer (key releases, resuming waiters) goes
through the app's sync ports on a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Protocol

from runlane_sqs.core.machine import HintedClaim, Transition
from runlane_sqs.core.model import Lease, Run
from runlane_sqs.core.progress import AttemptReport
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.ports.transport import ReceivedWakeup


class AsyncRunStore(Protocol):
    """The run store calls of the per-message path (see
    :class:`~runlane_sqs.ports.store.RunStore`)."""

    async def get_run(self, run_id: str) -> Run | None: ...

    async def apply(self, transition: Transition) -> Run: ...

    async def claim_hinted(self, claim: HintedClaim) -> Run: ...

    async def renew_lease(self, run: Run, lease: Lease) -> Run: ...

    async def report_progress(self, run: Run, token: str, report: AttemptReport) -> Run: ...


class AsyncWakeupTransport(Protocol):
    """See :class:`~runlane_sqs.ports.transport.WakeupTransport`."""

    async def publish(
        self, wakeups: Sequence[Wakeup], delay: timedelta | None = None
    ) -> list[Wakeup]: ...

    async def receive(
        self, queue: str, max_messages: int, wait_seconds: float
    ) -> list[ReceivedWakeup]: ...

    async def ack(self, messages: Sequence[ReceivedWakeup]) -> None: ...

    async def release(self, messages: Sequence[ReceivedWakeup]) -> None: ...
