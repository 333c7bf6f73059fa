"""The ``backlog`` scenario's tables (bench/backlog.py measures it)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def backlog_table(rows: list[dict[str, Any]], backend: str) -> Table:
    first = rows[0]
    table = Table(
        title=f"Republish under a backlog: {first['runs']} runs at once, republish_after "
        f"{first['republish_after_s']:g} s, a pass every {first['pass_interval_s']:g} s or "
        f"back to back, sync worker with {first['concurrency']} threads ({backend})"
    )
    headers = ("mode", "seconds", "trigger, hold s", "passes", "pass s", "wakeups/run")
    for header in (*headers, "republished/run", "held", "DDB/run", "SQS/run", "left", "run >1"):
        table.add_column(header, justify="left" if header == "mode" else "right")
    table.add_column("status")
    for row in rows:
        per = row["per_run"]
        table.add_row(
            row["mode"],
            _f(row["seconds"], 1),
            f"{_f(row['trigger_s'], 1)}, {_f(row['hold_s'], 1)}",
            str(row["passes"]),
            _f(row["pass_seconds_mean"], 1),
            _f(per["wakeups_sent"]),
            _f(per["republished"]),
            str(row["in_line"]),
            _f(per["dynamodb_requests"]),
            _f(per["sqs_requests"]),
            str(row["left_in_queue"]),
            str(row["executed_more_than_once"]),
            row["status"],
        )
    table.caption = (
        "seconds: from the first pass (just before the trigger) to the last run executed; "
        "trigger, hold: when trigger_many returned, when consumers started; "
        "pass s: mean; wakeups/run: messages SQS accepted, the trigger's one per run "
        "included; held: due runs a pass held in line (summed over passes); left: "
        "duplicates in the queue when every run had ended (drained after, counted); "
        "run >1: runs executed more than once"
    )
    return table


def backlog_requests_table(rows: list[dict[str, Any]], backend: str) -> Table:
    table = Table(title=f"Republish under a backlog: requests per run by operation ({backend})")
    table.add_column("operation")
    for row in rows:
        table.add_column(row["mode"], justify="right")
        table.add_column("of which maint.", justify="right")
    operations = sorted({op for row in rows for op in row["requests_per_run"]})
    for op in operations:
        cells = []
        for row in rows:
            cells.append(_f(row["requests_per_run"].get(op, 0.0)))
            cells.append(_f(row["maintenance_requests_per_run"].get(op, 0.0)))
        table.add_row(op, *cells)
    return table


def print_backlog(console: Console, rows: list[dict[str, Any]] | None, backend: str) -> None:
    """The scenario's two tables, if it ran."""
    if rows:
        console.print(backlog_table(rows, backend))
        console.print(backlog_requests_table(rows, backend))
