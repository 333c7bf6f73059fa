"""The SQS wakeup transport on aiobotocore: the same requests as
:class:`~runlane_sqs.adapters.sqs.transport.SqsTransport`, whose queue URL lookups it shares."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from runlane_sqs.adapters.sqs.transport import (
    SqsTransport,
    by_queue,
    chunks,
    handle_entries,
    is_fifo,
    log_failed_entries,
    receive_request,
    received,
    send_request,
    unsent,
)
from runlane_sqs.core.errors import TransportError
from runlane_sqs.core.limits import MAX_SEND_BATCH
from runlane_sqs.core.wakeup import Wakeup, delay_seconds
from runlane_sqs.ports.transport import ReceivedWakeup

log = logging.getLogger("runlane_sqs.transport")


class AsyncSqsTransport:
    """``client`` is an open aiobotocore SQS client; URLs come from ``urls`` (looked up
    once per queue, on a thread)."""

    def __init__(self, client: Any, urls: SqsTransport) -> None:
        self._client = client
        self._urls = urls

    async def queue_url(self, queue: str) -> str:
        url = self._urls.cached_url(queue)
        return url if url is not None else await asyncio.to_thread(self._urls.queue_url, queue)

    async def publish(
        self, wakeups: Sequence[Wakeup], delay: timedelta | None = None
    ) -> list[Wakeup]:
        failed: list[Wakeup] = []
        seconds = delay_seconds(delay)
        for queue, group in by_queue(wakeups, lambda w: w.queue).items():
            url = await self.queue_url(queue)
            if seconds and is_fifo(url):
                failed.extend(group)  # see SqsTransport.publish
                continue
            for batch in chunks(group, MAX_SEND_BATCH):
                operation, request = send_request(url, batch, seconds)
                try:
                    response = await getattr(self._client, operation)(**request)
                except (ClientError, BotoCoreError) as exc:
                    log.warning("publishing %d wakeup(s) failed: %s", len(batch), exc)
                    failed.extend(batch)
                    continue
                failed.extend(unsent(batch, response))
        return failed

    async def receive(
        self, queue: str, max_messages: int, wait_seconds: float
    ) -> list[ReceivedWakeup]:
        request = receive_request(await self.queue_url(queue), max_messages, wait_seconds)
        try:
            response = await self._client.receive_message(**request)
        except (ClientError, BotoCoreError) as exc:
            raise TransportError(f"receiving from SQS queue {queue!r} failed: {exc}") from exc
        return received(queue, response)

    async def ack(self, messages: Sequence[ReceivedWakeup]) -> None:
        await self._batch("delete_message_batch", messages, {})

    async def release(self, messages: Sequence[ReceivedWakeup]) -> None:
        await self._batch("change_message_visibility_batch", messages, {"VisibilityTimeout": 0})

    async def _batch(
        self, operation: str, messages: Sequence[ReceivedWakeup], extra: dict[str, Any]
    ) -> None:
        for queue, group in by_queue(messages, lambda m: m.queue).items():
            url = await self.queue_url(queue)
            for batch in chunks(group, MAX_SEND_BATCH):
                entries = handle_entries(batch, extra)
                try:
                    response = await getattr(self._client, operation)(QueueUrl=url, Entries=entries)
                except (ClientError, BotoCoreError) as exc:
                    log.warning("%s on queue %r failed: %s", operation, queue, exc)
                    continue
                log_failed_entries(operation, queue, response)
