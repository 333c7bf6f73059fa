"""Readable tables (rich) for the default, non-JSON output.

Every cell, title and line goes through :func:`~runlane_sqs.cli.escaping.printable`:
stored text (failure messages, payloads, keys) never reaches the terminal with its
control characters raw.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from runlane_sqs.api.shapes import iso, run_to_json, token_to_json
from runlane_sqs.cli.escaping import BLOCK_KEEPS, printable
from runlane_sqs.core.attempts import Attempt
from runlane_sqs.core.groups import Group
from runlane_sqs.core.model import JSON, Failure, Progress, Run, RunEvent
from runlane_sqs.core.replay import Divergence
from runlane_sqs.core.tokens import Token
from runlane_sqs.core.versions import VersionReport

PIPE_WIDTH = 200
"""Columns when stdout is not a terminal and ``COLUMNS`` is not set, so ids are not cut."""
RUN_COLUMNS = ("id", "task", "queue", "status", "attempt", "due", "created", "updated")
"""The columns of ``runs list``, left to right."""
RUN_NARROW_DROPS = ("updated", "created", "queue")
"""What ``runs list`` leaves out, in this order, while the table is wider than the
console; past that the task name folds onto more lines. The full run id, the status, the
attempt and the due time always stay whole."""
RUN_FOLDING_COLUMNS = frozenset({"task", "queue"})
UNBOUNDED_WIDTH = 10_000
"""Width to measure a table's natural (unwrapped) width in."""
CELL_CHARS = 120
"""Longest JSON shown in one cell; ``--json`` prints everything."""
STATUS_STYLES = {
    "succeeded": "green",
    "failed": "red",
    "cancelled": "yellow",
    "cancel_requested": "yellow",
    "parked": "bold yellow",
    "running": "cyan",
    "retrying": "magenta",
    "released": "blue",
    "queued": "white",
    "pending": "white",
    "completed": "green",
    "timed_out": "red",
}


def stdout_console() -> Console:
    """stdout at the terminal's width, or ``COLUMNS`` when set; else ``PIPE_WIDTH``."""
    sized = sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit()
    return Console(width=None if sized else PIPE_WIDTH, highlight=False)


def compact(value: JSON, limit: int = CELL_CHARS) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def status_text(status: str) -> Text:
    return Text(printable(status), style=STATUS_STYLES.get(status, ""))


def cells(*values: str | Text) -> list[Text]:
    """Plain text cells: data is never read as rich markup, and control characters are
    shown escaped."""
    return [v if isinstance(v, Text) else Text(printable(v)) for v in values]


def show(title: str, table: Table, out: Console | None = None) -> Console:
    """Print a title line (no padding) and the table; returns the console."""
    out = out or stdout_console()
    out.print(Text(printable(title), style="bold"))
    out.print(table)
    return out


