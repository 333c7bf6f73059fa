"""``runlane-sqs health``: what the console's runs and health pages show, as text or
JSON (``app.health``: bounded reads, docs/operations.md "Reading health").

Exits 0 when maintenance is keeping up, and ``EXIT_UNHEALTHY`` (9) when its last pass is
stale or no pass has finished, so a script or a scheduled check can alert on it.
"""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from runlane_sqs.api.health import Health
from runlane_sqs.cli import tables
from runlane_sqs.cli.escaping import printable
from runlane_sqs.cli.exits import EXIT_UNHEALTHY
from runlane_sqs.cli.options import (
    app_or_env_for_command,
    emit_json,
    json_option,
    optional_app_option,
)
from runlane_sqs.core.health import GROUPS, Activity


def _cell(value: int | None) -> str:
    return "-" if value is None else str(value)


def print_health(health: Health, activity: Activity) -> None:
    out = tables.stdout_console()
    last = health.last_pass
    if last is None:
        out.print(Text("last pass: none has finished", style="bold red"))
    else:
        figures = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in last.counts.items())
        line = f"last pass {last.pass_id} finished {last.finished_at.isoformat()}: {figures}"
        out.print(Text(printable(line)), soft_wrap=True)
        if health.stale:
            out.print(Text("stale: no pass in the last three maintenance periods", "bold red"))
    out.print(Text(f"overdue runs: {health.overdue}"))
    window = "" if activity.complete else f" (from {activity.covered_from.isoformat()})"
    counts = ", ".join(f"{group} {activity.counts[group]}" for group in GROUPS)
    out.print(Text(f"created in the last hour{window}: {counts}"), soft_wrap=True)
    out.print(Text(f"unfinished of any age: {activity.unfinished}, parked: {activity.parked}"))
    table = Table()
    for column in ("queue", "waiting", "delayed", "in flight", "dead letters", "problem"):
        table.add_column(column)
    for queue in health.queues:
        backlog = queue.backlog
        table.add_row(
            *tables.cells(
                queue.name,
                _cell(backlog.visible if backlog else None),
                _cell(backlog.delayed if backlog else None),
                _cell(backlog.in_flight if backlog else None),
                _cell(queue.dead_letters),
                queue.problem or "",
            )
        )
    tables.show(f"{len(health.queues)} queue(s) the app defines", table, out)


@click.command()
@optional_app_option
@json_option
def health(app_spec: str | None, as_json: bool) -> None:
    """Show the last maintenance pass, the overdue runs, the runs of the last hour by
    status and each queue's messages; exit 9 when maintenance is stale."""
    app = app_or_env_for_command(app_spec)
    checked, activity = app.health.check(), app.health.activity()
    if as_json:
        emit_json({**checked.to_json(), "activity": activity.to_json()})
    else:
        print_health(checked, activity)
    if checked.stale:
        raise click.exceptions.Exit(EXIT_UNHEALTHY)
