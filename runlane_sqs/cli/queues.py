"""Concurrency limit commands: ``queues list``.

Occupancy is read from storage, so the command works without an app
(``app_or_env_for_command``): it then lists every scope with holders or waiters lately, with
the limit stored by the last claim that took a slot. Given the app, it also lists every
queue the app defines (limited or not) with the limits its code sets.
"""

from __future__ import annotations

from collections.abc import Sequence

import click
from rich.text import Text

from runlane_sqs.api.queues import WAITING_COUNTED, Occupancy
from runlane_sqs.cli import tables
from runlane_sqs.cli.options import (
    app_or_env_for_command,
    emit_json,
    json_option,
    optional_app_option,
)

QUEUE_COLUMNS = ("kind", "name", "limit", "holding", "waiting")
"""The columns of ``queues list``, left to right."""
QUEUE_NARROW_DROPS = ("kind",)
"""What ``queues list`` leaves out while the table is wider than the console (the name
tells a key's ``{task}#{key}`` from a queue's name); past that the name folds onto more
lines. The limit and the counts always stay whole."""
QUEUE_FOLDING_COLUMNS = frozenset({"name"})
QUEUES = tables.Listing(
    QUEUE_COLUMNS,
    QUEUE_NARROW_DROPS,
    QUEUE_FOLDING_COLUMNS,
    frozenset({"limit", "holding", "waiting"}),
)
STORED_MARK = " (stored)"
"""After a limit this app does not define, read from the scope's slot record."""
STORED_NOTE = "(stored): the limit of the last claim that took a slot; this app does not define one"
NO_LIMIT = "none"
"""A queue the app defines without a limit, whose slots no claim ever took."""


def limit_cell(occupancy: Occupancy) -> str:
    """The app's limit; else the stored one, marked; else ``none``."""
    if occupancy.limit is not None:
        return str(occupancy.limit)
    if occupancy.stored_limit is not None:
        return f"{occupancy.stored_limit}{STORED_MARK}"
    return NO_LIMIT


def waiting_cell(occupancy: Occupancy) -> str:
    """The runs waiting; ``1000+`` when counting stopped at :data:`WAITING_COUNTED`."""
    if occupancy.waiting >= WAITING_COUNTED:
        return f"{WAITING_COUNTED}+"
    return str(occupancy.waiting)


def _occupancy_row(occupancy: Occupancy) -> dict[str, str | Text]:
    return {
        "kind": occupancy.kind,
        "name": occupancy.name,
        "limit": limit_cell(occupancy),
        "holding": str(occupancy.holding),
        "waiting": waiting_cell(occupancy),
    }


def print_occupancy(found: Sequence[Occupancy]) -> None:
    """Every scope, one row each (names escaped like all stored text); at narrow widths
    the columns in ``QUEUE_NARROW_DROPS`` give way. A note under the table explains a stored
    limit's mark."""
    out = tables.stdout_console()
    table = QUEUES.fit([_occupancy_row(occupancy) for occupancy in found], out)
    tables.show(f"{len(found)} scope(s), by scope", table, out)
    if any(occupancy.limit is None and occupancy.stored_limit is not None for occupancy in found):
        out.print(Text(STORED_NOTE), soft_wrap=True)


@click.group()
def queues() -> None:
    """Read the occupancy of the environment's concurrency limits."""


@queues.command("list")
@optional_app_option
@json_option
def list_queues(app_spec: str | None, as_json: bool) -> None:
    """List concurrency limits: slots held and runs waiting, by scope.

    The scopes are the app's queues and every queue or key limit with holders or waiters
    lately; without the app, a limit is the one stored by the last claim (marked)."""
    found = app_or_env_for_command(app_spec).queues.list()
    if as_json:
        emit_json([occupancy.to_json() for occupancy in found])
    else:
        print_occupancy(found)
