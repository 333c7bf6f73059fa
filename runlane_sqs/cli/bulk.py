"""Bulk commands: ``runs bulk retry|cancel|rerun`` (count, confirm, start and carry out
an operation), ``runs bulk status|list|resume|stop`` (``app.bulk``; docs/operations.md,
"Bulk recovery").

They work without an app (``app_or_env_for_command``): an operation reads and writes
stored runs only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import click

from runlane_sqs.api.app import Runlane
from runlane_sqs.api.bulk import BulkCount
from runlane_sqs.cli import tables
from runlane_sqs.cli.escaping import echo
from runlane_sqs.cli.options import (
    actor_or_user,
    app_or_env_for_command,
    emit_json,
    json_option,
    optional_app_option,
    parse_iso_time,
    parse_tag_options,
)
from runlane_sqs.cli.schedules import parse_schedule_id
from runlane_sqs.core.bulk import DEFAULT_RATE, MAX_BULK_RATE, BulkAction, BulkFilter, BulkOperation
from runlane_sqs.core.model import RunStatus

F = TypeVar("F", bound=Callable[..., Any])
OPERATIONS = tables.Listing(
    ("id", "action", "status", "selected", "acted", "skipped", "failed", "actor", "updated"),
    ("updated", "actor", "skipped"),
    frozenset(),
    frozenset({"selected", "acted", "skipped", "failed"}),
)

DONE_AS = {BulkAction.RETRY: "retried", BulkAction.CANCEL: "cancelled", BulkAction.RERUN: "rerun"}


@click.group()
def bulk() -> None:
    """Retry, cancel or rerun every run a filter selects, as one durable operation."""


def _filter_options(fn: F) -> F:
    options = [
        click.option(
            "--status",
            "statuses",
            multiple=True,
            type=click.Choice([s.value for s in RunStatus]),
            help="Repeatable; default: every status the action acts on.",
        ),
        click.option("--task", help="Only runs of this task."),
        click.option("--queue", help="Only runs on this queue."),
        click.option("--schedule", callback=parse_schedule_id, help="Only runs it made."),
        click.option(
            "--since",
            "--created-after",
            "created_after",
            callback=parse_iso_time,
            metavar="ISO-TIME",
            help="Only runs created at or after it (UTC if no offset).",
        ),
        click.option(
            "--until",
            "--created-before",
            "created_before",
            callback=parse_iso_time,
            metavar="ISO-TIME",
            help="Only runs created at or before it (UTC if no offset).",
        ),
        click.option(
            "--group",
            metavar="GROUP_OR_RUN_ID",
            help="Only the children of this group (or of this parent run's groups).",
        ),
        click.option(
            "--failure-type",
            help="Only runs whose failure is of this type (qualified, or its last part).",
        ),
        click.option(
            "--tag",
            "tags",
            multiple=True,
            callback=parse_tag_options,
            help="Only runs with this tag, key=value (repeatable: every one).",
        ),
        click.option(
            "--rate",
            type=click.FloatRange(0, MAX_BULK_RATE, min_open=True),
            default=DEFAULT_RATE,
            show_default=True,
            help="Runs acted on a second.",
        ),
        click.option("--dry-run", is_flag=True, help="Count the runs selected; change nothing."),
        click.option("--yes", is_flag=True, help="Do not ask for confirmation."),
        click.option("--reason", default="", help="Why; recorded in each run's history."),
        click.option(
            "--actor", default=None, help="Who; recorded in history (default: your user name)."
        ),
        json_option,
        optional_app_option,
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _action_command(action: BulkAction, summary: str) -> None:
    @bulk.command(action.value, help=summary)
    @_filter_options
    def command(
        app_spec: str | None,
        statuses: tuple[str, ...],
        task: str | None,
        queue: str | None,
        schedule: str | None,
        created_after: datetime | None,
        created_before: datetime | None,
        group: str | None,
        failure_type: str | None,
        tags: dict[str, str],
        rate: float,
        dry_run: bool,
        yes: bool,
        reason: str,
        actor: str | None,
        as_json: bool,
    ) -> None:
        app = app_or_env_for_command(app_spec)
        selection = BulkFilter(
            statuses=tuple(RunStatus(s) for s in statuses),
            task=task,
            queue=queue,
            created_after=created_after,
            created_before=created_before,
            schedule=schedule,
            group=group,
            failure_type=failure_type,
            tags=tuple(tags.items()),
        )
        counted = app.bulk.count(action, selection)
        if dry_run:
            _emit_count(counted, as_json)
            return
        if not yes:
            _confirm(counted)
        operation = app.bulk.start(
            action,
            selection,
            actor=actor_or_user(actor),
            reason=reason,
            rate=rate,
            counted=counted,
        )
        _carry_out(app, operation, as_json, lambda o: app.bulk.run(o.id, progress=_progress))


_action_command(
    BulkAction.RETRY, "A new run of each failed run selected (skipping those retried already)."
)
_action_command(BulkAction.CANCEL, "Cancel each unfinished run selected.")
_action_command(BulkAction.RERUN, "A new run of each finished run selected.")


@bulk.command("status")
@optional_app_option
@click.argument("operation_id")
@json_option
def show_operation(app_spec: str | None, operation_id: str, as_json: bool) -> None:
    """Show an operation: its filter, where it is and what it did."""
    operation = app_or_env_for_command(app_spec).bulk.get(operation_id)
    _emit(operation, as_json)


@bulk.command("list")
@optional_app_option
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100))
@click.option("--cursor", help="Continue from a previous page.")
@json_option
def list_operations(app_spec: str | None, limit: int, cursor: str | None, as_json: bool) -> None:
    """List operations, newest first."""
    page = app_or_env_for_command(app_spec).bulk.list(limit=limit, cursor=cursor)
    if as_json:
        emit_json({"operations": [o.to_json() for o in page.operations], "cursor": page.cursor})
        return
    out = tables.stdout_console()
    rows = [_row(o) for o in page.operations]
    tables.show(f"{len(rows)} bulk operation(s)", OPERATIONS.fit(rows, out), out)
    if page.cursor:
        echo(f"next page: --cursor {page.cursor}")


@bulk.command("resume")
@optional_app_option
@click.argument("operation_id")
@click.option(
    "--force",
    is_flag=True,
    help="Take it over although its lease lasts (its process is known to be gone).",
)
@json_option
def resume_operation(app_spec: str | None, operation_id: str, force: bool, as_json: bool) -> None:
    """Carry on a stopped operation, or one whose process died, from its last page."""
    app = app_or_env_for_command(app_spec)
    operation = app.bulk.get(operation_id)
    _carry_out(
        app,
        operation,
        as_json,
        lambda o: app.bulk.run(o.id, force=force, progress=_progress),
    )


@bulk.command("stop")
@optional_app_option
@click.argument("operation_id")
@json_option
def stop_operation(app_spec: str | None, operation_id: str, as_json: bool) -> None:
    """Stop an operation after the page it is acting on; resume carries it on."""
    _emit(app_or_env_for_command(app_spec).bulk.stop(operation_id), as_json)


def _carry_out(
    app: Runlane,
    operation: BulkOperation,
    as_json: bool,
    run: Callable[[BulkOperation], BulkOperation],
) -> None:
    echo(
        f"bulk operation {operation.id}: {operation.action.value} at {operation.rate:g}/s", err=True
    )
    echo(f"(stop it with: runs bulk stop {operation.id})", err=True)
    _emit(run(operation), as_json)


def _progress(operation: BulkOperation) -> None:
    echo(_summary(operation), err=True)


def _summary(operation: BulkOperation) -> str:
    tally, total = operation.tally, operation.selected_at_start
    of = f" of {total}" if total is not None else ""
    return (
        f"{operation.id} {operation.status.value}: {tally.selected}{of} examined, "
        f"{tally.acted} {DONE_AS[operation.action]}, {tally.skipped} skipped, "
        f"{tally.failed} failed"
    )


def _emit(operation: BulkOperation, as_json: bool) -> None:
    if as_json:
        emit_json(operation.to_json())
        return
    echo(_summary(operation))
    if operation.last_error:
        echo(f"last error: {operation.last_error}")


def _emit_count(counted: BulkCount, as_json: bool) -> None:
    if as_json:
        emit_json(
            {
                "action": counted.action.value,
                "filter": counted.filter.to_json(),
                "selected": counted.selected,
                "examined": counted.examined,
            }
        )
    else:
        echo(f"{counted.action.value} would act on {counted.selected} run(s)")


def _confirm(counted: BulkCount) -> None:
    if not sys.stdin.isatty():
        raise click.UsageError(
            f"runs bulk {counted.action.value} changes {counted.selected} run(s) and there is "
            "no terminal to confirm on; pass --yes (or --dry-run to count them)"
        )
    click.confirm(f"{counted.action.value.capitalize()} {counted.selected} run(s)?", abort=True)


def _row(operation: BulkOperation) -> dict[str, Any]:
    tally = operation.tally
    return {
        "id": operation.id,
        "action": operation.action.value,
        "status": tables.status_text(operation.status.value),
        "selected": "" if operation.selected_at_start is None else str(operation.selected_at_start),
        "acted": str(tally.acted),
        "skipped": str(tally.skipped),
        "failed": str(tally.failed),
        "actor": operation.actor,
        "updated": operation.updated_at.isoformat(timespec="seconds"),
    }
