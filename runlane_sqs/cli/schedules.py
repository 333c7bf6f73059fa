"""Schedule commands: ``schedules list|get|pause|resume|trigger``.

Schedules are read from storage, so every command works without an app
(``app_or_env_for_command``); given the app, ``get`` also finds a schedule it defines that no
maintenance pass has stored yet. An id that no schedule can have is a usage error.
"""

from __future__ import annotations

from collections.abc import Sequence

import click
from rich.table import Table
from rich.text import Text

from runlane_sqs.api.shapes import iso, run_to_json, schedule_to_json
from runlane_sqs.cli import tables
from runlane_sqs.cli.escaping import echo, printable
from runlane_sqs.cli.options import (
    app_or_env_for_command,
    emit_json,
    json_option,
    optional_app_option,
    quoted_value,
)
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.schedule_state import ScheduleState
from runlane_sqs.core.schedules import check_schedule_id

SCHEDULE_COLUMNS = ("id", "task", "status", "definition", "next", "last", "runs")
"""The columns of ``schedules list``, left to right."""
SCHEDULE_NARROW_DROPS = ("last", "task")
"""What ``schedules list`` leaves out, in this order, while the table is wider than the
console; past that the definition folds onto more lines. The id, the status, the next
occurrence and the runs count always stay whole."""
SCHEDULE_FOLDING_COLUMNS = frozenset({"task", "definition"})
SCHEDULES = tables.Listing(
    SCHEDULE_COLUMNS, SCHEDULE_NARROW_DROPS, SCHEDULE_FOLDING_COLUMNS, frozenset({"runs"})
)
SCHEDULE_STYLES = {
    "active": "green",
    "paused": "bold yellow",
    "finished": "white",
    "removed": "red",
}
ID_RULE = "letters, digits, '.', ':', '-' and '_', at most 128 characters"


def parse_schedule_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Callback of schedule id arguments and options: an id no schedule can have
    (``#``, markup, control characters, too long) is a usage error, quoted escaped."""
    if value is None:
        return None
    try:
        return check_schedule_id(value)
    except ConfigurationError:
        raise click.BadParameter(
            f"{printable(quoted_value(value))} is not a schedule id ({ID_RULE})", ctx, param
        ) from None


def _status(status: str) -> Text:
    return Text(printable(status), style=SCHEDULE_STYLES.get(status, ""))


def _schedule_row(state: ScheduleState) -> dict[str, str | Text]:
    upcoming = state.upcoming(1)
    return {
        "id": state.id,
        "task": state.schedule.task or "",
        "status": _status(state.status.value),
        "definition": state.schedule.describe(),
        "next": iso(upcoming[0] if upcoming else None) or "",
        "last": iso(state.last_at) or "",
        "runs": str(state.runs),
    }


def print_schedules(states: Sequence[ScheduleState]) -> None:
    """Every schedule, one row each (``next`` is empty unless it is active); at narrow
    widths the columns in ``SCHEDULE_NARROW_DROPS`` give way."""
    out = tables.stdout_console()
    table = SCHEDULES.fit([_schedule_row(state) for state in states], out)
    tables.show(f"{len(states)} schedule(s), by id", table, out)


def print_schedule(state: ScheduleState) -> None:
    """One schedule as a field/value table (empty fields left out), its upcoming
    occurrences on one line."""
    table = Table(show_header=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, value in schedule_to_json(state).items():
        if isinstance(value, list):
            shown: str | Text = ", ".join(str(v) for v in value) or "none"
        elif value is None or value == "":
            continue
        elif name == "status":
            shown = _status(str(value))
        else:
            shown = value if isinstance(value, str) else tables.compact(value)
        table.add_row(*tables.cells(name, shown))
    tables.show(f"schedule {state.id}", table)


def _emit_schedule(state: ScheduleState, as_json: bool) -> None:
    if as_json:
        emit_json(schedule_to_json(state))
    else:
        print_schedule(state)


def _emit_status(state: ScheduleState, as_json: bool) -> None:
    if as_json:
        emit_json(schedule_to_json(state))
    else:
        echo(f"schedule {state.id} is {state.status.value}")


schedule_argument = click.argument("schedule_id", callback=parse_schedule_id)


@click.group()
def schedules() -> None:
    """Read, pause, resume and trigger the environment's stored schedules."""


@schedules.command("list")
@optional_app_option
@json_option
def list_schedules(app_spec: str | None, as_json: bool) -> None:
    """List every stored schedule by id: task, status, definition, next and last
    occurrence, runs created."""
    found = app_or_env_for_command(app_spec).schedules.list()
    if as_json:
        emit_json([schedule_to_json(state) for state in found])
    else:
        print_schedules(found)


@schedules.command("get")
@optional_app_option
@schedule_argument
@json_option
def show_schedule(app_spec: str | None, schedule_id: str, as_json: bool) -> None:
    """Show one schedule: every field and its next three occurrences."""
    _emit_schedule(app_or_env_for_command(app_spec).schedules.get(schedule_id), as_json)


@schedules.command()
@optional_app_option
@schedule_argument
@json_option
def pause(app_spec: str | None, schedule_id: str, as_json: bool) -> None:
    """Stop a schedule creating runs until it is resumed (a paused one stays paused)."""
    _emit_status(app_or_env_for_command(app_spec).schedules.pause(schedule_id), as_json)


@schedules.command("resume")
@optional_app_option
@schedule_argument
@json_option
def resume_schedule(app_spec: str | None, schedule_id: str, as_json: bool) -> None:
    """Make a paused schedule create runs again; what it missed follows its catch-up
    policy at the next maintenance pass."""
    _emit_status(app_or_env_for_command(app_spec).schedules.resume(schedule_id), as_json)


@schedules.command("trigger")
@optional_app_option
@schedule_argument
@json_option
def trigger_schedule(app_spec: str | None, schedule_id: str, as_json: bool) -> None:
    """Create an extra run of the schedule's task now, with its payload and linked to it
    (its next occurrence does not move); prints the run id."""
    run = app_or_env_for_command(app_spec).schedules.trigger_now(schedule_id)
    if as_json:
        emit_json(run_to_json(run))
    else:
        echo(run.id)
