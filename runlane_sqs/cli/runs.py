"""Run commands: ``trigger`` and
``runs list|get|events|attempts|versions|wait|watch|cancel|unpark|retry|retry-failed|rerun|prune``;
``runs bulk`` is :mod:`runlane_sqs.cli.bulk`.

Every ``runs`` command works without an app (``app_or_env_for_command``): it reads and writes
stored runs only. ``trigger`` needs the app that registers the task.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

from runlane_sqs.api.app import Runlane
from runlane_sqs.api.runs import MAX_LIST_LIMIT
from runlane_sqs.api.shapes import (
    attempt_to_json,
    event_to_json,
    group_to_json,
    iso,
    run_to_json,
)
from runlane_sqs.cli import tables
from runlane_sqs.cli.bulk import bulk
from runlane_sqs.cli.escaping import echo, printable
from runlane_sqs.cli.exits import EXIT_USAGE, exit_as_finished, exit_wait_timed_out, fail
from runlane_sqs.cli.options import (
    TAG_HELP,
    actor_options,
    actor_or_user,
    app_for_command,
    app_option,
    app_or_env_for_command,
    emit_json,
    json_option,
    optional_app_option,
    parse_age_or_time,
    parse_iso_time,
    parse_json_option,
    parse_tag_options,
)
from runlane_sqs.cli.schedules import parse_schedule_id
from runlane_sqs.core.errors import RunWaitTimedOut
from runlane_sqs.core.model import JSON, TERMINAL_STATUSES, Run, RunStatus
from runlane_sqs.core.replay import Divergence

log = logging.getLogger("runlane_sqs.runs")
ALL_STATUSES = [s.value for s in RunStatus]
FINISHED_STATUSES = [s.value for s in RunStatus if s in TERMINAL_STATUSES]


def _emit_run(run: Run, as_json: bool, **extra: JSON) -> None:
    if as_json:
        emit_json({**run_to_json(run), **extra})
    else:
        tables.print_run(run)


@click.command()
@app_option
@click.argument("task")
@click.option(
    "--payload",
    callback=parse_json_option,
    metavar="JSON",
    default=None,
    help="The run's payload as JSON.",
)
@click.option("--idempotency-key", help="Return the existing run that holds this key.")
@click.option("--singleton-key", help="At most one unfinished run of the task per key.")
@click.option("--ordering-key", help="Run after the unfinished runs with this key, in order.")
@click.option(
    "--debounce-key", help="A debounced task's key: collapse into its pending run, if any."
)
@click.option("--batch-key", help="A batched task's key: add the payload to its pending batch.")
@click.option("--delay", type=click.FloatRange(min=0), help="Seconds before the run is due.")
@click.option("--queue", help="The run's queue instead of its task's (an urgent one).")
@click.option("--tag", "tags", multiple=True, callback=parse_tag_options, help=TAG_HELP)
@json_option
def trigger(
    app_spec: str | None,
    task: str,
    payload: JSON,
    idempotency_key: str | None,
    singleton_key: str | None,
    ordering_key: str | None,
    debounce_key: str | None,
    batch_key: str | None,
    delay: float | None,
    queue: str | None,
    tags: dict[str, str],
    as_json: bool,
) -> None:
    """Create a run of TASK and publish its wakeup; prints the run id and whether it was
    created (false: an existing run holds the idempotency or singleton key, or the
    trigger went to its debounce or batch key's pending run). Needs the app that
    registers TASK (--app or RUNLANE_APP)."""
    app = app_for_command(app_spec, "trigger needs the app that registers the task")
    run = app.trigger(
        task,
        payload,
        idempotency_key=idempotency_key,
        singleton_key=singleton_key,
        ordering_key=ordering_key,
        debounce_key=debounce_key,
        batch_key=batch_key,
        delay=delay,
        queue=queue,
        tags=tags or None,
    )
    if as_json:
        emit_json({**run_to_json(run), "created": run.created, "item": run.item})
    else:
        echo(run.id)
        echo(f"created: {'true' if run.created else 'false'}")
        if run.item is not None:
            echo(f"item: {run.item}")


@click.group()
def runs() -> None:
    """Observe and recover runs."""


runs.add_command(bulk)


@runs.command("list")
@optional_app_option
@click.option(
    "--status", "statuses", multiple=True, type=click.Choice(ALL_STATUSES), help="Repeatable."
)
@click.option("--task", help="Only runs of this task.")
@click.option("--queue", help="Only runs on this queue.")
@click.option("--schedule", callback=parse_schedule_id, help="Only runs this schedule made.")
@click.option(
    "--tag",
    "tags",
    multiple=True,
    callback=parse_tag_options,
    help="Only runs with this tag, key=value (repeatable: every one; docs/tags.md).",
)
@click.option(
    "--created-after",
    callback=parse_iso_time,
    metavar="ISO-TIME",
    help="ISO-8601 time (UTC if no offset).",
)
@click.option(
    "--created-before",
    callback=parse_iso_time,
    metavar="ISO-TIME",
    help="ISO-8601 time (UTC if no offset).",
)
@click.option(
    "--parent",
    metavar="RUN_ID",
    help="Only the children of this run's groups (or of this group id), in item order.",
)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, MAX_LIST_LIMIT))
@click.option("--cursor", help="Continue from a previous page.")
@json_option
def list_runs(
    app_spec: str | None,
    statuses: tuple[str, ...],
    parent: str | None,
    task: str | None,
    queue: str | None,
    schedule: str | None,
    tags: dict[str, str],
    created_after: datetime | None,
    created_before: datetime | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List runs newest first (one page; the next page needs --cursor); with --parent, a
    group's children in item order."""
    app = app_or_env_for_command(app_spec)
    if parent is not None:
        if statuses or task or queue or schedule or tags or created_after or created_before:
            fail("--parent lists a group's children; it takes no other filter", EXIT_USAGE)
        page = app.runs.children(parent, limit=limit, cursor=cursor)
    else:
        page = app.runs.list(
            status=list(statuses) or None,
            task=task,
            queue=queue,
            created_after=created_after,
            created_before=created_before,
            schedule=schedule,
            tags=tags or None,
            limit=limit,
            cursor=cursor,
        )
    if as_json:
        emit_json({"runs": [run_to_json(r) for r in page.runs], "cursor": page.cursor})
    else:
        tables.print_runs(page.runs, page.cursor, now=app.clock.now())


@runs.command()
@optional_app_option
@click.option("--task", help="Only runs of this task.")
@json_option
def versions(app_spec: str | None, task: str | None, as_json: bool) -> None:
    """Count unfinished runs by the app version they started under and their task: once
    no run counts under a version, its code paths can go. Reads every unfinished run."""
    report = app_or_env_for_command(app_spec).runs.versions(task=task)
    if as_json:
        emit_json(report.to_json())
    else:
        tables.print_versions(report)


@runs.command("get")
@optional_app_option
@click.argument("run_id")
@json_option
def show_run(app_spec: str | None, run_id: str, as_json: bool) -> None:
    """Show one run as stored now, with the groups it opened (counts per status) and, for
    a run parked because its code changed, the recorded calls next to the new ones."""
    app = app_or_env_for_command(app_spec)
    history = app.runs.history(run_id)
    run, groups = history.run, app.runs.groups_of(history.run)
    divergence = Divergence.of(history.events) if run.status is RunStatus.PARKED else None
    if as_json:
        shown = {**run_to_json(run), "groups": [group_to_json(g) for g in groups]}
        if divergence is not None:
            shown["divergence"] = divergence.to_json()
        emit_json(shown)
        return
    tables.print_run(run)
    for group in groups:
        tables.print_group(group)
    if divergence is not None:
        tables.print_divergence(divergence)


@runs.command()
@optional_app_option
@click.argument("run_id")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Give up after this long (default: wait as long as it takes).",
)
@json_option
def wait(app_spec: str | None, run_id: str, timeout: float | None, as_json: bool) -> None:
    """Wait until a run finishes, then show it. Exits 0 if it succeeded, 7 if it failed or
    was cancelled, 8 if --timeout passed first (showing its last state)."""
    app = app_or_env_for_command(app_spec)
    run = app.runs.get(run_id)
    if not run.is_terminal:
        log.info(
            "run %s: %s; waiting for it to finish",
            run_id,
            run.status.value,
            extra={"run_id": run_id, "task": run.task},
        )
        try:
            run = app.runs.wait(run_id, timeout=timeout)
        except RunWaitTimedOut as exc:
            _emit_run(exc.run, as_json)
            exit_wait_timed_out(run_id, exc.run.status, timeout)
    _emit_run(run, as_json)
    exit_as_finished(run_id, run.status)


