"""The ``runlane-sqs`` command line (click).

Commands: ``dev``, ``provision``, ``worker``, ``maintenance run``, ``trigger``,
``runs list|get|events|attempts|wait|cancel|unpark|retry|rerun|prune``,
``schedules list|get|pause|resume|trigger``, ``queues list``, ``health``,
``tokens create|get|complete|time-out``, ``signals send`` and ``console``. ``worker``, ``trigger``
and ``maintenance run`` need the app (``--app`` or ``RUNLANE_APP``); the others work
from the ``RUNLANE_*`` variables without one. Exit codes are in
:mod:`runlane_sqs.cli.exits`; docs/operations.md (section "CLI") documents them.
"""

from __future__ import annotations

import click

from runlane_sqs.cli.backend import dev, maintenance, provision, worker
from runlane_sqs.cli.console import console
from runlane_sqs.cli.exits import RunlaneGroup
from runlane_sqs.cli.health import health
from runlane_sqs.cli.logs import LOG_FORMATS, LOG_LEVELS, configure_logging
from runlane_sqs.cli.queues import queues
from runlane_sqs.cli.runs import runs, trigger
from runlane_sqs.cli.schedules import schedules
from runlane_sqs.cli.tasks import tasks
from runlane_sqs.cli.tokens import signals, tokens


@click.group(cls=RunlaneGroup)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    help="Python logging level.",
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS),
    help="Log lines on stderr: json or text (default: text on a terminal, else json).",
)
@click.version_option(package_name="runlane-sqs")
def main(log_level: str, log_format: str | None) -> None:
    """runlane-sqs: durable background work on DynamoDB and SQS."""
    configure_logging(log_format, log_level)


for command in (
    dev,
    provision,
    worker,
    maintenance,
    trigger,
    runs,
    schedules,
    tasks,
    queues,
    health,
    tokens,
    signals,
    console,
):
    main.add_command(command)

__all__ = ["main"]
