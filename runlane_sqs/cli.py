"""The ``runlane-sqs`` command line."""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from typing import Any

import click

from runlane_sqs import loading
from runlane_sqs.app import Runlane
from runlane_sqs.errors import MissingResourceError, RunlaneError
from runlane_sqs.loading import AppNotImportable, InvalidAppSpec
from runlane_sqs.maintenance import MaintenanceConfig

EXIT_USAGE = 2
"""click's own exit code for usage errors (missing --app, bad options)."""
EXIT_APP_NOT_IMPORTABLE = 3
EXIT_BACKEND = 4


def load_app(spec: str | None) -> Runlane:
    """The app named by ``--app`` or ``RUNLANE_APP``; exits 3 when it cannot be loaded."""
    try:
        return loading.load_app(spec)
    except InvalidAppSpec as exc:
        raise click.UsageError(str(exc)) from None
    except AppNotImportable as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_APP_NOT_IMPORTABLE)


@click.group()
@click.option("--log-level", default="INFO", show_default=True, help="Python logging level.")
def main(log_level: str) -> None:
    """runlane-sqs: durable background work on DynamoDB and SQS."""
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("botocore").setLevel(logging.WARNING)


@main.command()
@click.option("--app", "app_spec", help="module:attribute of the Runlane app (or RUNLANE_APP).")
@click.option("--queue", "queues", multiple=True, help="Queue to consume (repeatable).")
@click.option("--concurrency", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--drain", is_flag=True, help="Process available work, then exit.")
@click.option("--max-runs", type=click.IntRange(min=1), help="With --drain: stop after N runs.")
@click.option(
    "--grace-period", default=25.0, show_default=True, help="Seconds to let attempts finish."
)
def worker(
    app_spec: str | None,
    queues: tuple[str, ...],
    concurrency: int,
    drain: bool,
    max_runs: int | None,
    grace_period: float,
) -> None:
    """Run a worker until SIGTERM/SIGINT (or, with --drain, until the queues are empty)."""
    app = load_app(app_spec)
    options: dict[str, Any] = {"concurrency": concurrency, "grace_period": grace_period}
    try:
        instance = app.worker(list(queues) or None, **options)
        if drain or max_runs is not None:
            executed = instance.drain(max_runs=max_runs)
            click.echo(f"executed {executed} run(s)")
        else:
            instance.run()
    except RunlaneError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BACKEND)


@main.command()
@click.option("--app", "app_spec", help="module:attribute of the Runlane app (or RUNLANE_APP).")
@click.option("--queue", "queues", multiple=True, help="Queue to create (repeatable).")
def provision(app_spec: str | None, queues: tuple[str, ...]) -> None:
    """Create the table and queues if they do not exist (local use and tests)."""
    app = load_app(app_spec)
    try:
        app.provision(list(queues) or None)
    except RunlaneError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BACKEND)
    click.echo(f"table {app.config.table} and queues ready")


@main.group()
def maintenance() -> None:
    """Maintenance: publish due wakeups and recover expired leases."""


@maintenance.command("run")
@click.option("--app", "app_spec", help="module:attribute of the Runlane app (or RUNLANE_APP).")
@click.option("--once", "mode", flag_value="once", default=True, help="One pass, then exit.")
@click.option("--every", type=click.FloatRange(min=1), help="A pass every N seconds until stopped.")
@click.option("--limit", type=click.IntRange(min=1), help="Candidates per job per pass.")
def maintenance_run(
    app_spec: str | None, mode: str, every: float | None, limit: int | None
) -> None:
    """Run maintenance passes and print each report as one JSON line."""
    app = load_app(app_spec)
    if limit is not None:
        app.maintenance.config = MaintenanceConfig(
            limit_per_job=limit, max_lease_losses=app.maintenance.config.max_lease_losses
        )
    stop = threading.Event()
    if every is not None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    while True:
        try:
            report = app.maintenance.run_pass()
        except MissingResourceError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_BACKEND)
        except RunlaneError as exc:
            if every is None:
                click.echo(f"error: {exc}", err=True)
                sys.exit(EXIT_BACKEND)
            logging.getLogger("runlane_sqs.maintenance").warning("pass failed: %s", exc)
        else:
            click.echo(json.dumps(report.to_json()))
        if every is None or stop.wait(every):
            return


if __name__ == "__main__":
    main()
