"""Dead-letter commands: ``queues dlq list``, ``queues dlq inspect`` and ``queues dlq
redrive`` (``app.dead_letters``; docs/operations.md, "Dead-letter queues").

They read the queue's dead-letter queue through the app's transport, so they need only
the environment's settings (``app_or_env_for_command``); the runs are read from storage.
"""

from __future__ import annotations

from collections.abc import Sequence

import click
from rich.text import Text

from runlane_sqs.api.dead_letters import MOST, DeadLetterState, RedriveReport
from runlane_sqs.cli import tables
from runlane_sqs.cli.escaping import echo
from runlane_sqs.cli.exits import EXIT_USAGE, fail
from runlane_sqs.cli.options import (
    app_or_env_for_command,
    emit_json,
    json_option,
    optional_app_option,
)

LETTER_COLUMNS = ("message", "sent", "receives", "run", "status", "verdict", "reason")
LETTERS = tables.Listing(
    LETTER_COLUMNS,
    ("sent", "message"),
    frozenset({"reason"}),
    frozenset({"receives"}),
)
queue_argument = click.argument("queue", default="default")
limit_option = click.option(
    "--limit",
    type=click.IntRange(1, MOST),
    default=10,
    show_default=True,
    help="The most dead letters to read.",
)


def _row(letter: DeadLetterState) -> dict[str, str | Text]:
    return {
        "message": letter.message_id,
        "sent": letter.sent_at.isoformat(timespec="seconds") if letter.sent_at else "",
        "receives": str(letter.receive_count),
        "run": letter.run_id or "",
        "status": letter.status or "",
        "verdict": letter.verdict.value,
        "reason": letter.reason,
    }


def print_letters(title: str, letters: Sequence[DeadLetterState]) -> None:
    out = tables.stdout_console()
    tables.show(title, LETTERS.fit([_row(letter) for letter in letters], out), out)


@click.group()
def dlq() -> None:
    """Read a queue's dead-letter queue and redrive it."""


@dlq.command("list")
@optional_app_option
@queue_argument
@limit_option
@json_option
def list_letters(app_spec: str | None, queue: str, limit: int, as_json: bool) -> None:
    """List the dead letters of QUEUE (default: default): the run each names, its status,
    and what redriving it would do. They stay in the dead-letter queue."""
    found = app_or_env_for_command(app_spec).dead_letters.list(queue, limit)
    if as_json:
        emit_json([letter.to_json() for letter in found])
    else:
        print_letters(f"{len(found)} dead letter(s) of {queue}", found)


@dlq.command("inspect")
@optional_app_option
@click.argument("queue")
@click.argument("message_id")
@click.option(
    "--limit",
    type=click.IntRange(1, MOST),
    default=100,
    show_default=True,
    help="The most dead letters to look through.",
)
@json_option
def inspect_letter(
    app_spec: str | None, queue: str, message_id: str, limit: int, as_json: bool
) -> None:
    """Show one dead letter of QUEUE in full: its body, its run and the verdict."""
    found = app_or_env_for_command(app_spec).dead_letters.list(queue, limit)
    letter = next((state for state in found if state.message_id == message_id), None)
    if letter is None:
        fail(f"no dead letter {message_id!r} among the {len(found)} of {queue!r} read", EXIT_USAGE)
    if as_json:
        emit_json(letter.to_json())
        return
    for name, value in letter.to_json().items():
        echo(f"{name}: {'' if value is None else value}")


@dlq.command("redrive")
@optional_app_option
@queue_argument
@click.option(
    "--limit",
    type=click.IntRange(1, MOST),
    default=100,
    show_default=True,
    help="The most dead letters to act on.",
)
@click.option("--dry-run", is_flag=True, help="Say what each letter needs; change nothing.")
@click.option(
    "--drop-unreadable",
    is_flag=True,
    help="Delete letters that are not wakeups or name no run here (else they stay).",
)
@json_option
def redrive_letters(
    app_spec: str | None,
    queue: str,
    limit: int,
    dry_run: bool,
    drop_unreadable: bool,
    as_json: bool,
) -> None:
    """Redrive the dead letters of QUEUE: a fresh wakeup for each runnable run, nothing
    for a run storage settles, another environment's wakeup back to its queue. Each
    letter acted on is deleted; the rest stay."""
    report = app_or_env_for_command(app_spec).dead_letters.redrive(
        queue, limit, dry_run=dry_run, drop_unreadable=drop_unreadable
    )
    if as_json:
        emit_json(report.to_json())
        return
    print_letters(_title(report), report.letters)


def _title(report: RedriveReport) -> str:
    if report.dry_run:
        return f"{len(report.letters)} dead letter(s) of {report.queue} (dry run: nothing changed)"
    return (
        f"{report.queue}: {report.redriven} redriven, {report.settled} settled, "
        f"{report.returned} returned, {report.dropped} dropped, {report.left} left"
    )
