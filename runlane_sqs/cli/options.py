"""Options, parameter types and output helpers shared by the commands."""

from __future__ import annotations

import atexit
import getpass
import json
import os
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from runlane_sqs.api import loading
from runlane_sqs.api.app import Runlane
from runlane_sqs.api.loading import ENV_APP, InvalidAppSpec
from runlane_sqs.core.errors import InvalidKeyError, InvalidPayloadError
from runlane_sqs.core.model import JSON
from runlane_sqs.core.tags import parse_tags
from runlane_sqs.core.values import parse_json

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_ACTOR = "operator"
SHOWN_CHARS = 40
"""Characters of a refused option or argument value quoted in its error."""


def app_option(fn: F) -> F:
    """``--app module:attribute`` (default: ``RUNLANE_APP``), for commands that need it."""
    return click.option(
        "--app",
        "app_spec",
        metavar="MODULE:ATTR",
        help="The Runlane app to load (default: the RUNLANE_APP variable).",
    )(fn)


def optional_app_option(fn: F) -> F:
    """``--app``, for commands that work without one (then: the ``RUNLANE_*`` variables)."""
    return click.option(
        "--app",
        "app_spec",
        metavar="MODULE:ATTR",
        help="The Runlane app to load (default: the RUNLANE_APP variable; with neither, "
        "the table, environment and queues come from the RUNLANE_* variables).",
    )(fn)


def json_option(fn: F) -> F:
    """``--json``: print the documented JSON shape instead of a table."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print JSON (a stable, documented shape)."
    )(fn)


def actor_options(fn: F) -> F:
    """``--reason`` and ``--actor`` of the control actions (recorded in history)."""
    fn = click.option("--reason", default="", help="Why; recorded in the run's history.")(fn)
    return click.option(
        "--actor", default=None, help="Who; recorded in history (default: your user name)."
    )(fn)


NEEDS_TASK_CODE = "this command runs or checks your tasks' code"
"""Why a command needs the app, unless it says more precisely."""


def app_for_command(spec: str | None, needed_for: str = NEEDS_TASK_CODE) -> Runlane:
    """The app named by ``--app`` or ``RUNLANE_APP``, for a command that runs or checks
    task code; ``needed_for`` says why, in the error when neither names one (errors map
    to exit code 3, with a hint naming ``--app`` and ``RUNLANE_APP``)."""
    if not (spec or os.environ.get(ENV_APP)):
        raise InvalidAppSpec(f"no app named; {needed_for}")
    return flushed_at_exit(loading.load_app(spec))


def app_or_env_for_command(spec: str | None) -> Runlane:
    """The app named by ``--app`` or ``RUNLANE_APP``; with neither, one built from the
    ``RUNLANE_*`` and ``AWS_*`` variables (reads and operator actions need no task code)."""
    return flushed_at_exit(loading.load_app_or_env(spec))


def flushed_at_exit(app: Runlane) -> Runlane:
    """A command's spans and metrics (EMF lines, a maintenance pass's) are written out
    when the command ends, whatever it ran."""
    atexit.register(app.observer.flush)
    return app


def actor_or_user(actor: str | None) -> str:
    """``--actor``, else the operating-system user name."""
    if actor:
        return actor
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no user name in some containers
        return DEFAULT_ACTOR


UNSAFE_IN_JSON = re.compile(
    "[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069\ud800-\udfff]"
)
"""Characters JSON may leave raw that a terminal acts on (DEL, C1 controls such as the
one-byte CSI, bidi controls, line separators) or that cannot be written (lone
surrogates); they only occur inside strings, where ``\\uXXXX`` is the same value."""


def emit_json(value: JSON) -> None:
    """Print the documented JSON shape: other text as is, but no character a terminal
    would act on."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    click.echo(UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


def quoted_value(value: str) -> str:
    """A refused value as its error quotes it: ``repr``, cut after ``SHOWN_CHARS``."""
    return repr(value) if len(value) <= SHOWN_CHARS else repr(value[:SHOWN_CHARS]) + "..."


def parse_json_option(ctx: click.Context, param: click.Parameter, value: str | None) -> JSON:
    """Callback of options given as JSON (``'{"order": 7}'``, ``'"text"'``, ``3``)."""
    if value is None:
        return None
    try:
        return parse_json(value, what=quoted_value(value))
    except InvalidPayloadError as exc:  # bad JSON, NaN, a lone surrogate, too deep
        raise click.BadParameter(str(exc), ctx, param) from None


def parse_tag_options(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> dict[str, str]:
    """Callback of the repeatable ``--tag key=value``: the tags, in the order given."""
    try:
        return parse_tags(value)
    except InvalidKeyError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


TAG_HELP = "A tag, key=value (repeatable; docs/tags.md)."


def parse_time(text: str) -> datetime:
    """An ISO-8601 time; without an offset it is UTC. Raises ValueError."""
    value = datetime.fromisoformat(text)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def parse_iso_time(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> datetime | None:
    """Callback of options given as an ISO-8601 time (UTC when no offset is given)."""
    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO-8601 time (e.g. 2026-11-30T10:00:00Z)", ctx, param
        ) from None


def parse_age_or_time(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> float | datetime | None:
    """Callback of options given as seconds of age (``86400``) or an ISO-8601 time."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if seconds < 0:
            raise click.BadParameter("an age cannot be negative", ctx, param)
        return seconds
    try:
        return parse_time(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither seconds nor an ISO-8601 time", ctx, param
        ) from None
