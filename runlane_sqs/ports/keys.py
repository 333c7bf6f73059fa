"""Idempotency, singleton, debounce and batch keys: a new run claims its keys in the
write that creates it (:meth:`~runlane_sqs.ports.store.RunStore.create_run`), and they
are released when the run no longer holds them (docs/concepts.md, docs/debounce.md,
docs/batches.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from runlane_sqs.core.errors import RunlaneError
from runlane_sqs.core.model import KeyKind


@dataclass(frozen=True, slots=True)
class KeyHolder:
    """The run a key item names, when it claimed the key, and when the claim ends
    (``None``: never)."""

    run_id: str
    claimed_at: datetime
    expires_at: datetime | None


@dataclass(frozen=True, slots=True)
class KeyClaim:
    """A key the new run must take atomically with its creation."""

    kind: KeyKind
    task: str
    key: str
    expires_at: datetime | None = None
    previous_owner: str | None = None
    """A finished run still named by the key item, which the claim may replace."""


class KeyConflict(RunlaneError):
    """A key is held by another run (``owner``) or by nothing readable (``owner=None``)."""

    def __init__(self, claim: KeyClaim, owner: str | None) -> None:
        super().__init__(
            f"{claim.kind} key {claim.key!r} of task {claim.task!r} is held by {owner}"
        )
        self.claim = claim
        self.owner = owner


class KeyStore(Protocol):
    """Idempotency and singleton keys: who holds one, and freeing it."""

    def release_key(self, kind: KeyKind, task: str, key: str, run_id: str) -> None:
        """Free a key if ``run_id`` still holds it (a no-op otherwise)."""
        ...

    def get_key_owner(self, kind: KeyKind, task: str, key: str, now: datetime) -> str | None:
        """The run id an idempotency or singleton key points to, unless it expired."""
        ...

    def get_key_holder(self, kind: KeyKind, task: str, key: str, now: datetime) -> KeyHolder | None:
        """The run a key points to and when its claim ends, unless it ended before ``now``."""
        ...

    def delete_key(self, kind: KeyKind, task: str, key: str) -> None: ...
