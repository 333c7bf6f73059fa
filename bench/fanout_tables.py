"""The ``fanout`` scenario's table and lines (bench/fanout.py measures it)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from bench.counting import DYNAMODB_WRITES

TOTALS = (
    ("DynamoDB requests", "dynamodb_requests"),
    ("DynamoDB writes", "dynamodb_writes"),
    ("DynamoDB reads", "dynamodb_reads"),
    ("SQS requests", "sqs_requests"),
    ("write units", "write_units"),
    ("read units", "read_units"),
)


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def fanout_table(result: dict[str, Any], backend: str) -> Table:
    children = result["children"]
    table = Table(
        title=f"ctx.map over {children:,} children, max_in_flight {result['max_in_flight']}, "
        f"sync worker with {result['concurrency']} threads: per child ({backend})"
    )
    headers = ("request", "map, per child", "plain run", "extra per child", "refused")
    for header in (*headers, "WCU, map per child", "WCU, plain run"):
        table.add_column(header, justify="left" if header == "request" else "right")
    per_child, plain = result["requests_per_child"], result["plain_requests_per_run"]
    units = result["write_units_per_child"]
    for op, extra in result["extra_requests_per_child"].items():
        refused = result["refused"].get(op)
        writes = op.split(".")[1] in DYNAMODB_WRITES
        table.add_row(
            op,
            _f(per_child[op]),
            _f(plain[op]),
            _f(extra),
            _f(refused / children) if refused else "",
            ("n/a" if units is None else _f(units[op])) if writes else "",
            _f(result["plain_write_units_per_run"][op]) if writes else "",
        )
    extra = result["extra_per_child"]
    for label, key in TOTALS:
        known = extra[key] is not None
        table.add_row(
            f"[bold]{label}",
            "",
            _f(result["plain_per_run"][key]) if known else "n/a",
            _f(extra[key]) if known else "n/a",
            "",
            "",
            "",
        )
    table.caption = (
        f"extra per child: the map's total (parent, opening, children, join) less "
        f"{children + 1:,} plain runs (trigger_many, {result['baseline_runs']} measured), "
        f"over {children:,}; refused: conditional writes refused, per child; capacity "
        f"{result['capacity']} (n/a: the backend reported none for some requests, moto: "
        "transactions)"
    )
    return table


def fanout_lines(result: dict[str, Any]) -> list[str]:
    """The scenario's other figures, one line each."""
    mib = 2**20
    samples = result["join_samples_ms"]
    rss_peak, rss_before = result["rss_peak"], result["rss_before"]
    lines = [
        f"fanout: {result['children']:,} children in {_f(result['seconds'], 1)} s; parent "
        f"resumed {result['parent_resumes']} time(s)",
    ]
    marginal, per_map = result.get("marginal_extra_per_child"), result.get("parent_extra_per_map")
    if marginal and per_map:
        figures = ((label, marginal[key], per_map[key]) for label, key in TOTALS)
        lines.append(
            f"fanout: one more child over a plain run / the parent's own extra per map (the "
            f"slope and intercept of this map and one of {result['small_children']} "
            "children): "
            + "; ".join(f"{label} {_f(child)} / {_f(parent)}" for label, child, parent in figures)
        )
    return [
        *lines,
        f"fanout: last child's outcome -> parent resumed {_f(result['join_ms'], 0)} ms, -> its "
        f"next attempt started {_f(result['resume_start_ms'], 0)} ms (stored timestamps); "
        f"over {len(samples)} more maps of 20 children: p50 {_f(result['join_p50_ms'], 0)} "
        f"ms, max {_f(result['join_max_ms'], 0)} ms",
        f"fanout: parent's item after the join {result['parent_item_bytes']:,} bytes, a "
        f"child's {result['child_item_bytes']:,} bytes (DynamoDB's sizing rules)",
        f"fanout: bench process (the worker runs in it) RSS {rss_before / mib:.0f} MB before "
        f"the map, peak {rss_peak / mib:.0f} MB while it drained (psutil, every 20 ms)",
        result["celery_chord"],
    ]


def print_fanout(console: Console, result: dict[str, Any] | None, backend: str) -> None:
    """The scenario's table and lines, if it ran."""
    if result:
        console.print(fanout_table(result, backend))
        for line in fanout_lines(result):
            console.print(line)
