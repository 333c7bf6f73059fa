"""Attempts as operators see them, derived from a run's history (pure)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from runlane_sqs.core.model import JSON, EventType, Failure, RunEvent

ENDINGS: dict[EventType, str] = {
    EventType.SUCCEEDED: "succeeded",
    EventType.ATTEMPT_FAILED: "failed",
    EventType.ATTEMPT_TIMED_OUT: "timed_out",
    EventType.RELEASED: "released",
    EventType.LEASE_EXPIRED: "lease_expired",
    EventType.CANCELLED: "cancelled",
    EventType.PARKED: "parked",
}
"""The events that end an attempt, and the outcome each records."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One execution of the handler for a run, under one lease."""

    number: int
    worker: str | None
    started_at: datetime
    ended_at: datetime | None = None
    outcome: str | None = None
    """succeeded, failed, timed_out, released, lease_expired, cancelled, parked (its code
    no longer matched the run's history); None while running."""
    failure: Failure | None = None
    app_version: str | None = None
    """The app version of the worker that ran it (``None``: not recorded)."""

    def to_json(self) -> dict[str, JSON]:
        return {
            "number": self.number,
            "worker": self.worker,
            "app_version": self.app_version,
            "started_at": self.started_at.isoformat(),
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            "outcome": self.outcome,
            "failure": self.failure.to_json() if self.failure else None,
        }


def attempts_from(events: list[RunEvent]) -> list[Attempt]:
    """Each ``started`` event opens an attempt; the next ending event closes it."""
    attempts: list[Attempt] = []
    current: Attempt | None = None
    for event in sorted(events, key=lambda e: e.seq):
        if event.type is EventType.STARTED:
            version = event.data.get("app_version")
            current = Attempt(
                event.attempt,
                event.data.get("worker"),
                event.at,
                app_version=version if isinstance(version, str) else None,
            )
            attempts.append(current)
            continue
        outcome = ENDINGS.get(event.type)
        if current is None or outcome is None:
            continue
        failure = event.data.get("failure")
        attempts[-1] = replace(
            current,
            ended_at=event.at,
            outcome=outcome,
            failure=Failure.from_json(failure) if isinstance(failure, dict) else None,
        )
        current = None
    return attempts
