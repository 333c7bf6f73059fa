"""Observe and recover runs from the command line: trigger, work, list,
retry with an audit link, cancel a waiting run, prune finished runs."""

from __future__ import annotations

import json
from typing import Any

from runlane_sqs import Runlane
from tests.processes.cli.apps.names import (
    BULK,
    CHARGE,
    CHARGE_ALL,
    DIGEST,
    ECHO,
    FAIL_ENV,
    FAN_OUT,
    NAP,
)
from tests.processes.cli.conftest import Cli

RUNS = 20
EXIT_USAGE = 2
EXIT_ILLEGAL = 6
SECRET = "4111-1111-1111-1111"
"""A payload value that must never appear in a log line."""


def _run(cli: Cli, run_id: str) -> dict[str, Any]:
    return dict(cli("runs", "get", run_id, "--json").json())


def _trigger(cli: Cli, *args: str) -> str:
    return str(cli("trigger", *args, "--json").json()["id"])


def _json_lines(text: str) -> list[dict[str, Any]]:
    lines = [line for line in text.splitlines() if line.strip()]
    return [json.loads(line) for line in lines]


def test_twenty_triggers_a_draining_worker_and_a_listing_of_twenty_succeeded_runs(
    cli: Cli,
) -> None:
    assert "ready" in cli.ok("provision").stdout
    triggers = cli.many(
        [("trigger", ECHO, "--payload", json.dumps({"n": n, "card": SECRET})) for n in range(RUNS)]
    )
    ids = set()
    for done in triggers:
        assert done.code == 0, done.stderr
        run_id, created = done.stdout.splitlines()
        assert created == "created: true"
        ids.add(run_id)
    assert len(ids) == RUNS

    worker = cli.ok("--log-format", "json", "worker", "--drain", "--concurrency", "4")
    assert worker.stdout.strip() == f"executed {RUNS} run(s)"

    succeeded, queued = cli.many(
        [
            ("runs", "list", "--json", "--status", "succeeded", "--limit", "100"),
            ("runs", "list", "--json", "--status", "queued", "--status", "running"),
        ]
    )
    listed = succeeded.json()
    assert {run["id"] for run in listed["runs"]} == ids
    assert all(run["status"] == "succeeded" and run["attempt"] == 1 for run in listed["runs"])
    assert listed["cursor"] is None
    assert queued.json() == {"runs": [], "cursor": None}

    # every worker log line is one JSON object; attempt lines carry the run context
    records = _json_lines(worker.stderr)
    attempt_lines = [r for r in records if r["logger"] == "runlane_sqs.task"]
    assert len(attempt_lines) >= 2 * RUNS  # started, (handler), succeeded
    for record in attempt_lines:
        assert record["run_id"] in ids
        assert record["task"] == ECHO
        assert record["attempt"] == 1
        assert record["worker_id"].startswith("worker-")
        assert {"time", "level", "message"} <= set(record)
    assert all(SECRET not in done.stderr for done in [worker, *triggers])


