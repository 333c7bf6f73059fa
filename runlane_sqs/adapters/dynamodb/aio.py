"""The DynamoDB run store's per-message calls on aiobotocore: the same requests and
response handling as :class:`~runlane_sqs.adapters.dynamodb.store.DynamoRunStore`."""

from __future__ import annotations

import asyncio
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from runlane_sqs.adapters.dynamodb import runs, slots
from runlane_sqs.adapters.dynamodb.errors import AsyncSend, Refused, refusal_of, translate
from runlane_sqs.adapters.dynamodb.replays import (
    refused_claim,
    refused_transition,
)
from runlane_sqs.adapters.dynamodb.requests import Request
from runlane_sqs.adapters.dynamodb.runs import Beside, applied, run_from_wire, run_in
from runlane_sqs.core.errors import LeaseLost, StorageUnavailable
from runlane_sqs.core.machine import HintedClaim, Transition
from runlane_sqs.core.model import Lease, Run
from runlane_sqs.core.progress import AttemptReport


class AsyncSender:
    """:class:`~.store.Sender` for an aiobotocore client."""

    def __init__(self, client: Any, table: str) -> None:
        self._client = client
        self._table = table
        self._endpoint: str | None = getattr(getattr(client, "meta", None), "endpoint_url", None)

    async def __call__(self, operation: str, request: Request) -> Any:
        try:
            return await getattr(self._client, operation)(**request)
        except (ClientError, BotoCoreError) as exc:
            translate(exc, table=self._table, endpoint=self._endpoint)

    async def conditional(self, operation: str, request: Request) -> dict[str, Any] | Refused:
        try:
            response: dict[str, Any] = await self(operation, request)
        except ClientError as exc:
            return refusal_of(exc)
        return response


class AsyncDynamoRunStore:
    """``client`` is an open aiobotocore DynamoDB client."""

    def __init__(self, client: Any, table: str, environment: str) -> None:
        self._client = client
        self.table = table
        self.environment = environment
        self._send: AsyncSend = AsyncSender(client, table)

    async def get_run(self, run_id: str) -> Run | None:
        request = runs.get_run(self.table, self.environment, run_id)
        return run_in(await self._send("get_item", request))

    async def apply(self, transition: Transition) -> Run:
        beside = runs.beside_the_run(transition)
        if beside is not None:
            return await self._apply_slotted(transition, beside)
        request = runs.apply_transition(self.table, transition)
        sent = await self._send.conditional("update_item", request)
        if isinstance(sent, Refused):
            return refused_transition(transition, sent.item)
        return applied(transition, sent)

    async def _apply_slotted(self, transition: Transition, beside: Beside) -> Run:
        """:func:`~runlane_sqs.adapters.dynamodb.slots.apply_slotted` on aiobotocore."""
        request = slots.transaction(self.table, transition, beside)
        for attempt in range(slots.TRANSACTION_ATTEMPTS):
            if attempt:
                await asyncio.sleep(slots.backoff(attempt))
            try:
                await self._send("transact_write_items", request)
            except ClientError as exc:
                try:
                    return slots.refused(transition, beside, exc)  # type: ignore[no-any-return]
                except slots.Contended:
                    continue
            return transition.after
        raise StorageUnavailable(slots.CONTENDED)

    async def claim_hinted(self, claim: HintedClaim) -> Run:
        request = runs.claim_hinted(self.table, claim)
        sent = await self._send.conditional("update_item", request)
        if isinstance(sent, Refused):
            return refused_claim(claim, sent.item)
        return run_from_wire(sent["Attributes"])

    async def renew_lease(self, run: Run, lease: Lease) -> Run:
        request = runs.lease_renewal(self.table, run, lease)
        sent = await self._send.conditional("update_item", request)
        if isinstance(sent, Refused):
            raise LeaseLost(run.id)
        return run_from_wire(sent["Attributes"])

    async def report_progress(self, run: Run, token: str, report: AttemptReport) -> Run:
        request = runs.progress_report(self.table, run, token, report)
        sent = await self._send.conditional("update_item", request)
        if isinstance(sent, Refused):
            raise LeaseLost(run.id)
        return run_from_wire(sent["Attributes"])
