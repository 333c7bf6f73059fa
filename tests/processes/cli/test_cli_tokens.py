"""Tokens and signals from the command line: completing a token resumes the run waiting
on it; a token is decided once."""

from __future__ import annotations

import json

from tests.processes.cli.apps.names import APPROVAL
from tests.processes.cli.conftest import Cli

EXIT_USAGE = 2
EXIT_NOT_FOUND = 5
EXIT_ILLEGAL = 6


def test_tokens_complete_resumes_the_run_waiting_on_the_token(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    token = cli.ok("tokens", "create", "--timeout", "3600").stdout.strip()
    pending, triggered = cli.many(
        [
            ("tokens", "get", token, "--json"),
            ("trigger", APPROVAL, "--payload", json.dumps({"token": token}), "--json"),
        ]
    )
    assert pending.json()["status"] == "pending"
    run_id = triggered.json()["id"]
    cli.ok("worker", "--drain")
    shown_waiting, bad = cli.many(
        [
            ("runs", "get", run_id, "--json"),
            ("tokens", "complete", token, "--value", "{not json"),
        ]
    )
    waiting = shown_waiting.json()
    assert (waiting["status"], waiting["waiting"]["kind"], waiting["waiting"]["target"]) == (
        "released",
        "token",
        token,
    )
    assert waiting["lease"] is None  # waiting on a token holds no lease
    assert bad.code == EXIT_USAGE
    assert "not valid JSON" in bad.stderr

    completed = cli("tokens", "complete", token, "--value", '{"approved": true}', "--json")
    assert completed.json()["status"] == "completed"
    cli.ok("worker", "--drain")
    done, again, shown, missing, woken = cli.many(
        [
            ("runs", "get", run_id, "--json"),
            ("tokens", "complete", token, "--value", "false"),
            ("tokens", "get", token, "--json"),
            ("tokens", "time-out", "0" * 32),
            ("signals", "send", "nobody-waits", "--payload", "1", "--json"),
        ]
    )
    assert (done.json()["status"], done.json()["result"]) == (
        "succeeded",
        {"status": "completed", "value": {"approved": True}},
    )
    assert again.code == EXIT_ILLEGAL
    assert "already completed" in again.stderr
    assert (shown.json()["status"], shown.json()["value"]) == ("completed", {"approved": True})
    assert missing.code == EXIT_NOT_FOUND
    assert "not found" in missing.stderr
    assert woken.json() == {"key": "nobody-waits", "woken": 0}
