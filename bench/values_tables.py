"""The ``values`` measurement's tables (bench/values.py measures it)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

READ_BACK = "runs.get: "
"""Prefix of the operations of ``app.runs.get`` in the operations table."""


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _bytes(value: float) -> str:
    """Decimal units, as the sizes are named."""
    if value >= 1_000_000:
        return f"{value / 1_000_000:,.1f} MB"
    if value >= 1_000:
        return f"{value / 1_000:,.0f} KB"
    return f"{value:,.0f} B"


def values_table(rows: list[dict[str, Any]], backend: str) -> Table:
    table = Table(
        title=f"Large values: per run, a payload and a result of each size, with a payload "
        f"bucket ({backend})"
    )
    headers = ("size", "runs", "DDB writes", "DDB reads", "SQS req", "S3 req", "WCU", "RCU")
    for header in (*headers, "S3 put", "S3 got", "$ / M runs", "start p50 ms", "p95 ms"):
        table.add_column(header, justify="left" if header == "size" else "right")
    for row in rows:
        per, latency = row["per_run"], row["trigger_to_start"]
        bound = "" if row["capacity_complete"] else ">="
        table.add_row(
            row["size"],
            str(row["runs"]),
            _f(per["dynamodb_writes"]),
            _f(per["dynamodb_reads"]),
            _f(per["sqs_requests"]),
            _f(per["s3_requests"]),
            bound + _f(per["write_units"]),
            bound + _f(per["read_units"]),
            _bytes(per["s3_bytes_put"]),
            _bytes(per["s3_bytes_got"]),
            bound + _f(row["usd_per_million_runs"]),
            _f(latency["p50_ms"], 1),
            _f(latency["p95_ms"], 1),
        )
    inline = rows[0]["inline_limit"]
    table.caption = (
        f"one app.trigger per run, drained by the sync worker; values over {inline:,} "
        "bytes (inline_limit) are kept in S3; $ / M runs: DynamoDB units, SQS and S3 "
        "requests at us-east-1 prices (bench/cost.py), S3 storage not included; >=: the "
        "backend reported no capacity for some requests (moto: transactions); start: "
        "trigger -> handler start with an idle worker (not counted)"
    )
    return table


def operations_table(rows: list[dict[str, Any]], backend: str) -> Table:
    table = Table(title=f"Large values: requests per run by operation ({backend})")
    table.add_column("request")
    for row in rows:
        table.add_column(row["size"], justify="right")
    ran = [row["requests_per_run"] for row in rows]
    read = [
        {READ_BACK + op: n for op, n in row["read_back_per_run"]["requests"].items()}
        for row in rows
    ]
    for per_op in (ran, read):
        for op in sorted({op for counts in per_op for op in counts}):
            table.add_row(op, *(_f(counts.get(op, 0.0)) for counts in per_op))
    table.caption = (
        f"{READ_BACK}app.runs.get of a finished run afterwards (its payload and result "
        "opened), counted apart from the run"
    )
    return table


def print_values(console: Console, rows: list[dict[str, Any]] | None, backend: str) -> None:
    """The measurement's two tables, if it ran."""
    if rows:
        console.print(values_table(rows, backend))
        console.print(operations_table(rows, backend))


def codecs_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="Codecs: CPU per MB of JSON (bench/codecs.py)")
    for header in ("codec", "encode ms/MB", "decode ms/MB", "size after"):
        table.add_column(header, justify="left" if header == "codec" else "right")
    for row in rows:
        table.add_row(
            row["codec"],
            _f(row["encode_ms_per_mb"], 1),
            _f(row["decode_ms_per_mb"], 1),
            f"{row['ratio']:.0%}",
        )
    table.caption = (
        "a 1 MB document of order records, encoded and decoded in this process; kms: one "
        "data key from the emulator's KMS, made before timing (a key encrypts values for "
        "5 minutes or 10,000 values)"
    )
    return table


def print_codecs(console: Console, rows: list[dict[str, Any]] | None) -> None:
    if rows:
        console.print(codecs_table(rows))
