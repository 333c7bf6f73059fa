"""Task commands: ``tasks list`` and ``tasks show NAME [--schema]``: the app's tasks with
their queues and the types their payloads and results are validated against
(docs/typed-tasks.md). Both read the app's code, so they need the app (``--app``)."""

from __future__ import annotations

import click
from rich.table import Table

from runlane_sqs.cli import tables
from runlane_sqs.cli.escaping import echo
from runlane_sqs.cli.exits import EXIT_USAGE, fail
from runlane_sqs.cli.options import app_for_command, app_option, emit_json, json_option
from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.core.model import JSON
from runlane_sqs.engine.tasks import Task

NEEDS_TASKS = "listing tasks reads the app's code: pass --app or set RUNLANE_APP"


def task_to_json(task: Task, *, schemas: bool = False) -> dict[str, JSON]:
    """A task as ``tasks list --json`` and ``tasks show --json`` print it."""
    shown: dict[str, JSON] = {
        "name": task.name,
        "queue": task.queue,
        "async": task.is_async,
        "types": dict(task.types.names()),
    }
    if schemas:
        shown["schemas"] = task.types.schemas()
    return shown


@click.group()
def tasks() -> None:
    """The app's tasks and the types of their payloads and results."""


@tasks.command("list")
@app_option
@json_option
def list_tasks(app_spec: str | None, as_json: bool) -> None:
    """Every task the app registers: its queue and its payload and result types."""
    app = app_for_command(app_spec, NEEDS_TASKS)
    registered = [app.tasks.resolve(name) for name in app.tasks.names()]
    if as_json:
        emit_json([task_to_json(task) for task in registered])
        return
    table = Table("task", "queue", "payload", "result")
    for task in registered:
        names = task.types.names()
        table.add_row(*tables.cells(task.name, task.queue, names["payload"], names["result"]))
    tables.show(f"{len(registered)} task(s)", table)


@tasks.command("show")
@app_option
@click.argument("name")
@click.option("--schema", is_flag=True, help="Print the payload's and result's JSON Schema.")
@json_option
def show_task(app_spec: str | None, name: str, schema: bool, as_json: bool) -> None:
    """One task: its queue, its types and, with --schema, their JSON Schema (``null``:
    any JSON value; a declared type that has none exits 2, saying which)."""
    app = app_for_command(app_spec, NEEDS_TASKS)
    task = app.tasks.resolve(name)
    if schema:
        try:
            task.types.schemas()
        except ConfigurationError as exc:  # a declared type that has no JSON Schema
            fail(str(exc), EXIT_USAGE, hint=f"`runlane-sqs tasks show {task.name}` names its types")
    if as_json or schema:
        emit_json(task_to_json(task, schemas=schema) if as_json else task.types.schemas())
        return
    names = task.types.names()
    echo(f"task     {task.name}")
    echo(f"queue    {task.queue}")
    echo(f"payload  {names['payload']}")
    echo(f"result   {names['result']}")