@runs.command()
@optional_app_option
@click.argument("run_id")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Give up after this long (default: watch as long as it takes).",
)
@json_option
def watch(app_spec: str | None, run_id: str, timeout: float | None, as_json: bool) -> None:
    """Follow a run's progress until it finishes: a live progress bar when stdout is a
    terminal, one line per change otherwise; then show the run. Exits as `runs wait`
    does: 0 if it succeeded, 7 if it failed or was cancelled, 8 if --timeout passed
    first."""
    app = app_or_env_for_command(app_spec)
    run = app.runs.get(run_id)
    with _Watching(run, live=sys.stdout.isatty() and not as_json, quiet=as_json) as watching:
        watching.show(run)
        if not run.is_terminal:
            try:
                run = app.runs.wait(run_id, timeout=timeout, on_progress=watching.show)
            except RunWaitTimedOut as exc:
                watching.close()
                _emit_run(exc.run, as_json)
                exit_wait_timed_out(run_id, exc.run.status, timeout)
        watching.show(run)
    _emit_run(run, as_json)
    exit_as_finished(run_id, run.status)


class _Watching:
    """What ``runs watch`` shows while it waits: a rich progress bar on a terminal, a
    line per change of the run's progress otherwise (none with ``--json``)."""

    def __init__(self, run: Run, *, live: bool, quiet: bool) -> None:
        self._run_id = run.id
        self._quiet = quiet
        self._last: str | None = None
        columns = (
            SpinnerColumn(),
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            TextColumn("{task.fields[line]}", markup=False),  # stored text: never markup
        )
        self._bar = Progress(*columns, console=Console()) if live else None
        self._task = self._bar.add_task(run.task, total=None, line="") if self._bar else None

    def __enter__(self) -> _Watching:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()

    def show(self, run: Run) -> None:
        progress = run.progress
        line = (
            tables.progress_line(progress) if progress is not None else "no progress reported yet"
        )
        if self._bar is not None and self._task is not None:
            done = progress.done if progress is not None else 0
            total = progress.total if progress is not None else None
            shown = printable(f"{run.status.value}  {line}")
            self._bar.update(self._task, completed=done, total=total, line=shown)
        elif not self._quiet and line != self._last:
            echo(f"run {self._run_id}: {run.status.value}, {line}")
            sys.stdout.flush()  # a line as soon as it changed, even into a pipe
        self._last = line


