"""The replay rule (runlane_sqs/core/replay.py): recorded calls may be reached in any
order; a new call is allowed only once every recorded call is reached."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from runlane_sqs.core.model import EventType, Run, RunEvent, RunStatus
from runlane_sqs.core.replay import (
    Divergence,
    HistoryDiverged,
    Replay,
    recorded_calls,
    step_call,
    wait_call,
)

NOW = datetime(2026, 12, 5, tzinfo=UTC)
CHARGE, SHIP, AUDIT = step_call("charge"), step_call("ship"), step_call("audit")
TOKEN = wait_call("token:t1#1")


def test_recorded_calls_are_the_steps_and_the_waits_with_a_result_but_no_release() -> None:
    run = Run(
        id="a" * 32,
        environment="test",
        task="shop.order",
        queue="default",
        status=RunStatus.RELEASED,
        payload=None,
        created_at=NOW,
        updated_at=NOW,
        seq=5,
        steps={"charge": {"value": 1, "site": "shop.order"}},
        wait_results={"token:t1#1": {"status": "completed"}, "time:#1": {}},
    )
    assert recorded_calls(run) == {CHARGE, TOKEN}


def test_the_same_calls_in_any_order_then_new_ones_are_allowed() -> None:
    replay = Replay(frozenset({CHARGE, TOKEN}))
    assert replay.call(TOKEN) is True
    assert replay.call(CHARGE) is True
    assert replay.call(SHIP) is False
    assert replay.reached == [TOKEN, CHARGE, SHIP]


def test_a_new_call_before_every_recorded_one_is_reached_stops_the_attempt() -> None:
    replay = Replay(frozenset({CHARGE, TOKEN}))
    replay.call(CHARGE)
    with pytest.raises(HistoryDiverged) as raised:
        replay.call(AUDIT)
    assert raised.value.details() == {
        "reached": [CHARGE],
        "asked": AUDIT,
        "unreached": [TOKEN],
    }
    assert "'step audit' before reaching 1 call(s)" in str(raised.value)


def test_a_divergence_is_no_exception_a_handler_s_except_exception_catches() -> None:
    assert not issubclass(HistoryDiverged, Exception)


def test_with_nothing_recorded_every_call_is_new_and_allowed() -> None:
    replay = Replay(frozenset())
    assert [replay.call(c) for c in (CHARGE, TOKEN, SHIP)] == [False, False, False]


def test_a_divergence_is_read_back_from_the_history_beside_the_recorded_calls() -> None:
    def event(seq: int, kind: EventType, **data: Any) -> RunEvent:
        return RunEvent(seq=seq, type=kind, at=NOW, attempt=1 if seq < 5 else 2, data=data)

    history = [
        event(1, EventType.TRIGGERED),
        event(2, EventType.STARTED, worker="w1"),
        event(3, EventType.STEP_RECORDED, step="charge"),
        event(4, EventType.RELEASED, wait={"kind": "token", "name": "token:t1#1"}),
        event(5, EventType.RELEASED, wait={"kind": "time", "name": "time:#1"}),
        event(6, EventType.STARTED, worker="w2"),
        event(
            7,
            EventType.PARKED,
            reason="history_diverged",
            reached=[CHARGE],
            asked=AUDIT,
            unreached=[TOKEN],
        ),
    ]
    divergence = Divergence.of(history)
    assert divergence is not None
    assert divergence.recorded == (CHARGE, TOKEN)
    assert divergence.side_by_side() == [(CHARGE, CHARGE), (TOKEN, AUDIT)]
    unknown_task = event(7, EventType.PARKED, reason="unknown_task")
    assert Divergence.of([*history[:6], unknown_task]) is None
