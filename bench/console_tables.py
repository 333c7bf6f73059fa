"""The console measurement's table (bench/console.py), from the results' JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _ops(requests: dict[str, int]) -> str:
    return ", ".join(f"{name.split('.')[-1]} {n}" for name, n in requests.items()) or "-"


def _units(page: dict[str, Any]) -> str:
    """Read units reported; ``+``: some responses reported none (a lower bound)."""
    units = page["read_units"]
    if units is None:
        return "-"
    return f"{units:,.1f}" + ("" if page["capacity_complete"] else "+")


def console_table(rows: list[dict[str, Any]], backend: str) -> Table:
    table = Table(title=f"Web console: one page load, by runs in the table ({backend})")
    headers = ("runs in table", "page", "loads", "ms (median)", "DDB req", "SQS req")
    for header in (*headers, "items read", "RCU"):
        table.add_column(header, justify="left" if header == "page" else "right")
    table.add_column("requests by operation")
    table.add_column("status")
    for row in rows:
        size = f"{row['table_runs']:,}"
        if not row["pages"]:
            table.add_row(size, "-", *("-" for _ in range(7)), row["status"])
            continue
        for page in row["pages"]:
            table.add_row(
                size,
                page["page"],
                str(page["loads"]),
                f"{page['ms_median']:,.0f}" if page["ms_median"] is not None else "-",
                str(page["dynamodb_requests"]),
                str(page["sqs_requests"]),
                f"{page['items_read']:,}",
                _units(page),
                _ops(page["requests"]),
                row["status"] if page["status_code"] == 200 else f"HTTP {page['status_code']}",
            )
            size = ""
    table.caption = _caption(rows)
    return table


def _caption(rows: list[dict[str, Any]]) -> str:
    mixes = "; ".join(
        f"{row['table_runs']:,}: "
        + ", ".join(f"{n:,} {status}" for status, n in row["mix"].items())
        + (f" (seeded in {row['seed_seconds']:.0f} s)" if row.get("seed_seconds") else "")
        for row in rows
    )
    return (
        "counted after the cookie is set and each page loaded once (a console process's "
        "first load builds clients and looks up queue URLs); requests and items of the "
        "first counted load, ms the median of the loads; items read: Query/Scan "
        "ScannedCount plus items GetItem/BatchGetItem returned; RCU as the backend "
        f"reports it (ReturnConsumedCapacity asked by the bench's counter). Runs: {mixes}"
    )


def print_console(console: Console, rows: list[dict[str, Any]] | None, backend: str) -> None:
    """The console measurement's table, if it ran."""
    if rows:
        console.print(console_table(rows, backend))
        varied = [
            f"{row['table_runs']:,} {page['page']}"
            for row in rows
            for page in row["pages"]
            if page["requests_varied"]
        ]
        if varied:
            console.print(f"[yellow]note:[/] requests varied between loads: {', '.join(varied)}")
