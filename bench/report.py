"""The results as rich tables on the terminal and as JSON next to the chart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.backlog_tables import print_backlog
from bench.bulk import print_bulk
from bench.console_tables import print_console
from bench.fanout_tables import print_fanout
from bench.targets import Target
from bench.values_tables import print_codecs, print_values

MOTO_CAPACITY_NOTE = (
    "moto's consumed-capacity figures are not authoritative: it reports none for "
    "transactions and does not charge index writes; DynamoDB Local (--backend aws-local) "
    "is AWS's own implementation and reports them correctly"
)


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def cost_table(rows: list[dict[str, Any]], backend: str) -> Table:
    table = Table(title=f"Cost per run ({backend})")
    for header in ("scenario", "runs", "DDB writes", "DDB reads", "SQS req", "WCU", "of which"):
        table.add_column(header, justify="left" if header == "scenario" else "right")
    table.add_column("RCU", justify="right")
    table.add_column("$ / M runs", justify="right")
    table.add_column("requests (total)")
    for row in rows:
        per = row["per_run"]
        ops = ", ".join(f"{k.split('.')[1]} {v}" for k, v in row["requests"].items())
        table.add_row(
            row["scenario"],
            str(row["runs"]),
            _f(per["dynamodb_writes"]),
            _f(per["dynamodb_reads"]),
            _f(per["sqs_requests"]),
            _f(per["write_units"]),
            f"{_f(per['index_write_units'])} idx",
            _f(per["read_units"]),
            _f(row["usd_per_million_runs"]),
            ops,
        )
    return table


def throughput_table(rows: list[dict[str, Any]], backend: str) -> Table:
    table = Table(title=f"Throughput, one worker process each ({backend})")
    headers = ("system", "concurrency", "runs", "seconds", "runs/s", "x Celery", "peak RSS")
    for header in (*headers, "CPU ms/run", "CPU x Celery", "emulators' CPU ms/run"):
        table.add_column(header, justify="left" if header == "system" else "right")
    table.add_column("status")
    for row in rows:
        rss = row.get("worker_rss")
        table.add_row(
            row["system"],
            str(row["concurrency"]),
            str(row["runs"]),
            _f(row.get("seconds")),
            _f(row.get("runs_per_second"), 1),
            _f(row.get("celery_ratio")),
            f"{rss / 2**20:.0f} MB" if rss else "-",
            _f(row.get("cpu_ms_per_run")),
            _f(row.get("celery_cpu_ratio")),
            ", ".join(
                f"{name} {_f(ms)}" for name, ms in row.get("emulator_cpu_ms_per_run", {}).items()
            )
            or "-",
            row["status"],
        )
    return table


def throughput_cpu_note(rows: list[dict[str, Any]]) -> str:
    """What the CPU column counts, with the process counts seen."""
    counted = ", ".join(
        f"{r['system']} {r['cpu_processes']}" for r in rows if r.get("cpu_processes")
    )
    return (
        "CPU ms/run: user + system CPU of the worker process and any children it forks "
        "(a prefork pool's), from the first trigger to the last completion, over runs; "
        f"processes counted: {counted or '-'}. The emulators' CPU is theirs over the same "
        "phase: on AWS it is not the worker host's."
    )


def maintenance_table(rows: list[dict[str, Any]], backend: str) -> Table:
    table = Table(title=f"One maintenance pass, 10 due runs ({backend})")
    for header in ("runs in table", "seed s", "pass s", "requests", "items read", "per due"):
        table.add_column(header, justify="right")
    table.add_column("RCU", justify="right")
    table.add_column("status")
    for row in rows:
        table.add_row(
            f"{row['table_runs']:,}",
            _f(row.get("seed_seconds"), 1),
            _f(row.get("pass_seconds")),
            str(sum(row["requests"].values())),
            str(row["items_read"]) if row["status"] == "ok" else "-",
            _f(row.get("items_read_per_due_run")),
            _f(row.get("read_units"), 1) if row["status"] == "ok" else "-",
            row["status"],
        )
    return table


def schedules_table(result: dict[str, Any], backend: str) -> Table:
    count = result["schedules"]
    table = Table(title=f"Maintenance passes with {count:,} schedules, 10 due ({backend})")
    for header in ("pass", "runs made", "DynamoDB req", "SQS req", "items read", "RCU", "WCU"):
        table.add_column(header, justify="right")
    table.add_column("requests")
    for row in result["passes"]:
        table.add_row(
            row["pass"],
            str(row["runs_created"]),
            str(row["dynamodb_requests"]),
            str(row["sqs_requests"]),
            str(row["items_read"]),
            _f(row["read_units"], 1),
            _f(row["write_units"], 1),
            ", ".join(f"{k.split('.')[-1]} {v}" for k, v in row["requests"].items()),
        )
    each = result["per_occurrence"]
    table.caption = (
        f"per materialized occurrence (10 due minus none due): "
        f"{each['dynamodb_requests']:.1f} DynamoDB requests, {each['sqs_requests']:.1f} SQS, "
        f"{each['write_units']:.1f} WCU ({each['index_write_units']:.1f} index), "
        f"{each['read_units']:.2f} RCU"
    )
    return table


def limits_table(rows: list[dict[str, Any]], backend: str) -> Table:
    first = rows[0]
    table = Table(
        title=f"Concurrency limits: {first['runs']} runs each, {first['handler_ms']:g} ms "
        f"handler, sync worker with {first['concurrency']} threads ({backend})"
    )
    headers = ("case", "seconds", "runs/s", "x unl", "DDB/run", "x unl", "SQS/run", "x unl")
    for header in (*headers, "WCU/run", "x unl", "RCU/run", "runs waited", "waits"):
        table.add_column(header, justify="left" if header == "case" else "right")
    table.add_column("most at once", justify="right")
    table.add_column("status")
    for row in rows:
        per, ratio = row["per_run"], row.get("x_unlimited", {})
        units = {"complete": "", "lower bound": ">="}.get(row["capacity"])
        table.add_row(
            row["case"],
            _f(row.get("seconds")),
            _f(row.get("runs_per_second"), 1),
            _f(ratio.get("runs_per_second")),
            _f(per["dynamodb_requests"]),
            _f(ratio.get("dynamodb_requests")),
            _f(per["sqs_requests"]),
            _f(ratio.get("sqs_requests")),
            "n/a" if units is None else units + _f(per["write_units"]),
            "n/a" if units is None else units + _f(ratio.get("write_units")),
            "n/a" if units is None else units + _f(per["read_units"]),
            str(row["runs_waited"]),
            f"{row['waits']}/{row['slot_freed']}",
            str(row["most_at_once"]),
            row["status"],
        )
    table.caption = (
        "x unl: the case's figure over the unlimited case's; runs waited: runs with a "
        "waiting_for_slot event; waits: waiting_for_slot / slot_freed events; "
        "most at once: handlers running together; WCU/RCU >=: a lower bound, as refused "
        "conditional writes report no capacity (DynamoDB charges them); n/a: the backend "
        "reported none for others too (moto: transactions)"
    )
    return table


def limits_requests_table(rows: list[dict[str, Any]], backend: str) -> Table:
    table = Table(title=f"Concurrency limits: requests per run by operation ({backend})")
    table.add_column("operation")
    for row in rows:
        table.add_column(row["case"], justify="right")
    operations = sorted({op for row in rows for op in row["requests_per_run"]})
    for op in operations:
        table.add_row(op, *(_f(row["requests_per_run"].get(op, 0.0)) for row in rows))
        if any(op in row.get("refused_per_run", {}) for row in rows):
            refused = (_f(row.get("refused_per_run", {}).get(op, 0.0)) for row in rows)
            table.add_row("  of which refused", *refused)
    table.caption = (
        "refused: conditional writes refused (a claim finding the limit reached, a wake "
        "another got to first)"
    )
    return table


def print_limits(console: Console, rows: list[dict[str, Any]] | None, backend: str) -> None:
    """The limits scenario's two tables, if it ran."""
    if rows:
        console.print(limits_table(rows, backend))
        console.print(limits_requests_table(rows, backend))


