"""Readable tables (rich) for the default, non-JSON output."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from runlane_sqs.api.shapes import iso, run_to_json, token_to_json
from runlane_sqs.core.attempts import Attempt
from runlane_sqs.core.model import JSON, Run, RunEvent
from runlane_sqs.core.tokens import Token

PIPE_WIDTH = 200
"""Columns when stdout is not a terminal, so ids are not cut."""
CELL_CHARS = 120
"""Longest JSON shown in one cell; ``--json`` prints everything."""
STATUS_STYLES = {
    "succeeded": "green",
    "failed": "red",
    "cancelled": "yellow",
    "cancel_requested": "yellow",
    "running": "cyan",
    "retrying": "magenta",
    "released": "blue",
    "queued": "white",
    "pending": "white",
    "completed": "green",
    "timed_out": "red",
}


def console() -> Console:
    return Console(width=None if sys.stdout.isatty() else PIPE_WIDTH, highlight=False)


def compact(value: JSON, limit: int = CELL_CHARS) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, ""))


def cells(*values: str | Text) -> list[Text]:
    """Plain text cells: data is never read as rich markup."""
    return [v if isinstance(v, Text) else Text(v) for v in values]


def show(title: str, table: Table) -> Console:
    """Print a title line (no padding) and the table; returns the console."""
    out = console()
    out.print(Text(title, style="bold"))
    out.print(table)
    return out


def _fields(rows: Iterable[tuple[str, str | Text]]) -> Table:
    table = Table(show_header=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, value in rows:
        table.add_row(*cells(name, value))
    return table


def print_run(run: Run) -> None:
    """One run as a field/value table (empty fields left out)."""
    data = run_to_json(run)
    rows: list[tuple[str, str | Text]] = []
    for name, value in data.items():
        if value is None or value == "":
            continue
        if name == "status":
            rows.append((name, status_text(str(value))))
        elif isinstance(value, str):
            rows.append((name, value))
        else:
            rows.append((name, compact(value)))
    show(f"run {run.id}", _fields(rows))


def print_runs(runs: Sequence[Run], cursor: str | None) -> None:
    table = Table()
    for name in ("id", "task", "queue", "status", "attempt", "created", "updated"):
        table.add_column(name, no_wrap=name in ("id", "status"))
    for run in runs:
        table.add_row(
            *cells(
                run.id,
                run.task,
                run.queue,
                status_text(run.status.value),
                str(run.attempt),
                iso(run.created_at) or "",
                iso(run.updated_at) or "",
            )
        )
    out = show(f"{len(runs)} run(s), newest first", table)
    if cursor:
        out.print(f"more: --cursor {cursor}", soft_wrap=True, markup=False)


def print_events(run_id: str, events: Sequence[RunEvent]) -> None:
    table = Table()
    for name in ("seq", "at", "attempt", "type", "data"):
        table.add_column(name, no_wrap=name != "data", overflow="fold")
    for event in events:
        table.add_row(
            *cells(
                str(event.seq),
                iso(event.at) or "",
                str(event.attempt),
                event.type.value,
                compact(event.data) if event.data else "",
            )
        )
    show(f"history of run {run_id}", table)


def print_attempts(run_id: str, attempts: Sequence[Attempt]) -> None:
    table = Table()
    for name in ("number", "worker", "started", "ended", "outcome", "failure"):
        table.add_column(name, no_wrap=name != "failure", overflow="fold")
    for attempt in attempts:
        failure = attempt.failure
        table.add_row(
            *cells(
                str(attempt.number),
                attempt.worker or "",
                iso(attempt.started_at) or "",
                iso(attempt.ended_at) or "",
                status_text(attempt.outcome or "running"),
                f"{failure.type}: {failure.message}" if failure else "",
            )
        )
    show(f"attempts of run {run_id}", table)


def print_token(token: Token) -> None:
    rows: list[tuple[str, str | Text]] = []
    for name, value in token_to_json(token).items():
        if value is None:
            continue
        shown = value if isinstance(value, str) else compact(value)
        rows.append((name, status_text(shown) if name == "status" else shown))
    show(f"token {token.id}", _fields(rows))
