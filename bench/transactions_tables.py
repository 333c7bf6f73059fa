"""The ``transactions`` measurement's tables (bench/transactions.py measures it)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def transactions_table(rows: list[dict[str, Any]], backend: str) -> Table:
    table = Table(
        title=f"Transactional triggers: per run, {rows[0]['runs']} runs each way ({backend})"
    )
    headers = ("way", "DDB req", "SQS req", "WCU reported", "WCU computed", "of which idx")
    for header in (*headers, "RCU", "$ / M runs", "trigger p50 ms", "p95 ms"):
        table.add_column(header, justify="left" if header == "way" else "right")
    for row in rows:
        per, computed, latency = row["per_run"], row["computed_per_run"], row["trigger_latency"]
        bound = "" if row["capacity_complete"] else ">="
        partial = "" if row["computed_complete"] else ">="
        table.add_row(
            row["way"],
            _f(per["dynamodb_requests"]),
            _f(per["sqs_requests"]),
            bound + _f(per["write_units"]),
            partial + _f(computed["write_units"]),
            partial + _f(computed["index_write_units"]),
            bound + _f(per["read_units"]),
            partial + _f(row["usd_per_million_runs_computed"]),
            _f(latency["p50_ms"], 1),
            _f(latency["p95_ms"], 1),
        )
    table.caption = (
        "counted: the trigger calls only (the runs are drained afterwards, not counted); "
        "WCU reported: what the backend's ConsumedCapacity said (>=: none for some "
        "requests, moto's TransactWriteItems); WCU computed: from the items sent, by "
        "DynamoDB's rules (1 unit per KB, twice in a transaction; index entries 1 per KB, "
        "which DynamoDB Local charges twice in a transaction); "
        "$ / M runs: computed units and SQS requests at us-east-1 prices (bench/cost.py); "
        "latency: wall time of the trigger call, of PutItem + trigger, of the with block"
    )
    return table


def operations_table(rows: list[dict[str, Any]], backend: str) -> Table:
    table = Table(title=f"Transactional triggers: requests per run by operation ({backend})")
    table.add_column("request")
    for row in rows:
        table.add_column(row["way"], justify="right")
    per_op = [row["requests_per_run"] for row in rows]
    for op in sorted({op for counts in per_op for op in counts}):
        table.add_row(op, *(_f(counts.get(op, 0.0)) for counts in per_op))
    reported = [row["reported_write_units_by_operation"] for row in rows]
    for op in sorted({op for units in reported for op in units}):
        table.add_row(f"WCU reported: {op}", *(_f(units.get(op)) for units in reported))
    return table


def print_transactions(console: Console, rows: list[dict[str, Any]] | None, backend: str) -> None:
    """The measurement's two tables and its notes, if it ran."""
    if not rows:
        return
    console.print(transactions_table(rows, backend))
    console.print(operations_table(rows, backend))
    for row in rows:
        for note in row["notes"]:
            console.print(f"[yellow]note:[/] transactions ({row['way']}): {note}")
