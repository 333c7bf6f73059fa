"""What a worker session does with wakeups of other environments (``RETURNED``): never
deleted, made visible again at once the first time, held when received again."""

from __future__ import annotations

from runlane_sqs.engine.driver import Disposition
from runlane_sqs.ports.transport import ReceivedWakeup
from runlane_sqs.runtime.worker import HELD_SECONDS, Intake, WorkerConfig


class Ticks:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def message(n: int, receipt: str = "") -> ReceivedWakeup:
    return ReceivedWakeup("default", "{}", receipt or f"r{n}", f"m{n}")


def handled(intake: Intake, *messages: ReceivedWakeup) -> None:
    """Each message received, started and found to be another environment's."""
    intake.buffer.extend(messages)
    for _ in messages:
        intake.finished(intake.start_next(), Disposition.RETURNED)


def ids(messages: list[ReceivedWakeup]) -> list[str]:
    return [m.receipt for m in messages]


def intake(ticks: Ticks) -> Intake:
    return Intake(WorkerConfig.build(["default"], worker_id="w"), ticks)


def test_a_wakeup_of_another_environment_is_released_at_once_and_never_deleted() -> None:
    session = intake(Ticks())

    handled(session, message(1), message(2))

    assert ids(session.take_releases()) == ["r1", "r2"]
    assert session.take_releases() == []
    assert session.take_acks(force=True) == []
    assert (session.returned, session.executed, session.busy) == (2, 0, 0)


def test_one_received_again_in_the_session_is_held_until_the_session_ends() -> None:
    session = intake(Ticks())
    handled(session, message(1))
    assert ids(session.take_releases()) == ["r1"]

    handled(session, message(1, receipt="r1-again"), message(2))

    assert ids(session.take_releases()) == ["r2"]  # r1-again stays invisible
    assert ids(session.take_releases(ending=True)) == ["r1-again"]
    assert session.take_releases(ending=True) == []
    assert session.returned == 3
    assert session.take_acks(force=True) == []


def test_a_held_wakeup_past_its_visibility_timeout_is_not_released_again() -> None:
    ticks = Ticks()
    session = intake(ticks)
    handled(session, message(1))
    session.take_releases()
    handled(session, message(1, receipt="r1-old"))
    ticks.now += HELD_SECONDS  # SQS made it visible again by itself
    handled(session, message(1, receipt="r1-new"))

    assert ids(session.take_releases(ending=True)) == ["r1-new"]  # the old receipt is stale
