"""Concurrency limits from the command line: ``queues list`` shows each limit's scope with
the slots held and the runs waiting for one (the app's queues and limits given the app;
without it the active scopes and their stored limits, marked), ``--json`` prints the
same as one document, stored key names are shown escaped, and errors are the other
commands' errors."""

from __future__ import annotations

import re

import pytest

from runlane_sqs import Runlane, RunStatus
from runlane_sqs.core.model import Slot
from runlane_sqs.core.slots import key_scope, queue_scope
from tests.behaviour.worker_support import claim_elsewhere
from tests.processes.cli.apps.queues_app import (
    APP_SPEC,
    BILLING,
    BILLING_LIMIT,
    INVOICES,
    KEY_LIMIT,
    KEYED,
    TASK,
    build,
)
from tests.processes.cli.conftest import Cli, Done, unreachable_backend

EXIT_APP_NOT_IMPORTABLE = 3
EXIT_BACKEND = 4
NO_APP = "RUNLANE_APP"
BILLING_SCOPE = queue_scope(BILLING)
INVOICES_SCOPE = queue_scope(INVOICES)
ACME_SCOPE = key_scope(KEYED, "acme")
STORED_NOTE = "(stored): the limit of the last claim that took a slot"
MARKUP_KEY = "[bold red]acme[/] [link=http://x]y"
"""A key rich would read as markup: a key may hold it (only control, format and
separator characters are refused)."""
HOSTILE_KEY = "boom \x1b[2J\x1b]0;pwned\x07 \u202e"
"""Clears the screen, retitles the window, reverses the text after it. No trigger can
give such a key; a record written outside this library's checks (an older version, a
hand-made item) can hold one."""
RAW = ("\x1b", "\x07", "\u202e")
ESCAPED = r"boom \x1b[2J\x1b]0;pwned\x07 \u202e"


@pytest.fixture
def app(provisioned: dict[str, str]) -> Runlane:
    """The limited app, in this process, on the test's table (its queues provisioned)."""
    built = build()
    built.provision()
    return built


@pytest.fixture
def app_cli(cli: Cli, app: Runlane) -> Cli:
    """The CLI with the limited app as ``RUNLANE_APP``."""
    runner = Cli({**cli.env, NO_APP: APP_SPEC}, cli.log_dir)
    runner.started = cli.started
    return runner


def held_and_waiting(app: Runlane, app_cli: Cli) -> None:
    """``billing`` with its one slot held by another worker and a second run waiting
    for it (a worker drained the queue), and one of ``acme``'s two key slots held."""
    first, second = app.trigger(TASK, 1), app.trigger(TASK, 2)
    keyed = app.trigger(KEYED, {"customer": "acme"})
    claim_elsewhere(app, first.id)
    claim_elsewhere(app, keyed.id)
    drained = app_cli.ok("worker", "--drain", "--queue", BILLING)
    assert drained.stdout.strip() == "executed 0 run(s)"  # the second finds the slot held
    waiting = app.runs.get(second.id)
    assert (waiting.status, waiting.attempt) == (RunStatus.QUEUED, 0)
    assert waiting.slot_wait == BILLING_SCOPE


def occupancy(
    scope: str, limit: int | None, stored: int | None, holding: int, waiting: int
) -> dict[str, object]:
    """The JSON of one scope (written out here, not by the library)."""
    kind, _, name = scope.partition("#")
    return {
        "scope": scope,
        "kind": kind,
        "name": name,
        "limit": limit,
        "stored_limit": stored,
        "holding": holding,
        "waiting": waiting,
    }


def table_rows(done: Done) -> dict[str, list[str]]:
    """The rows of ``queues list`` by name: their cells (split at two or more spaces)."""
    assert done.code == 0, f"{done.args} exited {done.code}:\n{done.stderr}"
    rows: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        found = re.split(r"\s{2,}", line.strip())
        if found[0] in ("queue", "key") and len(found) == 5:
            rows[found[1]] = found[2:]
    return rows


def test_a_limited_queue_shows_its_holder_and_its_waiting_run(app: Runlane, app_cli: Cli) -> None:
    held_and_waiting(app, app_cli)

    listed, table = app_cli.many([("queues", "list", "--json"), ("queues", "list")])

    assert listed.json() == [
        occupancy(ACME_SCOPE, KEY_LIMIT, KEY_LIMIT, 1, 0),
        occupancy(BILLING_SCOPE, BILLING_LIMIT, BILLING_LIMIT, 1, 1),
        occupancy(INVOICES_SCOPE, None, None, 0, 0),  # defined by the app, unlimited
    ]
    assert table.stdout.splitlines()[0] == "3 scope(s), by scope"
    assert table_rows(table) == {
        f"{KEYED}#acme": [str(KEY_LIMIT), "1", "0"],
        BILLING: [str(BILLING_LIMIT), "1", "1"],
        INVOICES: ["none", "0", "0"],
    }
    assert STORED_NOTE not in table.stdout  # every limit shown is the app's
    header = re.split(r"\s{2,}", table.stdout.splitlines()[1].strip())
    assert header == ["kind", "name", "limit", "holding", "waiting"]

    narrow = app_cli.ok("queues", "list", env={"COLUMNS": "40"}).stdout
    assert re.split(r"\s+", narrow.splitlines()[1].strip()) == [
        "name",
        "limit",
        "holding",
        "waiting",
    ]  # the kind gives way first
    assert all(len(line) <= 40 for line in narrow.splitlines()), narrow  # names fold


