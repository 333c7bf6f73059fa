"""Exit codes of ``runlane-sqs`` and the translation of errors into them (one place).

Documented in docs/operations.md, section "CLI".
"""

from __future__ import annotations

from typing import Any, NoReturn

import click
from botocore.exceptions import BotoCoreError, ClientError

from runlane_sqs.api.loading import AppNotImportable, InvalidAppSpec
from runlane_sqs.cli.escaping import BLOCK_KEEPS, printable
from runlane_sqs.core.errors import (
    ConfigurationError,
    IllegalTransition,
    InvalidCursor,
    InvalidKeyError,
    InvalidPayloadError,
    MissingResourceError,
    OperationNotFound,
    RunlaneError,
    RunNotFound,
    RunWaitTimedOut,
    ScheduleNotFound,
    UnknownTaskError,
)
from runlane_sqs.core.model import RunStatus
from runlane_sqs.core.tokens import TokenAlreadyDecided, TokenNotFound

EXIT_OK = 0
EXIT_ABORTED = 1
"""The operator answered no to a confirmation (click's ``Abort``), or an unexpected crash."""
EXIT_USAGE = 2
"""Bad usage: unknown option, invalid value, bad JSON, an invalid key, payload, cursor or
schedule id, or a confirmation needed with no terminal to ask on (click's own code for
usage errors)."""
EXIT_APP_NOT_IMPORTABLE = 3
"""No app named, a name that is not ``module:attribute``, it cannot be imported, or an
optional extra it needs is not installed (``worker --async`` without aioboto3)."""
EXIT_BACKEND = 4
"""DynamoDB or SQS unreachable or failing (also a receive that ends ``worker --drain``),
the table or a queue missing, or another runlane error from the backend."""
EXIT_NOT_FOUND = 5
"""No such run, token or schedule in this environment, or no such task registered in the
app."""
EXIT_ILLEGAL = 6
"""The action is not allowed in the current state (retry a succeeded run, cancel a
finished run, complete a decided token, pause a finished schedule)."""
EXIT_RUN_UNSUCCESSFUL = 7
"""``runs wait``: the run finished, but ``failed`` or ``cancelled``."""
EXIT_WAIT_TIMED_OUT = 8
"""``runs wait``: ``--timeout`` passed before the run finished (its last state is printed)."""
EXIT_UNHEALTHY = 9
"""``health``: no maintenance pass finished within three maintenance periods (the
report is printed)."""


def exit_as_finished(run_id: str, status: RunStatus) -> None:
    """``runs wait`` and ``runs watch`` once the run finished: return (exit 0) if it
    succeeded, else exit :data:`EXIT_RUN_UNSUCCESSFUL`."""
    if status is not RunStatus.SUCCEEDED:
        fail(f"run {run_id} finished {status.value}", EXIT_RUN_UNSUCCESSFUL)


def exit_wait_timed_out(run_id: str, status: RunStatus, timeout: float | None) -> NoReturn:
    """``runs wait`` and ``runs watch`` when ``--timeout`` passed first."""
    fail(f"run {run_id} is still {status.value} after {timeout or 0:g} s", EXIT_WAIT_TIMED_OUT)


PROVISION_HINT = (
    "create it with `runlane-sqs provision` (local backend) or with your CloudFormation stack (AWS)"
)


def fail(message: str, exit_code: int, hint: str | None = None) -> NoReturn:
    """Print ``error: message`` (and ``hint: ...``) on stderr and exit with ``exit_code``.

    A message may quote stored or user-supplied text, or several lines of a server's
    stderr: control characters are shown escaped, line breaks and tabs kept."""
    click.echo(f"error: {printable(message, BLOCK_KEEPS)}", err=True)
    if hint:
        click.echo(f"hint: {printable(hint, BLOCK_KEEPS)}", err=True)
    raise click.exceptions.Exit(exit_code)


ERROR_EXIT_CODES: tuple[tuple[tuple[type[BaseException], ...], int], ...] = (
    ((AppNotImportable,), EXIT_APP_NOT_IMPORTABLE),
    (
        (RunNotFound, TokenNotFound, ScheduleNotFound, OperationNotFound, UnknownTaskError),
        EXIT_NOT_FOUND,
    ),
    ((IllegalTransition, TokenAlreadyDecided), EXIT_ILLEGAL),
    ((InvalidPayloadError, InvalidKeyError, InvalidCursor), EXIT_USAGE),
    ((RunWaitTimedOut,), EXIT_WAIT_TIMED_OUT),
    ((RunlaneError, BotoCoreError, ClientError), EXIT_BACKEND),
)
"""Error classes and their exit codes, most specific first (the first match wins)."""


def exit_code_for(exc: BaseException) -> int:
    """The exit code an error means (1 for anything unexpected)."""
    if isinstance(exc, ConfigurationError) and isinstance(exc.__cause__, ImportError):
        return EXIT_APP_NOT_IMPORTABLE  # an optional extra is not installed
    for kinds, code in ERROR_EXIT_CODES:
        if isinstance(exc, kinds):
            return code
    return EXIT_ABORTED


def report(exc: RunlaneError | BotoCoreError | ClientError) -> NoReturn:
    """Report a library (or stray botocore) error and exit with its code."""
    code = exit_code_for(exc)
    if isinstance(exc, BotoCoreError | ClientError):
        # not translated at an adapter edge; botocore's message names the endpoint
        fail(f"AWS request failed: {exc}", code)
    hint = None
    if isinstance(exc, MissingResourceError):
        hint = PROVISION_HINT
    elif isinstance(exc, InvalidAppSpec):
        hint = "name the app with --app module:attribute or RUNLANE_APP"
    fail(str(exc), code, hint)


class RunlaneGroup(click.Group):
    """A click group that turns library errors into messages and documented exit codes."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (RunlaneError, BotoCoreError, ClientError) as exc:
            report(exc)
