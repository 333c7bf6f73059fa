"""What a person reads: ``runs list`` at 80 columns, a failure's traceback in
``runs get``, and ``runs prune``'s progress bar only where it can be drawn."""

from __future__ import annotations

import os
import pty
import re
import subprocess

from tests.processes.cli.apps.names import CHARGE, ECHO, FAIL_ENV, NAP
from tests.processes.cli.conftest import CLI_TIMEOUT_SECONDS, REPO_ROOT, Cli, command

ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SPINNER_OR_BAR = re.compile("[\u2800-\u28ff\u2500-\u257f]")
"""Rich's spinner frames (braille) and bar segments (box drawing)."""


def _trigger(cli: Cli, *args: str) -> str:
    return str(cli("trigger", *args, "--json").json()["id"])


def test_runs_list_at_80_columns_keeps_ids_tasks_and_statuses_whole_and_shows_due_times(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    done = _trigger(cli, ECHO)
    delayed = _trigger(cli, ECHO, "--delay", "3600")
    released = _trigger(cli, NAP)  # released for an hour once it has run
    assert cli.ok("worker", "--drain").stdout.strip() == "executed 2 run(s)"

    listing = cli.ok("runs", "list", env={"COLUMNS": "80"}).stdout

    lines = listing.splitlines()
    assert max(len(line) for line in lines) <= 80, listing
    header = lines[1].split()
    assert header[:2] == ["id", "task"] and "status" in header and "due" in header, listing
    rows = {line.split()[0]: line.split()[1:] for line in lines[3:]}
    assert set(rows) == {done, delayed, released}, listing
    assert rows[done][0] == ECHO and "succeeded" in rows[done]
    assert rows[delayed][0] == ECHO and "queued" in rows[delayed]
    assert rows[released][0] == NAP and "released" in rows[released]
    assert re.search(r"\bin (59m|1h)$", " ".join(rows[delayed])), listing
    assert re.search(r"\bin (59m|1h)$", " ".join(rows[released])), listing
    assert not re.search(r"\bin \d", " ".join(rows[done])), listing  # due and done: no time


def test_runs_get_shows_the_latest_failures_traceback_as_lines(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    run_id = _trigger(cli, CHARGE, "--payload", '{"amount": 3}')
    cli.ok("worker", "--drain", env={FAIL_ENV: "1"})

    shown = cli.ok("runs", "get", run_id).stdout

    assert "builtins.RuntimeError: card declined" in shown
    lines = shown.splitlines()
    start = lines.index("traceback of the latest failure:")
    traceback = lines[start + 1 :]
    assert traceback[0] == "Traceback (most recent call last):"
    assert traceback[-1] == "RuntimeError: card declined"
    assert any(line.strip() == 'raise RuntimeError("card declined")' for line in traceback)
    assert "\\n" not in shown  # not a JSON string


def _finished_runs(cli: Cli, count: int) -> None:
    for n in range(count):
        _trigger(cli, ECHO, "--payload", str(n))
    assert cli.ok("worker", "--drain").stdout.strip() == f"executed {count} run(s)"


def test_prune_in_a_pipe_draws_no_progress_bar(cli: Cli, provisioned: dict[str, str]) -> None:
    _finished_runs(cli, 2)

    done = cli.ok("runs", "prune", "--older-than", "0", "--yes")

    assert done.stdout.strip() == "pruned 2 run(s) (2 examined in 1 batch(es))"
    assert not ESCAPE.search(done.stderr), done.stderr
    assert not SPINNER_OR_BAR.search(done.stderr), done.stderr
    assert '"message": "pruned 2 of 2 run(s)"' in done.stderr  # the log line, as JSON


def test_prune_on_a_terminal_prints_log_lines_above_its_bar(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    _finished_runs(cli, 2)
    main, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            command("--log-format", "text", "runs", "prune", "--older-than", "0", "--yes"),
            cwd=REPO_ROOT,
            env=cli.environment({"COLUMNS": "100"}),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=terminal,
            text=True,
        )
        os.close(terminal)
        terminal = -1
        drawn = _read_all(main)
        out, _ = process.communicate(timeout=CLI_TIMEOUT_SECONDS)
    finally:
        os.close(main)
        if terminal >= 0:
            os.close(terminal)

    assert process.returncode == 0, drawn
    assert out.strip() == "pruned 2 run(s) (2 examined in 1 batch(es))"
    assert SPINNER_OR_BAR.search(drawn), drawn  # a bar was drawn on the terminal
    pieces = [ESCAPE.sub("", piece) for piece in re.split(r"[\r\n]", drawn)]
    logged = [piece for piece in pieces if "pruned 2 of 2 run(s)" in piece]
    assert logged, drawn
    for piece in logged:  # each log line starts a line of its own, with no bar in it
        assert re.match(r"\d{4}-\d\d-\d\d ", piece), drawn
        assert not SPINNER_OR_BAR.search(piece), drawn


def _read_all(fd: int) -> str:
    """Everything written to a pseudo-terminal until its last writer closes it."""
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: no writer is left
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")