def test_without_the_app_the_active_scopes_show_their_stored_limits_marked(
    app: Runlane, app_cli: Cli
) -> None:
    held_and_waiting(app, app_cli)
    operator = app_cli.without(NO_APP)  # occupancy is read from storage

    listed, table = operator.many([("queues", "list", "--json"), ("queues", "list")])

    assert listed.json() == [
        occupancy(ACME_SCOPE, None, KEY_LIMIT, 1, 0),
        occupancy(BILLING_SCOPE, None, BILLING_LIMIT, 1, 1),
    ]  # no code: only the scopes with holders or waiters
    assert table.stdout.splitlines()[0] == "2 scope(s), by scope"
    assert table_rows(table) == {
        f"{KEYED}#acme": [f"{KEY_LIMIT} (stored)", "1", "0"],
        BILLING: [f"{BILLING_LIMIT} (stored)", "1", "1"],
    }
    assert table.stdout.rstrip().splitlines()[-1].startswith(STORED_NOTE)


def test_the_apps_queues_are_listed_before_any_slot_is_taken(app: Runlane, app_cli: Cli) -> None:
    operator = app_cli.without(NO_APP)

    with_app, table, without_app, nothing = operator.many(
        [
            ("queues", "list", "--json", "--app", APP_SPEC),
            ("queues", "list", "--app", APP_SPEC),
            ("queues", "list", "--json"),
            ("queues", "list"),
        ]
    )

    assert with_app.json() == [
        occupancy(BILLING_SCOPE, BILLING_LIMIT, None, 0, 0),
        occupancy(INVOICES_SCOPE, None, None, 0, 0),
    ]
    assert table_rows(table) == {
        BILLING: [str(BILLING_LIMIT), "0", "0"],
        INVOICES: ["none", "0", "0"],
    }
    assert without_app.json() == []  # no code and no slot taken: nothing to list
    assert nothing.code == 0, nothing.stderr
    assert nothing.stdout.splitlines()[0] == "0 scope(s), by scope"
    assert STORED_NOTE not in nothing.stdout


def test_key_names_with_markup_and_terminal_commands_are_shown_escaped(
    app: Runlane, app_cli: Cli
) -> None:
    markup = app.trigger(KEYED, {"customer": MARKUP_KEY})
    claim_elsewhere(app, markup.id)
    hostile = app.trigger(KEYED, {"customer": "globex"})
    claim_elsewhere(app, hostile.id, slots=(Slot(key_scope(KEYED, HOSTILE_KEY), KEY_LIMIT),))
    operator = app_cli.without(NO_APP)

    listed, table, with_app = operator.many(
        [
            ("queues", "list", "--json"),
            ("queues", "list"),
            ("queues", "list", "--app", APP_SPEC),
        ]
    )

    names = [o["name"] for o in listed.json()]
    assert names == [f"{KEYED}#{MARKUP_KEY}", f"{KEYED}#{HOSTILE_KEY}"]  # --json stays exact
    assert "\\u001b[2J" in listed.stdout  # JSON escapes the controls itself
    for done in (table, with_app):
        assert done.code == 0, done.stderr
        assert not any(char in done.stdout for char in RAW), ascii(done.stdout)
        rows = table_rows(done)
        assert f"{KEYED}#{ESCAPED}" in rows, done.stdout
        assert f"{KEYED}#{MARKUP_KEY}" in rows, done.stdout  # printed, never read as markup
    assert table_rows(with_app)[f"{KEYED}#{ESCAPED}"] == [str(KEY_LIMIT), "1", "0"]


def _fails(cli: Cli, code: int, *args: str, env: dict[str, str] | None = None) -> str:
    done = cli(*args, env=env)
    assert done.code == code, f"{args} exited {done.code}, not {code}:\n{done.stderr}"
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    return done.stderr


def test_errors_are_the_other_commands_errors(cli: Cli) -> None:
    operator = cli.without(NO_APP)
    for runner in (cli, operator):
        for listing in (("queues", "list"), ("queues", "list", "--json")):
            message = _fails(runner, EXIT_BACKEND, *listing)
            assert message.startswith("error: ") and "does not exist" in message, message
            assert "hint: create it with `runlane-sqs provision`" in message

    message = _fails(cli, EXIT_APP_NOT_IMPORTABLE, "queues", "list", "--app", "no_such_mod:app")
    assert "cannot import 'no_such_mod'" in message
    bad = {"RUNLANE_ENVIRONMENT": "Not Valid"}
    message = _fails(operator, EXIT_APP_NOT_IMPORTABLE, "queues", "list", env=bad)
    assert "cannot build an app from the environment" in message
    endpoint, unreachable = unreachable_backend()
    message = _fails(operator, EXIT_BACKEND, "queues", "list", "--json", env=unreachable)
    assert f"cannot reach DynamoDB at {endpoint}" in message


def test_a_worker_consumes_weighted_queues_and_refuses_a_bad_weight(
    app: Runlane, app_cli: Cli
) -> None:
    runs = [app.trigger(TASK, n) for n in range(2)]
    runs += [app.trigger(KEYED, {"customer": f"c-{n}"}) for n in range(2)]

    drained = app_cli.ok("worker", "--drain", "--queues", f"{INVOICES}=3,{BILLING}")

    assert drained.stdout.strip() == "executed 4 run(s)"
    assert all(app.runs.get(run.id).status is RunStatus.SUCCEEDED for run in runs)
    for weights, said in [
        (f"{INVOICES}=three", f"queue '{INVOICES}' has weight 'three', not a number"),
        (f"{INVOICES}=0", "a weight is from 1 to 100, not 0"),
        (f",{BILLING}", "an empty queue name"),
    ]:
        refused = app_cli("worker", "--drain", "--queues", weights)
        assert refused.code == 2, refused.stderr
        assert said in refused.stderr