@runs.command()
@optional_app_option
@click.argument("run_id")
@json_option
def events(app_spec: str | None, run_id: str, as_json: bool) -> None:
    """Show a run's history, in order."""
    history = app_or_env_for_command(app_spec).runs.events(run_id)
    if as_json:
        emit_json({"run_id": run_id, "events": [event_to_json(e) for e in history]})
    else:
        tables.print_events(run_id, history)


@runs.command()
@optional_app_option
@click.argument("run_id")
@json_option
def attempts(app_spec: str | None, run_id: str, as_json: bool) -> None:
    """Show a run's attempts: worker, start, end, outcome, failure."""
    found = app_or_env_for_command(app_spec).runs.attempts(run_id)
    if as_json:
        emit_json({"run_id": run_id, "attempts": [attempt_to_json(a) for a in found]})
    else:
        tables.print_attempts(run_id, found)


@runs.command()
@optional_app_option
@click.argument("run_id")
@actor_options
@json_option
def cancel(
    app_spec: str | None, run_id: str, actor: str | None, reason: str, as_json: bool
) -> None:
    """Cancel a run: at once if it waits, at its worker's next heartbeat if it runs."""
    run = app_or_env_for_command(app_spec).runs.cancel(
        run_id, reason=reason, actor=actor_or_user(actor)
    )
    _emit_status(run, as_json)


@runs.command("unpark")
@optional_app_option
@click.argument("run_id")
@actor_options
@json_option
def unpark_run(
    app_spec: str | None, run_id: str, actor: str | None, reason: str, as_json: bool
) -> None:
    """Make a parked run runnable again and publish its wakeup (after deploying a worker
    that registers its task)."""
    run = app_or_env_for_command(app_spec).runs.unpark(
        run_id, reason=reason, actor=actor_or_user(actor)
    )
    _emit_status(run, as_json)


def _emit_status(run: Run, as_json: bool) -> None:
    if as_json:
        emit_json(run_to_json(run))
    else:
        echo(f"run {run.id} is {run.status.value}")


