"""Backend and process commands: ``dev``, ``provision``, ``worker``, ``maintenance run``."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import signal
import threading
from dataclasses import replace
from datetime import timedelta

import click

from runlane_sqs.api.app import Runlane
from runlane_sqs.api.loading import ENV_APP
from runlane_sqs.cli.options import (
    app_for_command,
    app_option,
    app_or_env_for_command,
    optional_app_option,
)
from runlane_sqs.core.config import ENV_ENVIRONMENT, ENV_TABLE
from runlane_sqs.core.errors import ConfigurationError, StorageUnavailable, TransportError
from runlane_sqs.core.indexes import AGENDA_SHARDS
from runlane_sqs.engine.maintenance import MaintenanceConfig
from runlane_sqs.local.moto import MotoServer
from runlane_sqs.runtime.worker import ENV_WORKER_ID, WorkerOptions, queue_weights

log = logging.getLogger("runlane_sqs.maintenance")
TRANSIENT_ERRORS = (StorageUnavailable, TransportError)
"""Errors of a maintenance pass that a later pass may not meet: DynamoDB throttled or
unreachable, SQS failing. Every other error is permanent and ends ``--every``."""
DEV_POLL_SECONDS = 0.5
"""How often ``dev`` checks that its server is still alive."""
DEV_PORT = 5055
"""The port ``dev`` listens on unless told otherwise: always the same, so the exported
``AWS_ENDPOINT_URL`` still holds after a restart. Not LocalStack's 4566, DynamoDB Local's
8000 or moto_server's 5000, so it can run next to them."""


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (installed on the main thread)."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


@click.command()
@app_option
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEV_PORT,
    show_default=True,
    help="Port on 127.0.0.1; 0 picks a free one.",
)
@click.option("--queue", "queues", multiple=True, help="Queue to create (repeatable).")
def dev(app_spec: str | None, port: int, queues: tuple[str, ...]) -> None:
    """Start a local backend (an embedded moto server), provision it, print the variables
    to export, and keep it running until Ctrl-C or SIGTERM.

    Without --app (or RUNLANE_APP) it provisions the table from RUNLANE_TABLE (default
    "runlane") and the queue "default". Exits with code 4 when the port is taken or the
    server stops."""
    stop = stop_on_signals()
    server = MotoServer(port or None).start()
    try:
        os.environ.update(server.environment())
        named = app_spec or os.environ.get(ENV_APP)
        app = app_or_env_for_command(named)
        app.provision(list(queues) or None)
        exports = {
            **server.environment(),
            ENV_TABLE: app.config.table,
            ENV_ENVIRONMENT: app.config.environment,
        }
        if named:
            exports[ENV_APP] = named
        click.echo(f"# runlane-sqs dev: moto server on {server.endpoint_url}, table ready")
        click.echo("# export these in another shell; Ctrl-C here stops the server")
        for name, value in exports.items():
            click.echo(f"export {name}={shlex.quote(value)}")
        _serve(server, stop)
    finally:
        server.stop()
    click.echo("# moto server stopped", err=True)


def _serve(server: MotoServer, stop: threading.Event) -> None:
    while not stop.wait(DEV_POLL_SECONDS):
        # a terminal's Ctrl-C reaches the server process too; give our handler a moment
        if not server.running and not stop.wait(1.0):
            server.check_running()  # raises LocalServerError (exit code 4): how, and its stderr


@click.command()
@optional_app_option
@click.option("--queue", "queues", multiple=True, help="Queue to create (repeatable).")
def provision(app_spec: str | None, queues: tuple[str, ...]) -> None:
    """Create the table and queues if they do not exist (local use and tests). Without
    --app or RUNLANE_APP: the table from RUNLANE_TABLE and the queue "default" (or --queue)."""
    app = app_or_env_for_command(app_spec)
    app.provision(list(queues) or None)
    click.echo(f"table {app.config.table} and queues ready")


def with_settings(app: Runlane, **settings: float | None) -> Runlane:
    """``app`` with the settings given on the command line (those not ``None``, in
    seconds) in place of its configuration's; its engine is rebuilt over the same
    adapters. A combination the configuration refuses is a usage error."""
    given = {
        name: timedelta(seconds=value) for name, value in settings.items() if value is not None
    }
    if given:
        try:
            app.config = replace(app.config, **given)  # type: ignore[arg-type]
        except ConfigurationError as exc:
            raise click.UsageError(str(exc)) from None
        app.rewire(store=app.store, transport=app.transport, clock=app.clock, objects=app.objects)
    return app


