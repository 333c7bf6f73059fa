"""The token store port: tokens and their decisions, beside the runs.

Adapter: :class:`runlane_sqs.adapters.dynamodb.store.DynamoTokenStore` (DynamoDB, or the
in-memory DynamoDB of :mod:`runlane_sqs.testing`). Each run store hands out its token
store as ``store.tokens``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from runlane_sqs.core.tokens import Token, TokenDecision


class TokenStore(Protocol):
    """Durable external decisions: pending, then completed or timed out, once."""

    def create_token(self, token: Token) -> None: ...

    def get_token(self, token_id: str) -> Token | None: ...

    def decide_token(self, decision: TokenDecision) -> Token:
        """Store a decision if the token is still pending, without reading it first, and
        return the decided token; raises :class:`~runlane_sqs.core.tokens.TokenNotFound`,
        or :class:`~runlane_sqs.core.tokens.TokenAlreadyDecided` carrying the stored
        token."""
        ...

    def finish_token_resume(self, token_id: str) -> None:
        """Take a decided token off the agenda: no waiter is left."""
        ...

    def token_agenda_page(
        self, partition: str, until: datetime, limit: int, cursor: str | None
    ) -> tuple[list[Token], str | None]:
        """Like :meth:`RunStore.agenda_page <runlane_sqs.ports.store.RunStore.agenda_page>`,
        for tokens."""
        ...
