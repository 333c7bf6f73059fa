"""``runs bulk`` from the command line, against the moto server: a dry run counts the
failed runs a filter selects; without a terminal the command asks for ``--yes``; the
process carrying out a bulk retry is SIGKILLed mid-way, its progress stays readable
(``runs bulk status``, ``runs bulk list``), another process may take it over only when
told its holder is gone, and the resumed operation retries every run exactly once.
Malformed and unknown operation ids are refused with their own exit codes."""

from __future__ import annotations

import json
import re
import signal

from runlane_sqs import EventType, Runlane
from tests.processes.cli.apps.names import CHARGE, FAIL_ENV
from tests.processes.cli.conftest import Cli, wait_until

RUNS = 60
EXIT_USAGE = 2
EXIT_NOT_FOUND = 5
EXIT_ILLEGAL = 6


def test_a_bulk_retry_survives_the_kill_of_its_process_and_retries_each_run_once(
    cli: Cli, provisioned: dict[str, str]
) -> None:
    from tests.processes.cli.apps.shop import app as shop  # noqa: PLC0415 (needs the backend)

    sources = shop.trigger_many(CHARGE, [{"amount": n} for n in range(RUNS)])
    cli.ok("worker", "--drain", "--concurrency", "4", env={FAIL_ENV: "1"})
    filters = ("--task", CHARGE, "--status", "failed")
    counted = cli.ok("runs", "bulk", "retry", *filters, "--dry-run", "--json").json()
    assert (counted["selected"], counted["examined"]) == (RUNS, RUNS)
    unconfirmed = cli("runs", "bulk", "retry", *filters)
    assert unconfirmed.code == EXIT_USAGE and "pass --yes" in unconfirmed.stderr

    started = cli.start(
        "runs", "bulk", "retry", *filters, "--yes", "--rate", "10", "--reason", "card fixed"
    )
    wait_until(lambda: " 25 retried" in started.stderr(), 30, "the first page to be retried")
    started.process.send_signal(signal.SIGKILL)
    started.process.wait(timeout=10)
    found = re.search(r"bulk operation (\S+): retry at 10/s", started.stderr())
    assert found is not None, started.stderr()
    operation_id = found.group(1)

    left = cli.ok("runs", "bulk", "status", operation_id, "--json").json()
    assert left["status"] == "running" and left["owner"]
    assert 25 <= left["tally"]["acted"] < RUNS and left["selected_at_start"] == RUNS
    listed = cli.ok("runs", "bulk", "list").stdout
    assert operation_id in listed and "running" in listed
    held = cli("runs", "bulk", "resume", operation_id)
    assert held.code == EXIT_ILLEGAL and "being carried out by" in held.stderr

    done = cli.ok("runs", "bulk", "resume", operation_id, "--force", "--json").json()

    assert done["status"] == "done"
    assert (done["tally"]["acted"], done["tally"]["skipped"], done["tally"]["failed"]) == (
        RUNS,
        0,
        0,
    )
    app = Runlane.from_env()
    for source in sources:
        links = [e for e in app.runs.events(source.id) if e.type is EventType.LINKED_RUN]
        assert [(e.data["operation"], e.data["reason"]) for e in links] == [
            (operation_id, "card fixed")
        ]
    queued = app.runs.list(status="queued", task=CHARGE, limit=100).runs
    assert len(queued) == RUNS  # one retry each
    assert cli.ok("worker", "--drain", "--concurrency", "4").stdout.strip() == (
        f"executed {RUNS} run(s)"
    )
    again = cli.ok("runs", "bulk", "retry", *filters, "--yes", "--json").json()
    assert (again["tally"]["acted"], again["tally"]["skipped"]) == (0, RUNS)
    assert (
        json.loads(cli.ok("runs", "bulk", "list", "--json").stdout)["operations"][0]["id"]
        == again["id"]
    )


def test_bad_operation_ids_and_filters_are_refused(cli: Cli, provisioned: dict[str, str]) -> None:
    hostile = cli("runs", "bulk", "status", "\u202e<b>op</b>")
    assert hostile.code == EXIT_USAGE and "is not a bulk operation id" in hostile.stderr
    assert "\u202e" not in hostile.stderr
    missing = cli("runs", "bulk", "status", "20261205T120000-1a2b3c4d")
    assert missing.code == EXIT_NOT_FOUND and "no bulk operation" in missing.stderr
    refused = cli("runs", "bulk", "retry", "--status", "queued", "--dry-run")
    assert refused.code != 0 and "retry acts on runs that are failed" in refused.stderr
    bad_rate = cli("runs", "bulk", "cancel", "--rate", "0", "--dry-run")
    assert bad_rate.code == EXIT_USAGE