def latency_table(rows: list[dict[str, Any]], backend: str) -> Table:
    table = Table(title=f"Latency, idle worker, no maintenance pass ({backend})")
    for header in ("measure", "n", "p50 ms", "p95 ms", "max ms"):
        table.add_column(header, justify="left" if header == "measure" else "right")
    for row in rows:
        table.add_row(
            row["name"], str(row["n"]), _f(row["p50_ms"], 1), _f(row["p95_ms"], 1),
            _f(row["max_ms"], 1),
        )  # fmt: skip
    return table


def coldstart_table(result: dict[str, Any]) -> Table:
    table = Table(title="Lambda cold start, fresh interpreters (no AWS request)")
    for header in ("phase", "n", "p50 ms", "p90 ms", "max ms"):
        table.add_column(header, justify="left" if header == "phase" else "right")
    for row in result["phases"]:
        table.add_row(
            row["name"], str(row["n"]), _f(row["p50_ms"], 1), _f(row["p90_ms"], 1),
            _f(row["max_ms"], 1),
        )  # fmt: skip
    table.caption = (
        f"each phase after the one above, in the same process; {result['modules_loaded']} "
        "modules loaded at the end; bytecode cached (bench/coldstart.py)"
    )
    return table


def clients_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="client CPU per request: botocore against the lean client")
    headers = ("worker", "request", "botocore CPU µs", "lean CPU µs", "lean / botocore", "wall ms")
    for header in headers:
        table.add_column(header, justify="left" if header in ("worker", "request") else "right")
    by = {(r["kind"], r.get("worker", "sync"), r["request"]): r for r in rows}
    for worker, request in dict.fromkeys((r.get("worker", "sync"), r["request"]) for r in rows):
        botocore, lean = by.get(("botocore", worker, request)), by.get(("lean", worker, request))
        cpu = [row["cpu_us"] if row else None for row in (botocore, lean)]
        wall = [f"{row['wall_ms']:.2f}" if row else "-" for row in (botocore, lean)]
        ratio = f"{cpu[1] / cpu[0]:.2f}" if cpu[0] and cpu[1] is not None else "-"
        table.add_row(
            worker,
            request,
            *(f"{c:,.0f}" if c is not None else "-" for c in cpu),
            ratio,
            " / ".join(wall),
        )
    table.caption = (
        "one request at a time from the bench process (sync: boto3's clients; async: "
        "aiobotocore's, as the async worker opens them); the median of 3 rounds, the kinds "
        "alternating; CPU is the process's (bench/clients.py)"
    )
    return table


