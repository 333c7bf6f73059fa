"""The ``runlane-sqs`` command line."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

import click

from runlane_sqs.app import Runlane
from runlane_sqs.errors import RunlaneError

EXIT_USAGE = 2
EXIT_APP_NOT_IMPORTABLE = 3
EXIT_BACKEND = 4


def load_app(spec: str | None) -> Runlane:
    """Import ``module:attribute`` and return the :class:`Runlane` app it names."""
    spec = spec or os.environ.get("RUNLANE_APP")
    if not spec:
        raise click.UsageError("name the app with --app module:attribute or RUNLANE_APP")
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise click.UsageError(f"--app {spec!r} must look like module:attribute")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
        app = getattr(module, attribute)
    except (ImportError, AttributeError) as exc:
        click.echo(f"error: cannot load app {spec!r}: {exc}", err=True)
        sys.exit(EXIT_APP_NOT_IMPORTABLE)
    if not isinstance(app, Runlane):
        click.echo(f"error: {spec!r} is a {type(app).__name__}, not a Runlane app", err=True)
        sys.exit(EXIT_APP_NOT_IMPORTABLE)
    return app


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


if __name__ == "__main__":
    main()
