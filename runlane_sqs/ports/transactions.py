"""Writing new runs in the caller's own transaction (docs/transactions.md).

A transactional trigger adds a run's creation (its item, its key claims, the counts of
the objects its payload references) to a DynamoDB ``TransactWriteItems`` request that
also holds the caller's own writes, so the run exists if and only if their writes
commit. Actions are in DynamoDB's low-level form (``{"Put": {"TableName": ...,
"Item": {"id": {"S": "42"}}}}``), the form the request itself takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.model import Run, RunEvent
from runlane_sqs.ports.keys import KeyClaim

Action = dict[str, Any]
"""One action of a ``TransactWriteItems`` request: ``{"Put"|"Update"|"Delete"|
"ConditionCheck": {...}}``."""


class RefusalReason(StrEnum):
    """Why one action of a cancelled transaction was refused, as the library reads it."""

    NONE = "none"
    """Not refused: another action cancelled the transaction."""
    CONDITION_FAILED = "condition_failed"
    """Its condition did not hold (the item the refusal found comes with it, if asked)."""
    CONFLICT = "conflict"
    """Another transaction was writing the item at the same moment: send it again."""
    OTHER = "other"
    """Anything else (a validation error, an item collection too large...)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why DynamoDB cancelled one action of a transaction."""

    index: int
    """The action's place in the request, from 0."""
    reason: RefusalReason
    code: str
    """The service's own code for the reason (shown in errors, never compared)."""
    message: str
    owner: str | None = None
    """The run the item the refusal found names: for a key claim, the run holding the
    key; for a new run's item, the run already stored under its id."""


class Cancelled(RunlaneError):
    """DynamoDB cancelled the transaction; nothing of it was written."""

    def __init__(self, refusals: Sequence[Refusal]) -> None:
        super().__init__("; ".join(f"action {r.index}: {r.code}" for r in refusals))
        self.refusals = tuple(refusals)


class TransactionStore(Protocol):
    """Builds a new run's actions and sends whole transactions."""

    def creation_actions(
        self, run: Run, event: RunEvent, payload_text: str, claims: Sequence[KeyClaim]
    ) -> list[Action]:
        """The actions that create ``run``: its key claims (in ``claims``' order), the
        run's item, then the counts of the objects its payload references."""
        ...

    def check(self, actions: Sequence[Action]) -> None:
        """Raise :class:`~runlane_sqs.core.errors.InvalidTransaction` for a request
        DynamoDB would refuse as a whole (too many actions, too large, two actions on one
        item, an action of no known kind), before anything is sent."""
        ...

    def commit(self, actions: Sequence[Action], token: str) -> None:
        """Send ``actions`` as one transaction with ``token`` as its
        ``ClientRequestToken`` (a commit sent again with the same token and actions
        within 10 minutes writes nothing twice); raises :class:`Cancelled`, or
        :class:`~runlane_sqs.core.errors.InvalidTransaction` when DynamoDB refuses the
        request itself."""
        ...
