"""Tasks from the command line (docs/typed-tasks.md): ``tasks list`` and ``tasks show``
name each task's payload and result types and print their JSON Schema; a payload that
does not validate is refused by ``trigger`` naming the field, and nothing is written; a
valid one runs and its result is stored as JSON; a declared type that has no JSON Schema
is named, not a traceback."""

from __future__ import annotations

import json

from tests.processes.cli.apps.names import CRATE, ECHO, SHIP
from tests.processes.cli.conftest import Cli

EXIT_USAGE = 2
EXIT_NOT_FOUND = 5


def test_tasks_list_and_show_name_the_types_and_their_schemas(cli: Cli) -> None:
    listed, shown, schema, missing = cli.many(
        [
            ("tasks", "list", "--json"),
            ("tasks", "show", SHIP),
            ("tasks", "show", SHIP, "--schema"),
            ("tasks", "show", "shop.nope"),
        ]
    )

    by_name = {task["name"]: task for task in listed.json()}
    assert by_name[SHIP]["types"] == {"payload": "Parcel", "result": "Label"}
    assert by_name[ECHO]["types"] == {"payload": "JSON", "result": "JSON"}
    assert "payload  Parcel" in shown.stdout and "result   Label" in shown.stdout
    schemas = schema.json()
    assert schemas["payload"]["required"] == ["order_id", "weight_grams"]
    assert schemas["result"]["properties"]["service"] == {"title": "Service", "type": "string"}
    assert missing.code == EXIT_NOT_FOUND
    assert "unknown task 'shop.nope'" in missing.stderr


def test_a_payload_that_does_not_validate_is_refused_and_writes_nothing(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    bad = cli("trigger", SHIP, "--payload", json.dumps({"order_id": "seven"}))

    assert bad.code == EXIT_USAGE
    assert "payload of task 'shop.ship' is invalid" in bad.stderr
    assert "order_id: Input should be a valid integer" in bad.stderr
    assert "weight_grams: Field required" in bad.stderr
    assert cli.ok("runs", "list", "--json").json()["runs"] == []

    run_id = cli.ok(
        "trigger", SHIP, "--payload", json.dumps({"order_id": 7, "weight_grams": 400}), "--json"
    ).json()["id"]
    cli.ok("worker", "--drain")
    assert cli.ok("runs", "get", run_id, "--json").json()["result"] == {
        "order_id": 7,
        "service": "express",
    }


def test_a_type_without_a_json_schema_is_named_and_the_command_does_not_crash(cli: Cli) -> None:
    schema, as_json, shown, listed = cli.many(
        [
            ("tasks", "show", CRATE, "--schema"),
            ("tasks", "show", CRATE, "--schema", "--json"),
            ("tasks", "show", CRATE),
            ("tasks", "list", "--json"),
        ]
    )

    for refused in (schema, as_json):
        assert refused.code == EXIT_USAGE
        assert refused.stdout == ""
        assert "Traceback" not in refused.stderr
        assert refused.stderr.startswith(
            f"error: the payload of task {CRATE!r} is declared as Crate, which has no JSON Schema"
        )
        assert "Seal" in refused.stderr  # the field's class pydantic cannot describe
        assert f"hint: `runlane-sqs tasks show {CRATE}` names its types" in refused.stderr
    assert shown.code == 0
    assert "payload  Crate" in shown.stdout and "result   Label" in shown.stdout
    by_name = {task["name"]: task for task in listed.json()}
    assert by_name[CRATE]["types"] == {"payload": "Crate", "result": "Label"}
