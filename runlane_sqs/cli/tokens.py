"""Tokens and signals: ``tokens create|get|complete|time-out`` and ``signals send``.

None needs task code, so each works without an app (``app_or_env_for_command``).
"""

from __future__ import annotations

import click

from runlane_sqs.api.shapes import token_to_json
from runlane_sqs.cli import tables
from runlane_sqs.cli.escaping import echo
from runlane_sqs.cli.options import (
    app_or_env_for_command,
    emit_json,
    json_option,
    optional_app_option,
    parse_json_option,
)
from runlane_sqs.core.model import JSON
from runlane_sqs.core.tokens import Token


def _emit_token(token: Token, as_json: bool) -> None:
    if as_json:
        emit_json(token_to_json(token))
    else:
        tables.print_token(token)


@click.group()
def tokens() -> None:
    """Create, read and decide tokens (durable external decisions)."""


@tokens.command("create")
@optional_app_option
@click.option(
    "--timeout", type=click.FloatRange(min=1), help="Seconds until maintenance times it out."
)
@click.option(
    "--metadata",
    callback=parse_json_option,
    metavar="JSON",
    default=None,
    help="JSON kept with the token.",
)
@json_option
def create_token(
    app_spec: str | None, timeout: float | None, metadata: JSON, as_json: bool
) -> None:
    """Create a pending token and print its id (give it to the runs that wait on it)."""
    token = app_or_env_for_command(app_spec).tokens.create(timeout=timeout, metadata=metadata)
    if as_json:
        emit_json(token_to_json(token))
    else:
        echo(token.id)


@tokens.command("get")
@optional_app_option
@click.argument("token_id")
@json_option
def show_token(app_spec: str | None, token_id: str, as_json: bool) -> None:
    """Show a token and its decision."""
    _emit_token(app_or_env_for_command(app_spec).tokens.get(token_id), as_json)


@tokens.command()
@optional_app_option
@click.argument("token_id")
@click.option(
    "--value",
    callback=parse_json_option,
    metavar="JSON",
    default=None,
    help="The decision's value as JSON.",
)
@json_option
def complete(app_spec: str | None, token_id: str, value: JSON, as_json: bool) -> None:
    """Complete a pending token with a value and resume the runs waiting on it."""
    token = app_or_env_for_command(app_spec).tokens.complete(token_id, value)
    if as_json:
        emit_json(token_to_json(token))
    else:
        echo(f"token {token.id} is {token.status.value}")


@tokens.command("time-out")
@optional_app_option
@click.argument("token_id")
@json_option
def time_out(app_spec: str | None, token_id: str, as_json: bool) -> None:
    """Decide a pending token as timed out and resume the runs waiting on it."""
    token = app_or_env_for_command(app_spec).tokens.time_out(token_id)
    if as_json:
        emit_json(token_to_json(token))
    else:
        echo(f"token {token.id} is {token.status.value}")


@click.group()
def signals() -> None:
    """Send signals to the runs waiting on a key."""


@signals.command()
@optional_app_option
@click.argument("key")
@click.option(
    "--payload",
    callback=parse_json_option,
    metavar="JSON",
    default=None,
    help="JSON the woken runs receive.",
)
@json_option
def send(app_spec: str | None, key: str, payload: JSON, as_json: bool) -> None:
    """Wake the runs waiting on KEY now (a signal is not kept for later waiters)."""
    woken = app_or_env_for_command(app_spec).signals.send(key, payload)
    if as_json:
        emit_json({"key": key, "woken": woken})
    else:
        echo(f"woke {woken} run(s)")
