"""``queues dlq`` from the command line: the dead letters of a queue listed with their
runs and verdicts, one inspected in full, a redrive dry-run then done; a hostile body is
shown escaped, a message id that is not there is a usage error."""

from __future__ import annotations

from runlane_sqs import Runlane
from runlane_sqs.core.wakeup import Wakeup
from tests.processes.cli.apps.names import ECHO
from tests.processes.cli.conftest import Cli

EXIT_USAGE = 2
HOSTILE = "\u202e<b>not a wakeup</b>"
"""Markup and a bidi override (SQS refuses control characters in a body)."""


def test_dead_letters_are_listed_inspected_and_redriven(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    run_id = str(cli("trigger", ECHO, "--json").json()["id"])
    app = Runlane.from_env()
    sqs = app.client("sqs")
    dead_letters = app.transport.dead_letter_url("default")  # type: ignore[attr-defined]
    wakeup = Wakeup.for_run(app.runs.get_stored(run_id), app.clock.now()).to_json()
    for body in (wakeup, HOSTILE):
        sqs.send_message(QueueUrl=dead_letters, MessageBody=body)

    listed = cli("queues", "dlq", "list", "--json").json()
    by_verdict = {letter["verdict"]: letter for letter in listed}
    assert set(by_verdict) == {"redrive", "malformed"}
    assert (by_verdict["redrive"]["run_id"], by_verdict["redrive"]["status"]) == (run_id, "queued")

    table = cli.ok("queues", "dlq", "list")
    assert "2 dead letter(s) of default" in table.stdout and "\u202e" not in table.stdout
    shown = cli.ok("queues", "dlq", "inspect", "default", by_verdict["malformed"]["message_id"])
    assert "body: \\u202e<b>not a wakeup</b>" in shown.stdout
    missing = cli("queues", "dlq", "inspect", "default", "no-such-message")
    assert missing.code == EXIT_USAGE and "no dead letter 'no-such-message'" in missing.stderr

    dry = cli("queues", "dlq", "redrive", "--dry-run", "--json").json()
    assert (dry["redriven"], dry["left"]) == (0, 2)
    done = cli("queues", "dlq", "redrive", "--json").json()
    assert (done["redriven"], done["left"]) == (1, 1)  # the malformed one stays
    assert cli.ok("worker", "--drain").stdout.strip() == "executed 1 run(s)"
    dropped = cli("queues", "dlq", "redrive", "--drop-unreadable", "--json").json()
    assert (dropped["dropped"], dropped["left"]) == (1, 0)
