"""Limit commands: ``queues list`` (concurrency limits) and ``queues rates`` (rate
limits); ``queues dlq`` is :mod:`runlane_sqs.cli.dead_letters`.

Occupancy is read from storage, so the command works without an app
(``app_or_env_for_command``): it then lists every scope with holders or waiters lately, with
the limit stored by the last claim that took a slot. Given the app, it also lists every
queue the app defines (limited or not) with the limits its code sets.
"""

from __future__ import annotations

from collections.abc import Sequence

import click
from rich.text import Text

from runlane_sqs.api.queues import WAITING_COUNTED, Occupancy, RateState
from runlane_sqs.cli import tables
from runlane_sqs.cli.dead_letters import dlq
from runlane_sqs.cli.options import (
    app_for_command,
    app_option,
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
    """Read the environment's concurrency limits (list) and rate limits (rates), and
    its dead-letter queues (dlq)."""


queues.add_command(dlq)


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


RATE_COLUMNS = ("scope", "limit", "next start", "available", "reserved ahead")
RATES = tables.Listing(
    RATE_COLUMNS,
    (),
    frozenset({"scope"}),
    frozenset({"limit", "available", "reserved ahead"}),
)
CHANGED_MARK = " (changed)"
CHANGED_NOTE = (
    "(changed): the last reservation was made under another limit; this one applies to "
    "reservations made from now on (and, if it was raised, to the starts reserved before "
    "once maintenance has run)"
)


def rate_limit_cell(state: RateState) -> str:
    """``rate/per`` (``+burst``), marked when the stored limit differs."""
    return state.limit_text if state.stored_matches else state.limit_text + CHANGED_MARK


def _rate_row(state: RateState) -> dict[str, str | Text]:
    return {
        "scope": state.scope,
        "limit": rate_limit_cell(state),
        "next start": state.next_start.isoformat() if state.next_start else "now",
        "available": str(state.available),
        "reserved ahead": str(state.reserved_ahead),
    }


@queues.command("rates")
@app_option
@click.option(
    "--key",
    "keys",
    multiple=True,
    help="Also show each per-key rate limit's scope for this key, even without a record "
    "(repeatable).",
)
@json_option
def list_rates(app_spec: str | None, keys: tuple[str, ...], as_json: bool) -> None:
    """List rate limits: the next start a claim would get, the runs that could start at
    once, and the starts reserved ahead, by scope.

    The scopes are the limits the app's code sets on queues and tasks, and its per-key
    limits for each key with a record and each --key."""
    app = app_for_command(app_spec, "rate limits are set by the app's code")
    found = app.queues.rates(keys)
    if as_json:
        emit_json([state.to_json() for state in found])
        return
    out = tables.stdout_console()
    table = RATES.fit([_rate_row(state) for state in found], out)
    tables.show(f"{len(found)} rate limit scope(s)", table, out)
    if not all(state.stored_matches for state in found):
        out.print(Text(CHANGED_NOTE), soft_wrap=True)