def print_clients(console: Console, rows: list[dict[str, Any]] | None) -> None:
    """The client CPU table, if it ran."""
    if rows:
        console.print(clients_table(rows))


def print_coldstart(console: Console, result: dict[str, Any] | None) -> None:
    """The cold start table, if it ran (it needs no backend, so names none)."""
    if result:
        console.print(coldstart_table(result))


def tracing_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(
        title=f"Traces and metrics: CPU time per run (trigger + attempt of a no-op task, "
        f"in memory, sync worker), {rows[0]['runs']} runs, fastest round"
    )
    for header in ("mode", "us/run", "overhead us/run", "overhead %", "spans/run"):
        table.add_column(header, justify="left" if header == "mode" else "right")
    off = rows[0]["us_per_run"]
    for row in rows:
        overhead = row["overhead_us"] or 0.0
        table.add_row(
            row["mode"],
            _f(row["us_per_run"], 0),
            _f(overhead, 0),
            _f(overhead / off * 100, 1),
            _f(row["spans_per_run"], 1),
        )
    return table


def print_tracing(console: Console, rows: list[dict[str, Any]] | None) -> None:
    if rows:
        console.print(tracing_table(rows))


def targets_table(targets: list[Target], backend: str) -> Table:
    table = Table(title=f"Targets ({backend})")
    for header in ("target", "limit", "measured", "result", "note"):
        table.add_column(header)
    for t in targets:
        result = {True: "[green]met", False: "[red]missed", None: "[yellow]not measured"}[t.met]
        measured = "-" if t.measured is None else f"{t.measured:,.2f}{t.unit}"
        table.add_row(t.name, t.limit, measured, result, t.note)
    return table


def print_results(console: Console, results: dict[str, Any], targets: list[Target]) -> None:
    backend = results["backend"]
    console.print(f"\nbackend: {results['backend_description']}")
    if results.get("cost"):
        console.print(cost_table(results["cost"], backend))
        if backend == "moto":
            console.print(f"[yellow]note:[/] {MOTO_CAPACITY_NOTE}")
    if results.get("throughput"):
        console.print(throughput_table(results["throughput"], backend))
        console.print(f"[yellow]note:[/] {throughput_cpu_note(results['throughput'])}")
    if results.get("maintenance"):
        console.print(maintenance_table(results["maintenance"], backend))
    if results.get("schedules"):
        console.print(schedules_table(results["schedules"], backend))
    print_limits(console, results.get("limits"), backend)
    print_backlog(console, results.get("backlog"), backend)
    if results.get("latency"):
        console.print(latency_table(results["latency"], backend))
    for memory in results.get("memory") or []:
        rss = memory.get("worker_rss")
        console.print(
            f"worker memory: {memory.get('kind', 'sync')} worker, concurrency "
            f"{memory['concurrency']}, {memory['runs']} runs: peak RSS {rss / 2**20:.0f} MB "
            f"(VmHWM), {(memory.get('peak_rss') or 0) / 2**20:.0f} MB (psutil samples); "
            f"{memory['status']}"
            if rss
            else f"worker memory: {memory['status']}"
        )
    print_coldstart(console, results.get("coldstart"))
    print_tracing(console, results.get("tracing"))
    print_console(console, results.get("console"), backend)
    print_fanout(console, results.get("fanout"), backend)
    print_clients(console, results.get("clients"))
    print_values(console, results.get("values"), backend)
    print_codecs(console, results.get("codecs"))
    print_bulk(console, results.get("bulk"), backend)
    for note in results.get("notes", []):
        console.print(f"[yellow]note:[/] {note}")
    console.print(targets_table(targets, backend))
    for error in results.get("errors", []):
        console.print(f"[red]error:[/] {error}")


def write_json(path: Path, results: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