@click.command()
@app_option
@click.option("--queue", "queues", multiple=True, help="Queue to consume (repeatable).")
@click.option(
    "--queues",
    "weighted",
    help="Queues to consume with their weights: high=3,default=1 (a queue without one: 1).",
)
@click.option("--concurrency", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--drain", is_flag=True, help="Process available work, then exit.")
@click.option("--max-runs", type=click.IntRange(min=1), help="With --drain: stop after N runs.")
@click.option(
    "--grace-period", default=25.0, show_default=True, help="Seconds to let attempts finish."
)
@click.option(
    "--worker-id",
    help=f"Lease owner name of this worker [default: {ENV_WORKER_ID}, or worker-HOST-PID-RANDOM]",
)
@click.option(
    "--lease-seconds",
    type=click.FloatRange(min=3),
    help="Lease duration in seconds, heartbeats every third [default: the app's, 60]",
)
@click.option(
    "--async",
    "use_async",
    is_flag=True,
    help="The asyncio worker (aioboto3; needs the 'async' extra).",
)
def worker(
    app_spec: str | None,
    queues: tuple[str, ...],
    weighted: str | None,
    concurrency: int,
    drain: bool,
    max_runs: int | None,
    grace_period: float,
    worker_id: str | None,
    lease_seconds: float | None,
    use_async: bool,
) -> None:
    """Run a worker until SIGTERM/SIGINT (or, with --drain, until the queues are empty)."""
    app = app_for_command(app_spec, "the worker runs your tasks")
    with_settings(app, lease_duration=lease_seconds)
    names, weights = weighted_queues(weighted) if weighted else ([], {})
    options = WorkerOptions(
        concurrency=concurrency, grace_period=grace_period, worker_id=worker_id, weights=weights
    )
    draining = drain or max_runs is not None
    chosen = [*queues, *(name for name in names if name not in queues)] or None
    if use_async:
        async_worker = app.async_worker(chosen, **options)
        if draining:
            executed = asyncio.run(async_worker.drain(max_runs))
            click.echo(_drained(executed, async_worker.returned))
        else:
            asyncio.run(async_worker.run())
        return
    sync_worker = app.worker(chosen, **options)
    if draining:
        click.echo(_drained(sync_worker.drain(max_runs=max_runs), sync_worker.returned))
    else:
        sync_worker.run()


def weighted_queues(text: str) -> tuple[list[str], dict[str, int]]:
    """``high=3,default`` as queue names and the weights given (checked)."""
    names: list[str] = []
    weights: dict[str, int] = {}
    for part in text.split(","):
        name, has_weight, weight = (piece.strip() for piece in part.partition("="))
        if not name:
            raise click.UsageError(f"--queues: an empty queue name in {text!r}")
        names.append(name)
        if has_weight:
            if not weight.isdigit():
                raise click.UsageError(
                    f"--queues: queue {name!r} has weight {weight!r}, not a number"
                )
            weights[name] = int(weight)
    try:
        queue_weights(names, weights)
    except ConfigurationError as exc:
        raise click.UsageError(f"--queues: {exc}") from None
    return names, weights


def _drained(executed: int, returned: int) -> str:
    """What ``worker --drain`` prints: the runs it executed and, if any, how often it
    received a wakeup of another environment and left it on the queue."""
    line = f"executed {executed} run(s)"
    if returned:
        line += f"; {returned} receive(s) of wakeups of other environments, left on the queue"
    return line


@click.group()
def maintenance() -> None:
    """Maintenance: publish due wakeups and recover expired leases."""


@maintenance.command("run")
@app_option
@click.option("--once", is_flag=True, help="One pass, then exit (the default).")
@click.option("--every", type=click.FloatRange(min=1), help="A pass every N seconds until stopped.")
@click.option(
    "--limit",
    type=click.IntRange(min=AGENDA_SHARDS),
    help=f"Candidates per scan per pass, at least {AGENDA_SHARDS} (one per agenda partition).",
)
@click.option(
    "--republish-after",
    type=click.FloatRange(min=1),
    help="Seconds a published wakeup is trusted before another [default: the app's, 300]",
)
@click.option(
    "--republish-max",
    type=click.FloatRange(min=1),
    help="Longest wait between republishes, in seconds [default: the app's, 3600]",
)
def maintenance_run(
    app_spec: str | None,
    once: bool,
    every: float | None,
    limit: int | None,
    republish_after: float | None,
    republish_max: float | None,
) -> None:
    """Run maintenance passes and print each report as one JSON line.

    With --every, a pass that fails because DynamoDB or SQS is unavailable is logged and
    the next one follows; any other error (a missing table or queue, a DynamoDB request
    refused as invalid or denied) ends the command with exit code 4."""
    if once and every is not None:
        raise click.UsageError("--once and --every exclude each other")
    app = app_for_command(
        app_spec, "maintenance needs each task's retry policy to time out attempts"
    )
    with_settings(app, republish_after=republish_after, republish_max=republish_max)
    if limit is not None:
        app.maintenance.bounds = MaintenanceConfig(
            limit_per_job=limit, max_lease_losses=app.maintenance.bounds.max_lease_losses
        )
    stop = stop_on_signals() if every is not None else threading.Event()
    while True:
        try:
            report = app.maintenance.run_pass()
        except TRANSIENT_ERRORS as exc:
            if every is None:
                raise
            log.warning("pass failed: %s; the next pass in %g s", exc, every)
        else:
            click.echo(json.dumps(report.to_json()))
        if every is None or stop.wait(every):
            return
