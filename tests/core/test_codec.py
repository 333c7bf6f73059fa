"""Runs to DynamoDB items and back, and the conditional writes built from transitions."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runlane_sqs.adapters.dynamodb import expressions, keys, runs
from runlane_sqs.adapters.dynamodb.keys import agenda_pk
from runlane_sqs.core import machine
from runlane_sqs.core.clock import to_epoch_ms
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import EventType, Failure, Lease, Run, RunEvent, RunStatus
from runlane_sqs.core.retry import RetryDecision

NOW = datetime(2030, 1, 1, 12, 0, 0, 123_000, tzinfo=UTC)
RUN_ID = "89abcdef0123456789abcdef01234567"
LEASE = Lease(owner="worker-a", token="tok-1", expires_at=NOW + timedelta(seconds=60))
FAILURE = Failure(
    type="app.errors.Timeout", message="upstream 504 — réessayer", traceback="Traceback...\n"
)
PAYLOAD = {"to": "ünïcode@example.com", "items": [1, 2.5, None, True], "nested": {"k": "v"}}


def make_run(**changes: Any) -> Run:
    base = Run(
        id=RUN_ID,
        environment="prod",
        task="billing.charge",
        queue="default",
        status=RunStatus.QUEUED,
        payload=PAYLOAD,
        created_at=NOW,
        updated_at=NOW,
        seq=1,
        due_at=NOW,
    )
    return base.with_changes(**changes)


def round_trip(run: Run) -> Run:
    return runs.run_from_wire(runs.run_to_wire(run, [], json.dumps(run.payload)))


RUNS = {
    "queued with keys": make_run(idempotency_key="order#42", singleton_key="user 7 — ü"),
    "delayed": make_run(due_at=NOW + timedelta(hours=2)),
    "running": make_run(
        status=RunStatus.RUNNING,
        seq=2,
        attempt=1,
        due_at=None,
        lease=LEASE,
        deadline_at=NOW + timedelta(seconds=30),
    ),
    "retrying": make_run(
        status=RunStatus.RETRYING,
        seq=5,
        attempt=2,
        due_at=NOW + timedelta(seconds=40),
        wake_at=NOW + timedelta(minutes=5, seconds=40),
        publishes=2,
        lease_losses=1,
        failure=FAILURE,
    ),
    "held in line": make_run(
        wake_at=NOW + timedelta(minutes=10), line_at=NOW - timedelta(minutes=5), publishes=1
    ),
    "succeeded after a failure": make_run(
        status=RunStatus.SUCCEEDED,
        seq=7,
        attempt=3,
        due_at=None,
        failure=FAILURE,
        result={"charged": 1250, "currency": "€", "ids": ["a", "b"]},
    ),
    "failed": make_run(status=RunStatus.FAILED, seq=4, attempt=1, due_at=None, failure=FAILURE),
    "released without a due time": make_run(status=RunStatus.RELEASED, seq=3, due_at=None),
}


# runs -------------------------------------------------------------------------------


@pytest.mark.parametrize("run", RUNS.values(), ids=RUNS.keys())
def test_a_run_survives_the_wire(run: Run) -> None:
    assert round_trip(run) == run


def test_a_run_read_back_is_never_marked_created() -> None:
    assert round_trip(make_run(created=True)).created is False


def test_the_payload_comes_from_its_stored_json() -> None:
    run = make_run()
    wire = runs.run_to_wire(run, [], '{"to":"b@example.com","n":[1,2]}')
    assert wire["payload"] == {"S": '{"to":"b@example.com","n":[1,2]}'}
    assert runs.run_from_wire(wire).payload == {"to": "b@example.com", "n": [1, 2]}


def test_falsy_results_survive_the_wire() -> None:
    for result in (0, "", [], {}, False):
        run = make_run(status=RunStatus.SUCCEEDED, due_at=None, result=result)
        assert round_trip(run).result == result


def test_times_are_stored_as_epoch_milliseconds() -> None:
    run = RUNS["running"]
    wire = runs.run_to_wire(run, [], "{}")
    assert wire["created_at"] == {"N": str(to_epoch_ms(NOW))}
    assert wire["lease_expires_at"] == {"N": str(to_epoch_ms(LEASE.expires_at))}
    assert wire["pk"] == {"S": keys.run_pk("prod", RUN_ID)}
    assert wire["sk"] == {"S": keys.RUN_SK}
    assert wire["created_sk"] == {"S": keys.created_sk(to_epoch_ms(NOW), RUN_ID)}


def test_absent_values_are_absent_attributes() -> None:
    wire = runs.run_to_wire(make_run(), [], "{}")
    for name in ("lease_owner", "lease_token", "result", "failure", "idempotency_key"):
        assert name not in wire


# events -----------------------------------------------------------------------------


def test_events_survive_the_wire_in_order() -> None:
    events = [
        RunEvent(seq=1, type=EventType.TRIGGERED, at=NOW, attempt=0),
        RunEvent(seq=2, type=EventType.STARTED, at=NOW, attempt=1, data={"worker": "w-ü"}),
        RunEvent(
            seq=3,
            type=EventType.ATTEMPT_FAILED,
            at=NOW + timedelta(seconds=1),
            attempt=1,
            data={"failure": FAILURE.to_json(), "retry_at": NOW.isoformat()},
        ),
    ]
    item = runs.item_from_wire(runs.run_to_wire(make_run(seq=3), events, "{}"))
    assert runs.events_from_item(item) == events


# index attributes -------------------------------------------------------------------


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED])
def test_terminal_runs_are_not_on_the_agenda(status: RunStatus) -> None:
    run = make_run(status=status, due_at=NOW, lease=LEASE)
    wire = runs.run_to_wire(run, [], "{}")
    assert "agenda_pk" not in wire
    assert "agenda_at" not in wire
    assert wire["status_pk"] == {"S": f"prod#{status.value}#11"}  # shard 0x89ab % 16


def test_a_leased_run_is_on_the_agenda_at_its_lease_expiry() -> None:
    run = make_run(status=RunStatus.RUNNING, due_at=None, lease=LEASE)
    wire = runs.run_to_wire(run, [], "{}")
    assert wire["agenda_at"] == {"N": str(to_epoch_ms(LEASE.expires_at))}
    assert wire["agenda_pk"] == {"S": agenda_pk("prod", "run", RUN_ID)}
    assert wire["status_pk"] == {"S": "prod#active#11"}


def test_a_leased_run_with_an_earlier_deadline_is_on_the_agenda_at_the_deadline() -> None:
    deadline = LEASE.expires_at - timedelta(seconds=20)
    run = make_run(
        status=RunStatus.CANCEL_REQUESTED, due_at=None, lease=LEASE, deadline_at=deadline
    )
    wire = runs.run_to_wire(run, [], "{}")
    assert wire["agenda_at"] == {"N": str(to_epoch_ms(deadline))}


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.RETRYING, RunStatus.RELEASED])
def test_a_runnable_run_is_on_the_agenda_at_its_due_time(status: RunStatus) -> None:
    due = NOW + timedelta(hours=3)
    wire = runs.run_to_wire(make_run(status=status, due_at=due), [], "{}")
    assert wire["agenda_at"] == {"N": str(to_epoch_ms(due))}
    assert wire["agenda_pk"] == {"S": agenda_pk("prod", "run", RUN_ID)}


def test_a_run_whose_wakeup_was_published_is_on_the_agenda_at_its_wake_time() -> None:
    wake = NOW + timedelta(minutes=5)
    wire = runs.run_to_wire(make_run(wake_at=wake), [], "{}")
    assert wire["agenda_at"] == {"N": str(to_epoch_ms(wake))}


def test_a_run_waiting_without_a_due_time_is_not_on_the_agenda() -> None:
    wire = runs.run_to_wire(RUNS["released without a due time"], [], "{}")
    assert "agenda_pk" not in wire
    assert "agenda_at" not in wire


# conditional writes -----------------------------------------------------------------


def plain(value: dict[str, Any]) -> Any:
    """A wire value as a python value."""
    ((kind, inner),) = value.items()
    if kind == "N":
        return int(inner)
    if kind == "L":
        return [plain(v) for v in inner]
    if kind == "M":
        return {k: plain(v) for k, v in inner.items()}
    return inner


class Update:
    """An UpdateItem request decoded into what it sets, appends, removes and requires."""

    def __init__(self, request: dict[str, Any]) -> None:
        names = request["ExpressionAttributeNames"]
        values = request["ExpressionAttributeValues"]
        set_part, _, remove_part = request["UpdateExpression"].partition(" REMOVE ")
        assert set_part.startswith("SET ")
        appends = re.findall(r"(#\w+) = list_append\s*\((#\w+), (:\w+)\)", set_part)
        self.appended = {names[n]: plain(values[v]) for n, same, v in appends if n == same}
        assert len(self.appended) == len(appends)
        self.set = {names[n]: plain(values[v]) for n, v in re.findall(r"(#\w+) = (:\w+)", set_part)}
        self.removed = {names[n] for n in re.findall(r"#\w+", remove_part)}
        condition = request["ConditionExpression"]
        self.condition_text = condition
        self.required = {
            names[n]: plain(values[v]) for n, v in re.findall(r"(#\w+) = (:\w+)", condition)
        }
        self.required_absent = {
            names[n] for n in re.findall(r"attribute_not_exists\s*\((#\w+)\)", condition)
        }


def queued_run() -> Run:
    run, _ = machine.new_run(
        run_id=RUN_ID, environment="prod", task="t", queue="default", payload=None, now=NOW
    )
    return run


def claim(run: Run) -> Transition:
    decision = machine.claim_lease(
        run, now=NOW, owner="worker-a", token="tok-1", duration=timedelta(seconds=60)
    )
    assert isinstance(decision, Transition)
    return decision


def test_a_claim_is_conditioned_on_the_sequence_only() -> None:
    transition = claim(queued_run())
    request = runs.apply_transition("runs", transition)
    update = Update(request)
    assert request["TableName"] == "runs"
    assert request["Key"] == keys.run_key("prod", RUN_ID)
    assert request["ReturnValuesOnConditionCheckFailure"] == "ALL_OLD"
    assert update.required == {"seq": 1}
    assert "lease_token" not in update.condition_text
    assert update.set["status"] == "running"
    assert update.set["seq"] == 2
    assert update.set["attempt"] == 1
    assert update.set["lease_token"] == "tok-1"
    assert update.set["lease_owner"] == "worker-a"
    assert update.set["lease_expires_at"] == to_epoch_ms(NOW + timedelta(seconds=60))
    assert "due_at" in update.removed
    assert [(e["seq"], e["type"]) for e in update.appended["events"]] == [(2, "started")]


def test_an_attempt_outcome_is_fenced_on_the_lease_token() -> None:
    running = claim(queued_run()).after
    transition = machine.record_success(running, token="tok-1", result={"ok": 1}, now=NOW)
    update = Update(runs.apply_transition("runs", transition))
    assert update.required == {"seq": 2, "lease_token": "tok-1"}
    assert " AND " in update.condition_text
    assert update.set["status"] == "succeeded"
    assert update.set["result"] == '{"ok":1}'
    assert {"lease_owner", "lease_token", "lease_expires_at", "agenda_pk", "agenda_at"} <= (
        update.removed
    )
    assert [(e["seq"], e["type"]) for e in update.appended["events"]] == [(3, "succeeded")]


def test_unchanged_state_is_not_rewritten() -> None:
    running = claim(queued_run()).after
    transition = machine.record_success(running, token="tok-1", result=None, now=NOW)
    update = Update(runs.apply_transition("runs", transition))
    written = set(update.set) | update.removed
    assert "attempt" not in written
    assert "result" not in written
    assert "updated_at" not in written  # same millisecond as the claim
    for never in ("payload", "task", "queue", "created_at", "pk", "sk"):
        assert never not in written


def test_a_final_failure_appends_both_events_in_order() -> None:
    running = claim(queued_run()).after
    transition = machine.record_failure(
        running, token="tok-1", failure=FAILURE, decision=RetryDecision(None), now=NOW
    )
    update = Update(runs.apply_transition("runs", transition))
    assert [(e["seq"], e["type"]) for e in update.appended["events"]] == [
        (3, "attempt_failed"),
        (4, "failed"),
    ]
    assert update.set["seq"] == 4
    assert json.loads(update.set["failure"]) == FAILURE.to_json()
    event_data = json.loads(update.appended["events"][0]["data"])
    assert event_data == {"failure": FAILURE.to_json()}


def test_a_retry_puts_the_run_back_on_the_due_agenda() -> None:
    running = claim(queued_run()).after
    retry_at = NOW + timedelta(hours=1)
    transition = machine.record_failure(
        running, token="tok-1", failure=FAILURE, decision=RetryDecision(retry_at), now=NOW
    )
    update = Update(runs.apply_transition("runs", transition))
    assert update.set["status"] == "retrying"
    assert update.set["due_at"] == to_epoch_ms(retry_at)
    assert update.set["agenda_at"] == to_epoch_ms(retry_at)
    assert update.set["agenda_pk"] == agenda_pk("prod", "run", RUN_ID)
    assert update.set["status_pk"] == "prod#active#11"  # unchanged: no index write
    assert {"lease_owner", "lease_token", "lease_expires_at"} <= update.removed


def test_guarded_attributes_join_the_condition() -> None:
    run = queued_run()
    transition = Transition(
        before=run,
        after=run.with_changes(publishes=1, wake_at=NOW + timedelta(minutes=5)),
        events=(),
        guard=("publishes", "due_at"),
    )
    update = Update(runs.apply_transition("runs", transition))
    assert update.required == {"seq": 1, "due_at": to_epoch_ms(NOW)}
    assert update.required_absent == {"publishes"}
    assert update.set["publishes"] == 1


def test_appended_events_are_stored_as_a_new_run_stores_them() -> None:
    """The attempt writes append events in the wire format the model serialises them to,
    so a history read back decodes alike whichever write stored each event."""
    running = claim(queued_run()).after
    transition = machine.record_failure(
        running, token="tok-1", failure=FAILURE, decision=RetryDecision(None), now=NOW
    )
    request = runs.apply_transition("runs", transition)
    (appended,) = (v["L"] for v in request["ExpressionAttributeValues"].values() if "L" in v)
    stored = runs.run_to_wire(transition.after, list(transition.events), "{}")["events"]["L"]
    assert appended == stored
    item = runs.item_from_wire({**runs.run_to_wire(running, [], "{}"), "events": {"L": appended}})
    assert runs.events_from_item(item) == list(transition.events)


def test_step_names_with_path_characters_are_written_as_one_map_key() -> None:
    running = claim(queued_run()).after
    after = running.with_changes(steps={"fetch.v2[0]": {"n": 1}}, seq=running.seq + 1)
    request = runs.apply_transition("runs", Transition(before=running, after=after, events=()))
    names = request["ExpressionAttributeNames"]
    (path,) = re.findall(r"(#\w+\.#\w+) = :\w+", request["UpdateExpression"])
    assert [names[part] for part in path.split(".")] == ["steps", "fetch.v2%5B0%5D"]
    assert runs.map_key("fetch.v2[0]") == "fetch.v2%5B0%5D"


def test_a_run_item_missing_a_required_attribute_is_a_clear_error() -> None:
    wire = runs.run_to_wire(make_run(), [], "{}")
    del wire["task"]
    with pytest.raises(ValueError, match="run item without 'task'"):
        runs.run_from_wire(wire)


def test_a_value_of_the_wrong_type_is_refused_before_it_is_sent() -> None:
    with pytest.raises(TypeError, match="'status' takes text, not int"):
        expressions.wire_value("status", 3)
    assert expressions.wire_value("seq", 3) == {"N": "3"}
