"""Every documented exit code of ``runlane-sqs`` (runlane_sqs.cli.exits, docs/operations.md
section "Exit codes"), each produced by a real CLI process, with a one-line reason on
stderr and no traceback."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from runlane_sqs import RetryPolicy, Runlane
from tests.processes.cli.apps.names import APP_SPEC, CHARGE, ECHO
from tests.processes.cli.conftest import (
    CLI_TIMEOUT_SECONDS,
    REPO_ROOT,
    Cli,
    Done,
    command,
    unreachable_backend,
    wait_until,
)

EXIT_ABORTED = 1
EXIT_USAGE = 2
EXIT_APP_NOT_IMPORTABLE = 3
EXIT_BACKEND = 4
EXIT_NOT_FOUND = 5
EXIT_ILLEGAL = 6
EXIT_RUN_UNSUCCESSFUL = 7
EXIT_WAIT_TIMED_OUT = 8
SHOP_MODULE = APP_SPEC.partition(":")[0]
TOKEN = "{token}"
"""Stands for a token already decided, in the arguments of a case."""
FAILED_RUN = "{failed}"
"""Stands for a run that failed."""
QUEUED_RUN = "{queued}"
"""Stands for a run that no worker works on."""


def reason_line(done: Done) -> str:
    """The one line of stderr that says why the command failed (click's usage errors
    start with ``Error:``, ours with ``error:``)."""
    assert "Traceback" not in done.stderr, done.stderr
    reasons = [
        line for line in done.stderr.splitlines() if line.lower().startswith(("error: ", "aborted"))
    ]
    assert len(reasons) == 1, f"{done.args} exited {done.code}:\n{done.stderr}"
    return reasons[0]


@dataclass(frozen=True)
class Case:
    code: int
    args: tuple[str, ...]
    reason: str
    """A part of the reason line."""
    provisioned: bool = True
    env: dict[str, str] = field(default_factory=dict)
    shows_run: bool = False
    """``runs wait`` prints the run (as it ended, or its last state) on stdout."""


CASES = {
    "usage: a cursor this library did not produce": Case(
        EXIT_USAGE, ("runs", "list", "--cursor", "garbage"), "cursor 'garbage' is not valid"
    ),
    "app: an attribute the module does not have": Case(
        EXIT_APP_NOT_IMPORTABLE,
        ("runs", "list", "--app", f"{SHOP_MODULE}:nope"),
        f"module {SHOP_MODULE!r} has no attribute 'nope'",
        provisioned=False,
    ),
    "backend: the table is missing": Case(
        EXIT_BACKEND, ("runs", "list"), "does not exist", provisioned=False
    ),
    "not found: no such run": Case(
        EXIT_NOT_FOUND, ("runs", "get", "f" * 32), f"run '{'f' * 32}' not found"
    ),
    "illegal: a token decided twice": Case(
        EXIT_ILLEGAL, ("tokens", "complete", TOKEN, "--value", "2"), "already completed"
    ),
    "unsuccessful: waiting for a run that failed": Case(
        EXIT_RUN_UNSUCCESSFUL,
        ("runs", "wait", FAILED_RUN, "--json"),
        "finished failed",
        shows_run=True,
    ),
    "timed out: waiting for a run nobody works on": Case(
        EXIT_WAIT_TIMED_OUT,
        ("runs", "wait", QUEUED_RUN, "--timeout", "0.1", "--json"),
        "is still queued after 0.1 s",
        shows_run=True,
    ),
}


def _stand_ins(args: tuple[str, ...]) -> dict[str, str]:
    """A decided token and runs for the placeholders in ``args``, made in this process."""
    app = Runlane.from_env()
    values: dict[str, str] = {}
    if TOKEN in args:
        values[TOKEN] = app.tokens.complete(app.tokens.create().id, 1).id
    if QUEUED_RUN in args:
        app.task(lambda ctx, payload: payload, name=ECHO)
        values[QUEUED_RUN] = app.trigger(ECHO).id
    if FAILED_RUN in args:

        def charge(ctx: object, payload: object) -> None:
            raise RuntimeError("card declined")

        app.task(charge, name=CHARGE, retry=RetryPolicy(max_attempts=1))
        values[FAILED_RUN] = app.trigger(CHARGE).id
        app.worker().drain()
    return values


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_each_exit_code_has_a_one_line_reason(
    cli: Cli, request: pytest.FixtureRequest, case: Case
) -> None:
    if case.provisioned:
        request.getfixturevalue("provisioned")
    values = _stand_ins(case.args)
    args = tuple(values.get(arg, arg) for arg in case.args)

    done = cli(*args, env=case.env)

    assert done.code == case.code, f"{args} exited {done.code}, not {case.code}:\n{done.stderr}"
    assert case.reason in reason_line(done)
    if case.shows_run:
        assert json.loads(done.stdout)["id"] in values.values()
    else:
        assert done.stdout == ""


def test_answering_no_to_a_confirmation_exits_1(cli: Cli) -> None:
    main, terminal = pty.openpty()  # runs prune asks only on a terminal
    try:
        process = subprocess.Popen(
            command("runs", "prune", "--older-than", "0"),
            cwd=REPO_ROOT,
            env=cli.environment(),
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.write(main, b"n\n")
        out, err = process.communicate(timeout=CLI_TIMEOUT_SECONDS)
    finally:
        os.close(main)
        os.close(terminal)
    done = Done(("runs", "prune"), process.returncode, out, err)

    assert done.code == EXIT_ABORTED, done.stderr
    assert reason_line(done) == "Aborted!"
    assert "Delete" in done.stdout  # the question it asked


@pytest.mark.parametrize("kind", [(), ("--async",)], ids=["sync", "async"])
def test_draining_an_unreachable_backend_exits_4_naming_the_endpoint(
    cli: Cli, kind: tuple[str, ...]
) -> None:
    endpoint, unreachable = unreachable_backend()

    done = cli("worker", "--drain", *kind, env=unreachable)

    assert done.code == EXIT_BACKEND, f"exited {done.code}:\n{done.stderr}"
    reason = reason_line(done)
    assert endpoint in reason and "SQS" in reason
    assert "executed" not in done.stdout


def test_a_worker_without_drain_keeps_retrying_an_unreachable_backend(cli: Cli) -> None:
    _, unreachable = unreachable_backend()
    worker = cli.start("worker", env=unreachable)

    def failed_twice() -> bool:
        assert worker.alive(), f"worker exited:\n{worker.stderr()}"
        return worker.stderr().count("receive from 'default' failed") >= 2

    wait_until(failed_twice, CLI_TIMEOUT_SECONDS, "two failed receives")
    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(timeout=CLI_TIMEOUT_SECONDS) == 0, worker.stderr()


def test_the_async_worker_without_its_extra_says_what_to_install(
    cli: Cli, provisioned: dict[str, str], tmp_path: Path
) -> None:
    hidden = tmp_path / "without-aioboto3" / "aioboto3"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'aioboto3'\", name='aioboto3')\n"
    )
    path = os.pathsep.join([str(hidden.parent), provisioned["PYTHONPATH"]])

    done = cli("worker", "--async", "--drain", env={"PYTHONPATH": path})

    assert done.code == EXIT_APP_NOT_IMPORTABLE, f"exited {done.code}:\n{done.stderr}"
    assert "pip install 'runlane-sqs[async]'" in reason_line(done)