def test_a_failed_run_retried_from_the_cli_succeeds_as_a_new_linked_run(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    source = _trigger(cli, CHARGE, "--payload", '{"amount": 12}')
    cli.ok("worker", "--drain", env={FAIL_ENV: "1"})

    retried = cli("runs", "retry", source, "--reason", "card fixed", "--actor", "ana", "--json")
    new = retried.json()
    assert (new["source_run_id"], new["source_kind"], new["status"]) == (source, "retry", "queued")
    assert new["id"] != source
    cli.ok("worker", "--drain")

    done, source_now, history, attempts, refused, rerun = cli.many(
        [
            ("runs", "get", new["id"], "--json"),
            ("runs", "get", source, "--json"),
            ("runs", "events", source, "--json"),
            ("runs", "attempts", source, "--json"),
            ("runs", "retry", new["id"]),
            ("runs", "rerun", new["id"]),
        ]
    )
    succeeded = done.json()
    assert (succeeded["status"], succeeded["result"], succeeded["source_run_id"]) == (
        "succeeded",
        {"charged": 12},
        source,
    )
    failed = source_now.json()
    assert failed["status"] == "failed"  # the source keeps its outcome
    assert failed["failure"]["message"] == "card declined"
    links = [e for e in history.json()["events"] if e["type"] == "linked_run"]
    assert [link["data"] for link in links] == [
        {"run": new["id"], "kind": "retry", "actor": "ana", "reason": "card fixed"}
    ]
    tried = attempts.json()["attempts"]
    assert [(a["number"], a["outcome"]) for a in tried] == [(1, "failed")]
    assert tried[0]["failure"]["type"].endswith("RuntimeError")
    assert refused.code == EXIT_ILLEGAL
    assert "only failed runs are retried" in refused.stderr
    assert rerun.code == 0, rerun.stderr
    assert rerun.stdout.splitlines()[1] == f"rerun of {new['id']}"


def test_cancel_from_the_cli_finishes_a_released_run_at_once(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    run_id = _trigger(cli, NAP)
    cli.ok("worker", "--drain")
    released = _run(cli, run_id)
    assert released["status"] == "released"
    assert released["waiting"]["kind"] == "time"

    done = cli.ok("runs", "cancel", run_id, "--reason", "not needed", "--actor", "ana")
    assert done.stdout.strip() == f"run {run_id} is cancelled"
    cancelled, history, again = cli.many(
        [
            ("runs", "get", run_id, "--json"),
            ("runs", "events", run_id, "--json"),
            ("runs", "cancel", run_id),
        ]
    )
    assert cancelled.json()["status"] == "cancelled"
    last = history.json()["events"][-1]
    assert (last["type"], last["data"]) == ("cancelled", {"actor": "ana", "reason": "not needed"})
    assert again.code == EXIT_ILLEGAL
    assert "already cancelled" in again.stderr


def test_runs_triggered_with_an_ordering_key_wait_their_turn_and_run_in_order(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    first, second = (_trigger(cli, ECHO, "--ordering-key", "acct-7") for _ in range(2))
    waiting = _run(cli, second)
    assert (waiting["ordering_key"], waiting["place"], waiting["waiting_for_turn"]) == (
        "acct-7",
        1,
        True,
    )
    worker = cli.ok("worker", "--drain")
    assert worker.stdout.strip() == "executed 2 run(s)"
    done = [_run(cli, run_id) for run_id in (first, second)]
    assert [run["status"] for run in done] == ["succeeded", "succeeded"]
    assert done[0]["updated_at"] <= done[1]["updated_at"]
    refused = cli("trigger", ECHO, "--ordering-key", "acct\x1b[2J")
    assert refused.code == EXIT_USAGE
    assert "control character" in refused.stderr and "Traceback" not in refused.stderr


def test_triggers_with_a_debounce_key_collapse_into_one_run(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    first = cli("trigger", DIGEST, "--payload", '{"n": 1}', "--debounce-key", "u-1", "--json")
    second = cli("trigger", DIGEST, "--payload", '{"n": 2}', "--debounce-key", "u-1", "--json")
    assert first.json()["created"] is True and second.json()["created"] is False
    assert second.json()["id"] == first.json()["id"]
    run = _run(cli, first.json()["id"])
    assert (run["payload"], run["debounce_key"], run["collapsed"]) == ({"n": 2}, "u-1", 1)
    refused = cli("trigger", DIGEST, "--debounce-key", "u\x1b[2J")
    assert refused.code == EXIT_USAGE
    assert "U+001B" in refused.stderr and "Traceback" not in refused.stderr
    plain = cli("trigger", ECHO, "--debounce-key", "u-1")
    assert plain.code == EXIT_USAGE and "has no debounce" in plain.stderr


def test_triggers_with_a_batch_key_gather_and_a_full_batch_runs(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    told = [
        cli("trigger", BULK, "--payload", str(n), "--batch-key", "b-1", "--json").json()
        for n in range(3)
    ]
    assert [t["item"] for t in told] == [0, 1, 2] and len({t["id"] for t in told}) == 1
    plain = cli.ok("trigger", BULK, "--payload", "9", "--batch-key", "b-1")
    assert plain.stdout.splitlines()[1:] == ["created: true", "item: 0"]
    assert cli.ok("worker", "--drain").stdout.strip() == "executed 1 run(s)"
    done = _run(cli, told[0]["id"])
    assert (done["status"], done["result"], done["batch_key"]) == ("succeeded", 3, "b-1")
    assert done["payload"] == [0, 1, 2]


def test_prune_removes_only_finished_runs_older_than_the_cutoff(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    triggered = cli.many(
        [
            ("trigger", ECHO, "--payload", "1", "--json"),
            ("trigger", ECHO, "--payload", "2", "--json"),
            ("trigger", ECHO, "--delay", "3600", "--json"),  # queued, due in an hour
            ("trigger", NAP, "--json"),  # released for an hour once it has run
        ]
    )
    first, second, waiting, released = (str(done.json()["id"]) for done in triggered)
    assert cli.ok("worker", "--drain").stdout.strip() == "executed 3 run(s)"

    refused, older = cli.many(
        [
            ("runs", "prune", "--older-than", "0", "--status", "succeeded"),
            ("runs", "prune", "--older-than", "2000-01-01T00:00:00Z", "--yes", "--json"),
        ]
    )
    assert refused.code == EXIT_USAGE  # no terminal to confirm on, and no --yes
    assert "--yes" in refused.stderr
    assert older.json()["deleted"] == 0  # every finished run is newer than that cutoff

    report = cli("runs", "prune", "--older-than", "0", "--yes", "--status", "succeeded", "--json")
    assert (report.json()["examined"], report.json()["deleted"]) == (2, 2)
    remaining, *gone = cli.many(
        [("runs", "list", "--json"), ("runs", "get", first), ("runs", "get", second)]
    )
    statuses = {r["id"]: r["status"] for r in remaining.json()["runs"]}
    assert statuses == {waiting: "queued", released: "released"}
    assert [done.code for done in gone] == [5, 5]


def test_the_async_worker_drains_from_the_command_line_with_json_logs(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    ids = [_trigger(cli, ECHO, "--payload", json.dumps({"n": n})) for n in range(3)]

    worker = cli.ok("--log-format", "json", "worker", "--async", "--drain", "--concurrency", "4")

    assert worker.stdout.strip() == "executed 3 run(s)"
    assert all(_run(cli, run_id)["result"] == {"echo": {"n": n}} for n, run_id in enumerate(ids))
    started = [r for r in _json_lines(worker.stderr) if r["message"] == "attempt 1 started"]
    assert {r["run_id"] for r in started} == set(ids)


def test_a_drain_says_how_many_wakeups_of_another_environment_it_left_on_the_queue(
    cli: Cli,
) -> None:
    shared = {"RUNLANE_QUEUE_PREFIX": "shared-"}
    assert "ready" in cli.ok("provision", env=shared).stdout
    staging = {**shared, "RUNLANE_ENVIRONMENT": "staging"}
    run_id = str(cli.ok("trigger", ECHO, "--json", env=staging).json()["id"])

    drained = cli.ok("worker", "--drain", env=shared)

    # received twice in the session: returned at once, then held to the end of it
    assert drained.stdout.strip() == (
        "executed 0 run(s); 2 receive(s) of wakeups of other environments, left on the queue"
    )
    assert cli.ok("worker", "--drain", env=staging).stdout.strip() == "executed 1 run(s)"
    assert cli.ok("runs", "get", run_id, "--json", env=staging).json()["status"] == "succeeded"


def test_a_map_from_a_worker_process_joins_once_and_its_group_is_seen_from_the_cli(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    parent = _trigger(cli, FAN_OUT, "--payload", json.dumps({"items": [1, 2, 3, 4, 5]}))
    cli.ok("worker", "--drain", "--concurrency", "2")
    while cli.ok("worker", "--drain").stdout.strip() != "executed 0 run(s)":
        pass
    done = _run(cli, parent)
    assert done["status"] == "succeeded"
    assert done["result"] == {"sum": 15, "succeeded": 5}
    [group] = done["groups"]
    assert (group["status"], group["total"], group["succeeded"]) == ("succeeded", 5, 5)
    assert group["running"] == 0 and group["joined_at"] is not None
    history = cli("runs", "events", parent, "--json").json()["events"]
    resumes = [e for e in history if e["type"] == "resumed"]
    assert [e["data"] for e in resumes] == [{"group": group["id"], "status": "succeeded"}]

    first = cli.ok("runs", "list", "--parent", parent, "--limit", "3", "--json").json()
    assert [r["group_index"] for r in first["runs"]] == [0, 1, 2]
    rest = cli.ok("runs", "list", "--parent", parent, "--cursor", first["cursor"], "--json").json()
    assert [r["group_index"] for r in rest["runs"]] == [3, 4]
    assert rest["cursor"] is None
    assert {r["status"] for r in first["runs"] + rest["runs"]} == {"succeeded"}
    table = cli.ok("runs", "get", parent).stdout
    assert f"group {group['id']}" in table and "5 started, 0 running" in table

    bad = cli("runs", "list", "--parent", parent, "--cursor", "\x1b[31mnope")
    assert bad.code != 0 and "not valid" in bad.stderr and "\x1b[31m" not in bad.stderr
    mixed = cli("runs", "list", "--parent", parent, "--task", ECHO)
    assert mixed.code == EXIT_USAGE and "--parent" in mixed.stderr


def test_retry_failed_from_the_cli_reruns_a_group_s_failed_children_and_its_parent(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    parent = _trigger(cli, CHARGE_ALL, "--payload", json.dumps({"amounts": [1, 2, 3]}))
    while cli.ok("worker", "--drain", env={FAIL_ENV: "1"}).stdout.strip() != "executed 0 run(s)":
        pass
    assert _run(cli, parent)["status"] == "failed"
    early = cli("runs", "retry-failed", "0" * 32)
    assert early.code != 0

    done = cli.ok("runs", "retry-failed", parent, "--reason", "card fixed", "--json").json()
    assert (done["generation"], done["status"]) == (1, "running")
    again = cli("runs", "retry-failed", parent)
    assert again.code == EXIT_ILLEGAL and "not joined" in again.stderr
    while cli.ok("worker", "--drain").stdout.strip() != "executed 0 run(s)":
        pass
    [group] = _run(cli, parent)["groups"]
    assert (group["status"], group["succeeded"], group["joined_at"] is not None) == (
        "succeeded",
        3,
        True,
    )
    children = cli.ok("runs", "list", "--parent", parent, "--json").json()["runs"]
    assert all(c["status"] == "succeeded" and c["source_kind"] == "retry" for c in children)


def test_a_5_mb_payload_and_its_result_round_trip_through_the_cli(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    """With a payload bucket, a worker process reads a 5 MB payload from S3 and writes
    its 5 MB result there; ``runs get`` opens both, ``runs list`` shows the references
    (it reads no object)."""
    bucket = {"RUNLANE_PAYLOAD_BUCKET": "runlane-cli-values"}
    app = Runlane.from_env(payload_bucket=bucket["RUNLANE_PAYLOAD_BUCKET"])
    app.task(lambda ctx, payload: None, name=ECHO)  # a producer: the worker runs the shop's
    app.provision(["default"])
    payload = {"rows": ["x" * 1000] * 5000}
    run = app.trigger(ECHO, payload)

    worker = cli.ok("worker", "--drain", env=bucket)
    assert worker.stdout.strip() == "executed 1 run(s)"

    got = cli.ok("runs", "get", run.id, "--json", env=bucket).json()
    assert got["status"] == "succeeded"
    assert got["payload"] == payload
    assert got["result"] == {"echo": payload}
    listed = cli.ok("runs", "list", "--json", env=bucket).json()["runs"]
    assert [r["id"] for r in listed] == [run.id]
    assert listed[0]["payload"]["sealed"]["size"] > 5_000_000
    assert listed[0]["result"]["sealed"]["bucket"] == "runlane-cli-values"
