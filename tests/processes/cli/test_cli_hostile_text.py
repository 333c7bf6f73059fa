"""Stored text that holds terminal commands (a failure message, a payload, a token's
metadata, an error while importing the app) is shown escaped, never raw, in tables,
lines, ``error:`` lines and text logs; ``--json`` keeps it exact."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.processes.cli.apps.names import FAIL_WITH
from tests.processes.cli.conftest import REPO_ROOT, Cli

HOSTILE = "boom \x1b[2J\x1b]0;pwned\x07 \u202e"
"""Clears the screen, retitles the window, reverses the text after it."""
RAW = ("\x1b", "\x07", "\u202e")
ESCAPED = r"boom \x1b[2J\x1b]0;pwned\x07 \u202e"
"""What a person sees instead: every character, none of them acted on."""


def _assert_escaped(text: str, shown: str = ESCAPED) -> None:
    assert not any(char in text for char in RAW), ascii(text)
    assert shown in text, text


def _failed_run(cli: Cli, *worker_options: str) -> tuple[str, str]:
    """A run of ``shop.fail_with`` failed with ``HOSTILE``; its id and the worker's stderr."""
    payload = json.dumps({"message": HOSTILE})
    run_id = str(cli("trigger", FAIL_WITH, "--payload", payload, "--json").json()["id"])
    worker = cli.ok(*worker_options, "worker", "--drain")
    assert worker.stdout.strip() == "executed 1 run(s)"
    return run_id, worker.stderr


def test_a_failure_message_with_terminal_commands_is_shown_escaped(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    run_id, _ = _failed_run(cli)

    shown = cli.ok("runs", "get", run_id).stdout
    _assert_escaped(shown, f"builtins.RuntimeError: {ESCAPED}")
    traceback = shown[shown.index("traceback of the latest failure:") :].splitlines()
    assert traceback[1] == "Traceback (most recent call last):"  # the block keeps its lines
    assert traceback[-1] == f"RuntimeError: {ESCAPED}"
    # the payload cell is compact JSON: JSON escapes ESC and BEL, the table escapes U+202E
    assert r"\u001b[2J\u001b]0;pwned\u0007 \u202e" in shown

    _assert_escaped(cli.ok("runs", "attempts", run_id).stdout)
    _assert_escaped(cli.ok("runs", "events", run_id).stdout, "\\u202e")

    stored = cli("runs", "get", run_id, "--json").json()
    assert stored["failure"]["message"] == HOSTILE  # --json stays exact
    assert stored["payload"] == {"message": HOSTILE}


def test_a_text_log_line_of_the_failure_shows_it_escaped(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    run_id, stderr = _failed_run(cli, "--log-format", "text")

    assert not any(char in stderr for char in RAW), ascii(stderr)
    lines = stderr.splitlines()
    (error,) = [line for line in lines if " ERROR " in line]
    assert f"attempt 1 failed; run failed: {ESCAPED} run_id={run_id}" in error
    assert lines[lines.index(error) + 1] == "Traceback (most recent call last):"  # escaped too


def test_a_json_log_line_of_the_failure_keeps_it_exact_and_escaped_by_json(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    run_id, stderr = _failed_run(cli, "--log-format", "json")

    assert not any(char in stderr for char in RAW), ascii(stderr)
    records = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    (error,) = [r for r in records if r["level"] == "ERROR"]
    assert (error["message"], error["run_id"]) == (
        f"attempt 1 failed; run failed: {HOSTILE}",
        run_id,
    )
    assert error["traceback"].rstrip().endswith(HOSTILE)


def test_a_tokens_metadata_with_terminal_commands_is_shown_escaped(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    metadata = json.dumps({"note": "\u202eevil\u2066 \x9b2J"}, ensure_ascii=False)
    token_id = cli.ok("tokens", "create", "--metadata", metadata).stdout.strip()

    shown = cli.ok("tokens", "get", token_id).stdout

    assert not any(char in shown for char in ("\u202e", "\u2066", "\x9b")), ascii(shown)
    assert r"\u202eevil\u2066 \x9b2J" in shown


def test_an_error_line_quoting_the_apps_import_failure_shows_it_escaped(
    cli: Cli, provisioned: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "hostile_app.py").write_text(f"raise RuntimeError({HOSTILE!r})\n")
    path = os.pathsep.join([str(REPO_ROOT), str(tmp_path)])

    done = cli("runs", "list", "--app", "hostile_app:app", env={"PYTHONPATH": path})

    assert done.code == 3, done.stderr
    _assert_escaped(done.stderr)
    assert done.stderr.startswith(
        f"error: cannot import 'hostile_app' for app 'hostile_app:app': {ESCAPED}\n"
    )
