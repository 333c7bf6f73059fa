"""The ``rates`` measurement's table (bench/rates.py measures it)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def rates_table(rows: list[dict[str, Any]], backend: str) -> Table:
    table = Table(title=f"Rate limits: per run, {rows[0]['runs']} runs each ({backend})")
    headers = ("case", "runs/s", "DDB req", "of which", "SQS req", "WCU", "RCU")
    for header in (*headers, "refused claims", "starts/s", "of the rate", "most in 1 s"):
        table.add_column(header, justify="left" if header in ("case", "of which") else "right")
    for row in rows:
        per, by_op = row["per_run"], row["requests_per_run"]
        bound = "" if row["capacity"] == "complete" else ">="
        dynamodb = ", ".join(
            f"{v:.2f} {op.removeprefix('dynamodb.')}"
            for op, v in by_op.items()
            if op.startswith("dynamodb.")
        )
        table.add_row(
            row["case"],
            _f(row["runs_per_second"], 1),
            _f(per["dynamodb_requests"]),
            dynamodb,
            _f(per["sqs_requests"]),
            bound + _f(per["write_units"]),
            bound + _f(per["read_units"]),
            _f(row["refused_claims_per_run"]),
            _f(row["starts_per_second"], 1),
            _f(row["of_the_rate"]),
            str(row["most_in_a_second"]),
        )
    table.caption = (
        "counted: the triggers, the claims, the reservations, the sleeps and the attempts; "
        "refused claims: waiting_for_rate events per run; starts/s: (runs - 1) over the "
        "first to the last start; of the rate: starts/s over the limit; most in 1 s: the "
        "most starts in any one-second window (bench/rates.py)"
    )
    return table


def print_rates(console: Console, rows: list[dict[str, Any]] | None, backend: str) -> None:
    """The measurement's table, if it ran."""
    if rows:
        console.print(rates_table(rows, backend))
