"""Tokens: one durable external decision each, pure."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from runlane_sqs.core.clock import truncate_ms
from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.indexes import AgendaKind
from runlane_sqs.core.model import JSON, EventType


class TokenStatus(StrEnum):
    """A token's decision. ``pending`` changes once, to one of the other two."""

    PENDING = "pending"
    """No decision yet."""
    COMPLETED = "completed"
    """Completed with a value."""
    TIMED_OUT = "timed_out"
    """Its timeout passed (or an operator timed it out) before a completion."""


class TokenAlreadyDecided(RunlaneError):
    """A token can be decided once; the first decision stays."""

    def __init__(self, token: Token) -> None:
        super().__init__(
            f"token {token.id} is already {token.status.value}; the first decision stays"
        )
        self.token = token


class TokenNotFound(RunlaneError):
    def __init__(self, token_id: str) -> None:
        super().__init__(f"token {token_id!r} not found")
        self.token_id = token_id


@dataclass(frozen=True, slots=True)
class TokenResult:
    """What ``ctx.wait_for_token`` returns: the decision and, if completed, the value."""

    status: TokenStatus
    value: JSON = None


@dataclass(frozen=True, slots=True)
class Token:
    """A durable decision that runs can wait for; readable after it is decided."""

    id: str
    environment: str
    status: TokenStatus
    created_at: datetime
    timeout_at: datetime | None = None
    value: JSON = None
    metadata: JSON = None
    decided_at: datetime | None = None
    resuming: bool = False
    """Decided, and maintenance still has waiters to resume."""
    decision_trace: str | None = None
    """The trace context of the span that decided it: every run it resumes links its next
    attempt to that span, whichever process resumes it (docs/observability.md)."""

    @property
    def is_decided(self) -> bool:
        return self.status is not TokenStatus.PENDING

    @property
    def result(self) -> TokenResult:
        return TokenResult(self.status, self.value)


def new_token(
    token_id: str, environment: str, now: datetime, timeout_at: datetime | None, metadata: JSON
) -> Token:
    return Token(
        id=token_id,
        environment=environment,
        status=TokenStatus.PENDING,
        created_at=truncate_ms(now),
        timeout_at=truncate_ms(timeout_at) if timeout_at else None,
        metadata=metadata,
    )


@dataclass(frozen=True, slots=True)
class TokenDecision:
    """A token's one decision, as written: it holds only while the token is pending, so
    it needs no read of the token first (the first decision stays)."""

    token_id: str
    status: TokenStatus
    value: JSON
    decided_at: datetime
    trace: str | None = None
    """The context of the span that decides it (kept as the token's ``decision_trace``)."""

    @classmethod
    def of(
        cls,
        token_id: str,
        status: TokenStatus,
        value: JSON,
        now: datetime,
        trace: str | None = None,
    ) -> TokenDecision:
        if status is TokenStatus.PENDING:
            raise ValueError("a decision is completed or timed_out")
        completed = status is TokenStatus.COMPLETED
        return cls(token_id, status, value if completed else None, truncate_ms(now), trace)

    def applied_to(self, token: Token) -> Token:
        """The token with this decision; raises if it already has one."""
        if token.is_decided:
            raise TokenAlreadyDecided(token)
        return replace(
            token,
            status=self.status,
            value=self.value,
            decided_at=self.decided_at,
            resuming=True,
            decision_trace=self.trace,
        )


def decide(token: Token, status: TokenStatus, value: JSON, now: datetime) -> Token:
    """The token with its one decision; raises if it already has one."""
    return TokenDecision.of(token.id, status, value, now).applied_to(token)


def token_agenda_entry(token: Token) -> tuple[AgendaKind, datetime] | None:
    """Pending tokens are listed at their timeout; decided ones while resuming."""
    if token.status is TokenStatus.PENDING:
        return (AgendaKind.TOKEN, token.timeout_at) if token.timeout_at else None
    if token.resuming and token.decided_at is not None:
        return AgendaKind.TOKEN, token.decided_at
    return None


def wait_result(token: Token) -> tuple[dict[str, JSON], EventType, dict[str, JSON]]:
    """What a decided token writes into each waiting run: result, event and its data."""
    if token.status is TokenStatus.COMPLETED:
        result: dict[str, JSON] = {"status": token.status.value, "value": token.value}
        return result, EventType.TOKEN_COMPLETED, {"token": token.id}
    return {"status": token.status.value}, EventType.TOKEN_TIMED_OUT, {"token": token.id}