def _fields(rows: Iterable[tuple[str, str | Text]]) -> Table:
    table = Table(show_header=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, value in rows:
        table.add_row(*cells(name, value))
    return table


def failure_line(failure: Failure) -> str:
    """``module.Error: message``, and ``(not retryable)`` when it is not."""
    line = f"{failure.type}: {failure.message}"
    return line if failure.retryable else f"{line} (not retryable)"


def progress_line(progress: Progress) -> str:
    """``3 of 10 (30%): message (attempt 1, at ...)``; the message as stored (a cell or
    a line shows it escaped)."""
    at = f", at {iso(progress.at)}" if progress.at is not None else ""
    return f"{progress.summary()} (attempt {progress.attempt}{at})"


def print_run(run: Run) -> None:
    """One run as a field/value table (empty fields left out), then the latest
    failure's traceback as plain lines."""
    data = run_to_json(run)
    rows: list[tuple[str, str | Text]] = []
    for name, value in data.items():
        if value is None or value in ("", {}):
            continue
        if name == "tags":
            rows.append((name, " ".join(f"{key}={tag}" for key, tag in run.tags.items())))
        elif name == "status":
            rows.append((name, status_text(str(value))))
        elif name == "failure" and run.failure is not None:
            rows.append((name, failure_line(run.failure)))
        elif name == "progress" and run.progress is not None:
            rows.append((name, progress_line(run.progress)))
        elif isinstance(value, str):
            rows.append((name, value))
        else:
            rows.append((name, compact(value)))
    out = show(f"run {run.id}", _fields(rows))
    if run.failure is not None and run.failure.traceback.strip():
        out.print(Text("traceback of the latest failure:", style="bold"))
        out.print(Text(printable(run.failure.traceback.rstrip(), BLOCK_KEEPS)), soft_wrap=True)


def print_group(group: Group) -> None:
    """One group a run opened: its status and counts per status, as a field/value table."""
    rows: list[tuple[str, str | Text]] = [
        ("status", status_text(group.status.value)),
        ("children", f"{group.total} ({group.started} started, {group.running} running)"),
        ("succeeded", str(group.succeeded)),
        ("failed", str(group.failed)),
        ("cancelled", str(group.cancelled)),
        ("max_in_flight", str(group.window)),
        ("tolerate", str(group.tolerate)),
    ]
    if group.joined_at is not None:
        rows.append(("joined_at", group.joined_at.isoformat()))
    show(f"group {group.id} (runs list --parent {group.parent_run_id or group.id})", _fields(rows))


def due_in(run: Run, now: datetime) -> str:
    """``in 45s``, ``in 5m``, ``in 1h30m``, ``in 2d4h`` for a run not yet due; else ``""``."""
    if run.is_terminal or run.due_at is None or run.due_at <= now:
        return ""
    seconds = math.ceil((run.due_at - now).total_seconds())
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 60:
        return f"in {seconds}s"
    if hours == 0:
        return f"in {minutes}m"
    if days == 0:
        return f"in {hours}h{minutes % 60:02d}m" if minutes % 60 else f"in {hours}h"
    return f"in {days}d{hours % 24}h" if hours % 24 else f"in {days}d"


def _run_row(run: Run, now: datetime) -> dict[str, str | Text]:
    return {
        "id": run.id,
        "task": run.task,
        "queue": run.queue,
        "status": status_text(run.status.value),
        "attempt": str(run.attempt),
        "due": due_in(run, now),
        "created": iso(run.created_at) or "",
        "updated": iso(run.updated_at) or "",
    }


@dataclass(frozen=True)
class Listing:
    """The columns of a one-row-per-item table (``runs list``, ``schedules list``)."""

    columns: tuple[str, ...]
    """Left to right."""
    drops: tuple[str, ...]
    """Left out, in this order, while the table is wider than the console; past that the
    folding columns fold onto more lines."""
    folding: frozenset[str]
    right: frozenset[str]
    """Right-justified (numbers)."""

    def table(self, rows: Sequence[dict[str, str | Text]], columns: Sequence[str]) -> Table:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
        for name in columns:
            folds = name in self.folding
            table.add_column(
                name,
                no_wrap=not folds,
                overflow="fold" if folds else "ellipsis",
                min_width=8 if folds else None,
                justify="right" if name in self.right else "left",
            )
        for row in rows:
            table.add_row(*cells(*(row[name] for name in columns)))
        return table

    def fit(self, rows: Sequence[dict[str, str | Text]], out: Console) -> Table:
        """The table of ``rows``, with ``drops`` left out until it fits ``out``."""
        columns = list(self.columns)
        table = self.table(rows, columns)
        unbounded = out.options.update_width(UNBOUNDED_WIDTH)
        for name in self.drops:
            if Measurement.get(out, unbounded, table).maximum <= out.width:
                break
            columns.remove(name)
            table = self.table(rows, columns)
        return table


RUNS = Listing(RUN_COLUMNS, RUN_NARROW_DROPS, RUN_FOLDING_COLUMNS, frozenset({"attempt"}))


def print_runs(runs: Sequence[Run], cursor: str | None, now: datetime) -> None:
    """A page of runs; at narrow widths the columns in ``RUN_NARROW_DROPS`` give way."""
    out = stdout_console()
    table = RUNS.fit([_run_row(run, now) for run in runs], out)
    show(f"{len(runs)} run(s), newest first", table, out)
    if cursor:
        out.print(Text(printable(f"more: --cursor {cursor}")), soft_wrap=True)


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


def print_divergence(divergence: Divergence) -> None:
    """The calls a diverged run's history recorded next to those the new code made."""
    table = Table()
    for name in ("#", "recorded", "new code"):
        table.add_column(name, overflow="fold")
    for position, (recorded, new) in enumerate(divergence.side_by_side(), 1):
        table.add_row(*cells(str(position), recorded, new))
    show(f"history diverged: stopped before {divergence.asked}", table)


def print_versions(report: VersionReport) -> None:
    """Unfinished runs per app version and task, then the runs not started yet."""
    table = Table()
    for name in ("version", "task", "runs", "statuses"):
        table.add_column(name, no_wrap=name != "statuses", overflow="fold")
    for count in report.counts:
        table.add_row(
            *cells(
                count.app_version or "(none recorded)",
                count.task,
                str(count.runs),
                ", ".join(f"{status} {n}" for status, n in count.statuses.items()),
            )
        )
    for task, waiting in report.not_started.items():
        table.add_row(*cells("(not started)", task, str(waiting), ""))
    show(f"unfinished runs under {len(report.versions)} version(s)", table)


def print_attempts(run_id: str, attempts: Sequence[Attempt]) -> None:
    table = Table()
    for name in ("number", "worker", "version", "started", "ended", "outcome", "failure"):
        table.add_column(name, no_wrap=name != "failure", overflow="fold")
    for attempt in attempts:
        failure = attempt.failure
        table.add_row(
            *cells(
                str(attempt.number),
                attempt.worker or "",
                attempt.app_version or "",
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