@runs.command()
@optional_app_option
@click.argument("run_id")
@actor_options
@json_option
def retry(app_spec: str | None, run_id: str, actor: str | None, reason: str, as_json: bool) -> None:
    """Create a new run from a failed one, linked to it (the source stays failed)."""
    run = app_or_env_for_command(app_spec).runs.retry(
        run_id, reason=reason, actor=actor_or_user(actor)
    )
    _emit_link(run, as_json)


@runs.command("retry-failed")
@optional_app_option
@click.argument("run_id")
@actor_options
@json_option
def retry_failed(
    app_spec: str | None, run_id: str, actor: str | None, reason: str, as_json: bool
) -> None:
    """Rerun the failed children of a parent's latest group (or of a group id); once
    they finish the group joins again (a failed parent runs again, linked to it)."""
    group = app_or_env_for_command(app_spec).runs.retry_failed(
        run_id, reason=reason, actor=actor_or_user(actor)
    )
    if as_json:
        emit_json(group_to_json(group))
    else:
        echo(f"group {group.id}: rerunning its failed children (generation {group.generation})")


@runs.command()
@optional_app_option
@click.argument("run_id")
@actor_options
@json_option
def rerun(app_spec: str | None, run_id: str, actor: str | None, reason: str, as_json: bool) -> None:
    """Create a new run from any finished one, linked to it."""
    run = app_or_env_for_command(app_spec).runs.rerun(
        run_id, reason=reason, actor=actor_or_user(actor)
    )
    _emit_link(run, as_json)


def _emit_link(run: Run, as_json: bool) -> None:
    if as_json:
        emit_json(run_to_json(run))
    else:
        echo(run.id)
        echo(f"{run.source_kind} of {run.source_run_id}")


@runs.command()
@optional_app_option
@click.option(
    "--older-than",
    callback=parse_age_or_time,
    metavar="SECONDS|ISO-TIME",
    required=True,
    help="Age in seconds, or an ISO-8601 time: prune runs created before it.",
)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(FINISHED_STATUSES),
    help="Repeatable; default: every finished status.",
)
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=click.IntRange(1, MAX_LIST_LIMIT),
    help="Runs examined per batch.",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
def prune(
    app_spec: str | None,
    older_than: float | datetime,
    statuses: tuple[str, ...],
    limit: int,
    yes: bool,
    as_json: bool,
) -> None:
    """Delete finished runs created before a cutoff, with their history, in batches."""
    app = app_or_env_for_command(app_spec)
    cutoff = (
        older_than
        if isinstance(older_than, datetime)
        else app.clock.now() - timedelta(seconds=older_than)
    )
    chosen = list(statuses) or FINISHED_STATUSES
    if not yes:
        _confirm_prune(chosen, cutoff)
    examined, deleted, batches = _prune_all(app, cutoff, chosen, limit)
    if as_json:
        emit_json(
            {
                "cutoff": iso(cutoff),
                "statuses": chosen,
                "examined": examined,
                "deleted": deleted,
                "batches": batches,
            }
        )
    else:
        echo(f"pruned {deleted} run(s) ({examined} examined in {batches} batch(es))")


def _confirm_prune(statuses: Sequence[str], cutoff: datetime) -> None:
    if not sys.stdin.isatty():
        raise click.UsageError(
            "runs prune deletes runs and there is no terminal to confirm on; pass --yes"
        )
    click.confirm(
        f"Delete {'/'.join(statuses)} runs created before {iso(cutoff)}, with their history?",
        abort=True,
    )


def _prune_all(
    app: Runlane, cutoff: datetime, statuses: Sequence[str], limit: int
) -> tuple[int, int, int]:
    """Prune batch after batch until the cursor runs out; a progress bar on stderr when
    it is a terminal (log lines then print above the bar), none otherwise."""
    examined = deleted = batches = 0
    cursor: str | None = None
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed} deleted, {task.fields[examined]} examined"),
    )
    bar_shown = sys.stderr.isatty()
    with Progress(*columns, console=Console(stderr=True), disable=not bar_shown) as progress:
        bar = progress.add_task("pruning", total=None, examined=0)
        while True:
            report = app.runs.prune(
                older_than=cutoff, statuses=statuses, limit=limit, cursor=cursor
            )
            examined += report.examined
            deleted += report.deleted
            batches += 1
            progress.update(bar, advance=report.deleted, examined=examined)
            cursor = report.cursor
            if cursor is None:
                break
        progress.update(bar, total=deleted, completed=deleted)
    return examined, deleted, batches
