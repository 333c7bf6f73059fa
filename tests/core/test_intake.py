"""A worker session's bookkeeping (shared by the sync and the async worker)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runlane_sqs.core.clock import ManualClock
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.model import new_run_id
from runlane_sqs.core.wakeup import ClaimHint, Wakeup
from runlane_sqs.engine.driver import Disposition
from runlane_sqs.ports.transport import ReceivedWakeup
from runlane_sqs.runtime.worker import (
    ACK_LINGER_SECONDS,
    HOLD_LEAD,
    Intake,
    LoopAction,
    WorkerConfig,
)


class Ticks:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def message(n: int) -> ReceivedWakeup:
    return ReceivedWakeup(queue="default", body="{}", receipt=f"r{n}", message_id=f"m{n}")


def config(concurrency: int = 4, queues: tuple[str, ...] = ("default",)) -> WorkerConfig:
    return WorkerConfig.build(
        queues, concurrency=concurrency, wait_seconds=10, grace_period=1, worker_id="w"
    )


def test_queues_are_tried_round_robin_starting_one_further_each_receive() -> None:
    intake = Intake(config(queues=("a", "b", "c")))

    orders = [intake.receive_order() for _ in range(4)]

    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


def test_weighted_queues_are_tried_first_by_their_weight_spread_out() -> None:
    """Weights 3, 1 and 2: in every six receives ``a`` comes first three times, ``c``
    twice and ``b`` once, never ``a`` three times in a row; the others follow it."""
    weighted = WorkerConfig.build(
        ("a", "b", "c"), weights={"a": 3, "c": 2}, worker_id="w", grace_period=1
    )
    intake = Intake(weighted)

    orders = [intake.receive_order() for _ in range(12)]

    firsts = [order[0] for order in orders]
    assert firsts[:6] == ["a", "c", "a", "b", "c", "a"]
    assert firsts[6:] == firsts[:6]
    assert all(sorted(order) == ["a", "b", "c"] for order in orders)
    assert orders[1] == ["c", "a", "b"]


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"z": 2}, "does not consume: z"),
        ({"a": 0}, "from 1 to 100, not 0"),
        ({"a": 101}, "from 1 to 100, not 101"),
        ({"a": 1.5}, "whole number, not 1.5"),
        ({"a": True}, "whole number, not True"),
    ],
)
def test_bad_weights_are_refused(weights: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        WorkerConfig.build(("a", "b"), weights=weights, worker_id="w")  # type: ignore[arg-type]


def test_only_executed_attempts_count_and_deferred_messages_are_not_deleted() -> None:
    intake = Intake(config(), Ticks())
    intake.buffer.extend(message(n) for n in range(3))
    started = [intake.start_next() for _ in range(3)]
    assert (intake.busy, intake.next_action(max_runs=None)) == (
        3,
        LoopAction.WAIT,
    )  # 1 slot free of 4

    for msg, disposition in zip(
        started, [Disposition.EXECUTED, Disposition.SKIPPED, Disposition.DEFERRED], strict=True
    ):
        intake.finished(msg, disposition)

    assert (intake.busy, intake.executed) == (0, 1)
    assert [m.message_id for m in intake.take_acks()] == ["m0", "m1"]  # idle: delete now
    assert intake.take_acks() == []


def test_handled_messages_wait_for_a_batch_while_attempts_run_but_not_past_the_linger() -> None:
    ticks = Ticks()
    intake = Intake(config(), ticks)
    intake.buffer.extend(message(n) for n in range(2))
    first, _ = intake.start_next(), intake.start_next()
    intake.finished(first, Disposition.EXECUTED)

    assert intake.take_acks() == []  # one attempt still runs, the batch is not full
    ticks.now += ACK_LINGER_SECONDS
    assert [m.message_id for m in intake.take_acks()] == ["m0"]


def test_unstarted_messages_are_handed_back_once() -> None:
    intake = Intake(config())
    intake.buffer.extend(message(n) for n in range(2))

    assert [m.message_id for m in intake.close()] == ["m0", "m1"]
    assert intake.close() == []
    assert intake.next_action(max_runs=None) is LoopAction.RECEIVE


def test_a_wakeup_early_for_its_reserved_start_is_held_until_just_before_it() -> None:
    """No thread waits for a run's reserved start: the intake holds its message and hands
    it out first when the start is near; an early message without a hint is not held."""
    clock = ManualClock(AT)
    intake = Intake(config(), clock=clock)
    early = hinted(1, AT + timedelta(milliseconds=900))
    intake.add([early, message(2)])

    assert intake.next_action(None) is LoopAction.DISPATCH
    assert intake.start_next() is not early  # the unhinted one goes now
    assert intake.next_action(None) is LoopAction.RECEIVE and intake.pending == 2
    assert intake.wait_timeout() == pytest.approx(
        (timedelta(milliseconds=900) - HOLD_LEAD).total_seconds()
    )
    clock.advance(timedelta(milliseconds=900) - HOLD_LEAD)
    intake.buffer.append(message(3))
    assert intake.next_action(None) is LoopAction.DISPATCH
    assert intake.start_next() is early  # ahead of what was buffered before


def test_wakeups_held_for_one_start_go_out_in_the_order_they_were_held() -> None:
    """Runs of two rate scopes (a task's limit and a per-key one) may be reserved the same
    start: their held wakeups go out in the order they were held, never by where the
    messages sit in memory, which differs from one process to the next (a simulated
    history did not replay: ``make simulate SEED=13 ARGS="--runs 1100"`` gave another
    history each time)."""
    clock = ManualClock(AT)
    intake = Intake(config(), clock=clock)
    messages = sorted((message(n) for n in range(5)), key=id, reverse=True)
    for held in messages:
        assert intake.hold(held, AT + timedelta(seconds=1))
    clock.advance(timedelta(seconds=1))

    assert intake.next_action(None) is LoopAction.DISPATCH
    assert [intake.start_next() for _ in messages] == messages


def test_held_messages_are_given_back_at_the_end_of_the_session() -> None:
    clock = ManualClock(AT)
    intake = Intake(config(), clock=clock)
    held = hinted(1, AT + timedelta(seconds=1))
    intake.add([held])
    running = message(2)
    intake.hold(running, AT + timedelta(seconds=15))  # the path held its own message

    assert set(intake.close()) == {held, running}
    assert intake.pending == 0


def test_a_closed_intake_gives_back_all_it_kept_and_keeps_nothing_more() -> None:
    """At the end of a session the worker takes every message received and not started
    (buffered or held) to hand back; a hold asked for after that is refused, so that
    message is handed back at once instead of waiting in an intake no loop reads."""
    clock = ManualClock(AT)
    intake = Intake(config(), clock=clock)
    intake.add([message(1), hinted(2, AT + timedelta(seconds=1))])
    assert intake.hold(message(3), AT + timedelta(seconds=15))

    assert {m.message_id for m in intake.close()} == {"m1", "m2", "m3"}
    assert not intake.hold(message(4), AT + timedelta(seconds=15))
    assert intake.close() == []
    assert intake.pending == 0


def test_a_wakeup_whose_start_is_far_or_past_is_not_held() -> None:
    clock = ManualClock(AT)
    intake = Intake(config(), clock=clock)
    far, past = hinted(1, AT + timedelta(seconds=30)), hinted(2, AT - timedelta(seconds=1))
    intake.add([far, past])

    assert list(intake.buffer) == [far, past] and intake.pending == 0


AT = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def hinted(n: int, start: datetime) -> ReceivedWakeup:
    hint = ClaimHint(seq=2, attempt=0, task="partner.call", start=start)
    wakeup = Wakeup("prod", new_run_id(), "default", AT, hint=hint)
    return ReceivedWakeup(
        queue="default", body=wakeup.to_json(), receipt=f"r{n}", message_id=f"m{n}"
    )
