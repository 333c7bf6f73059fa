"""Tags from the command line (docs/tags.md): ``trigger --tag``, ``runs list --tag``
with cursors, ``runs get`` showing them, and a hostile tag refused as a usage error."""

from __future__ import annotations

from tests.processes.cli.apps.names import ECHO
from tests.processes.cli.conftest import Cli

EXIT_USAGE = 2


def test_runs_are_tagged_and_listed_by_tag_newest_first_with_cursors(cli: Cli) -> None:
    cli.ok("provision")
    made = cli.many(
        [
            ("trigger", ECHO, "--tag", f"customer=c{n % 3}", "--tag", f"order={n}", "--json")
            for n in range(9)
        ]
    )
    runs = [done.json() for done in made]
    assert all(
        run["tags"] == {"customer": run["tags"]["customer"], "order": run["tags"]["order"]}
        for run in runs
    )
    c1 = {run["id"]: run for run in runs if run["tags"]["customer"] == "c1"}

    listed, cursor = [], None
    while True:
        args = ("runs", "list", "--tag", "customer=c1", "--limit", "2", "--json")
        page = cli.ok(*args, *(("--cursor", cursor) if cursor else ())).json()
        listed += page["runs"]
        cursor = page["cursor"]
        if cursor is None:
            break

    assert [run["id"] for run in listed] == sorted(
        c1, key=lambda i: (c1[i]["created_at"], i), reverse=True
    )
    both = cli.ok("runs", "list", "--tag", "customer=c1", "--tag", "order=4", "--json").json()
    assert [run["tags"] for run in both["runs"]] == [{"customer": "c1", "order": "4"}]

    shown = cli.ok("runs", "get", listed[0]["id"]).stdout
    assert "customer=c1" in shown and f"order={listed[0]['tags']['order']}" in shown

    counted = cli.ok("runs", "bulk", "cancel", "--tag", "customer=c1", "--dry-run", "--json").json()
    assert counted["selected"] == len(c1)  # queued: no worker ran
    assert counted["filter"]["tags"] == {"customer": "c1"}


def test_a_hostile_tag_is_a_usage_error_naming_it(cli: Cli) -> None:
    refused = cli("trigger", ECHO, "--tag", "customer=<script>")
    assert refused.code == EXIT_USAGE
    assert "tag 'customer'" in refused.stderr and "markup" in refused.stderr
    listed = cli("runs", "list", "--tag", "customer")
    assert listed.code == EXIT_USAGE and "key=value" in listed.stderr
