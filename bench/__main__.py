"""``python -m bench``: every measurement in one invocation, against one backend.

Shows progress, prints tables of results and targets, and writes
``bench/results/<UTC timestamp>.json`` and ``.png``. Exits 1 if a measurement broke
(a missed target is reported, not an error).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench import backends, chart, report, targets
from bench.backlog import measure_backlog
from bench.bulk import measure_bulk
from bench.clients import STEPS as CLIENT_STEPS
from bench.clients import measure_clients
from bench.codecs import measure_codecs
from bench.coldstart import measure_coldstart
from bench.console import measure_console
from bench.cost import measure_costs
from bench.fanout import JOIN_CHILDREN, measure_fanout
from bench.latency import measure_latency
from bench.limits import limits_json, measure_limits
from bench.maintenance_scale import measure_maintenance
from bench.rates import measure_rates
from bench.rates_tables import print_rates
from bench.schedules import measure_schedules, per_occurrence
from bench.throughput import celery_cpu_ratio, celery_ratio, measure_throughput, runlane_worker
from bench.tracing import MODES, ROUNDS, measure_tracing
from bench.transactions import WAYS, measure_transactions
from bench.transactions_tables import print_transactions
from bench.typed import measure_typed, print_typed
from bench.values import KB, MB, measure_values
from bench.workers import ASYNC, SYNC

RESULTS_DIR = Path(__file__).resolve().parent / "results"
CODEC_DOCUMENT_BYTES = 1 * MB
"""The JSON document each codec encodes (bench/codecs.py)."""
MEASUREMENTS = (
    "cost",
    "throughput",
    "maintenance",
    "schedules",
    "limits",
    "latency",
    "memory",
    "coldstart",
    "backlog",
    "tracing",
    "console",
    "fanout",
    "clients",
    "values",
    "codecs",
    "transactions",
    "rates",
    "bulk",
    "typed",
)
MEMORY_CONCURRENCY = 32
CONSOLE_WIDTH = 150
"""Tables' width when the output is not a terminal (make, CI logs)."""


@dataclass(frozen=True)
class Sizes:
    cost_runs: int = 50
    throughput_runs: int = 2000
    maintenance_sizes: list[int] = field(default_factory=lambda: [1_000, 10_000, 100_000])
    latency_iterations: int = 20
    memory_runs: int = 1000
    schedules: int = 1000
    limit_runs: int = 100
    rate_runs: int = 100
    """Runs per rate limit case (bench/rates.py)."""
    bulk_runs: int = 10_000
    """Failed runs a bulk retry retries (bench/bulk.py)."""
    coldstart_samples: int = 20
    backlog_runs: int = 300
    tracing_runs: int = 2000
    console_sizes: list[int] = field(default_factory=lambda: [100, 10_000, 100_000])
    console_loads: int = 3
    fanout_children: int = 1_000
    fanout_children_aws_local: int = 10_000
    fanout_join_groups: int = 5
    """Small maps after the counted one, each timing one more join."""
    client_calls: int = 1000
    """Requests of each kind measured per client and round (bench/clients.py)."""
    value_runs: dict[int, int] = field(
        default_factory=lambda: {1 * KB: 20, 100 * KB: 20, 1 * MB: 5, 10 * MB: 3}
    )
    """Runs counted per size of payload and result, in bytes (bench/values.py)."""
    value_latency_samples: int = 10
    """Trigger -> start samples per size, at most its runs."""
    codec_rounds: int = 20
    """Encodings and decodings of the 1 MB document timed per codec (bench/codecs.py)."""
    transaction_runs: int = 200
    """Runs per way to trigger, plain to transactional (bench/transactions.py)."""
    transaction_warmup: int = 50
    """Runs per way triggered before, neither counted nor timed."""
    typed_runs: int = 2000
    """Runs per kind, plain and pydantic, whose CPU is compared (bench/typed.py)."""


SMOKE = Sizes(
    cost_runs=10,
    throughput_runs=50,
    maintenance_sizes=[100, 1_000],
    latency_iterations=5,
    memory_runs=100,
    schedules=100,
    limit_runs=20,
    rate_runs=20,
    bulk_runs=100,
    coldstart_samples=5,
    backlog_runs=20,
    tracing_runs=100,
    console_sizes=[100, 1_000],
    console_loads=1,
    fanout_children=50,
    fanout_children_aws_local=50,
    fanout_join_groups=2,
    client_calls=50,
    value_runs={1 * KB: 2, 100 * KB: 2},
    value_latency_samples=2,
    codec_rounds=2,
    transaction_runs=5,
    transaction_warmup=2,
    typed_runs=8,
)


class Runner:
    """Runs each measurement under a progress bar; a failure is recorded, not raised."""

    def __init__(self, backend: backends.Backend, sizes: Sizes, progress: Progress) -> None:
        self.backend = backend
        self.sizes = sizes
        self.progress = progress
        self.results: dict[str, Any] = {"errors": [], "notes": []}

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """One measurement: logged when it ends (progress bars do not show in CI logs)."""
        started = time.monotonic()
        outcome = "done"
        try:
            yield
        except Exception as exc:
            outcome = "failed"
            self.results["errors"].append(f"{name}: {type(exc).__name__}: {exc}")
            self.results["errors"].append(traceback.format_exc(limit=4))
        seconds = time.monotonic() - started
        self.results.setdefault("step_seconds", {})[name] = round(seconds, 1)
        self.progress.console.log(f"{name}: {outcome} in {seconds:.0f} s")

    def bar(self, description: str, total: int) -> Callable[[int], None]:
        task = self.progress.add_task(description, total=total)
        return lambda done: self.progress.update(task, completed=done)

    def cost(self) -> None:
        runs = self.sizes.cost_runs
        done = self.bar("cost per run: 5 scenarios", 1)
        rows = measure_costs(self.backend.app, runs, backend=self.backend.name)
        done(1)
        self.results["cost"] = [r.to_json() for r in rows]

    def throughput(self) -> None:
        runs = self.sizes.throughput_runs
        rows = measure_throughput(
            self.backend, runs, lambda system: self.bar(f"throughput: {system}", runs)
        )
        self.results["throughput"] = [
            {
                **r.to_json(),
                "celery_ratio": celery_ratio(rows, r.system),
                "celery_cpu_ratio": celery_cpu_ratio(rows, r.system),
            }
            for r in rows
        ]

    def maintenance(self) -> None:
        rows = measure_maintenance(
            self.backend,
            self.sizes.maintenance_sizes,
            lambda size: self.bar(f"maintenance: seed {size:,} runs", size),
        )
        self.results["maintenance"] = [r.to_json() for r in rows]

    def schedules(self) -> None:
        done = self.bar(f"schedules: {self.sizes.schedules:,} of which 10 due", 1)
        rows = measure_schedules(self.backend, self.sizes.schedules)
        done(1)
        self.results["schedules"] = {
            "schedules": self.sizes.schedules,
            "passes": [r.to_json() for r in rows],
            "per_occurrence": per_occurrence(rows[1], rows[2]),
        }

    def limits(self) -> None:
        """The same runs on a queue without a limit, then with limits of 8 and 4 (the
        worker's concurrency, and half of it)."""
        runs = self.sizes.limit_runs
        rows = measure_limits(
            self.backend.app, runs, lambda case: self.bar(f"limits: {case}", runs)
        )
        self.results["limits"] = limits_json(rows)
        for row in rows:
            if row.status != "ok":
                self.results["errors"].append(f"limits ({row.case}): {row.status}")

    def rates(self) -> None:
        """The same runs without a rate limit, under one the worker never reaches, and
        under one below what it does (bench/rates.py)."""
        runs = self.sizes.rate_runs
        rows = measure_rates(self.backend.app, runs, lambda case: self.bar(f"rates: {case}", runs))
        self.results["rates"] = limits_json(rows)
        for row in rows:
            if row.status != "ok":
                self.results["errors"].append(f"rates ({row.case}): {row.status}")

    def bulk(self) -> None:
        """A bulk retry of failed runs by the CLI, SIGKILLed mid-way and resumed
        (bench/bulk.py)."""
        runs = self.sizes.bulk_runs
        row = measure_bulk(self.backend, runs, self.bar("bulk: seed, then retry", 2 * runs))
        self.results["bulk"] = row.to_json()
        if row.status != "ok":
            self.results["errors"].append(f"bulk: {row.status}")

    def latency(self) -> None:
        n = self.sizes.latency_iterations
        rows = measure_latency(self.backend, n, self.bar("latency: trigger, token", n))
        self.results["latency"] = [r.to_json() for r in rows]

    def memory(self) -> None:
        """Peak RSS of each worker kind at concurrency 32."""
        runs = self.sizes.memory_runs
        rows = []
        for kind in (SYNC, ASYNC):
            bar = self.bar(f"memory: {kind} worker, concurrency {MEMORY_CONCURRENCY}", runs)
            row = runlane_worker(self.backend, kind, runs, MEMORY_CONCURRENCY, bar)
            rows.append({**row.to_json(), "kind": kind})
            if row.status != "ok":
                self.results["errors"].append(f"memory ({kind}): {row.status}")
        self.results["memory"] = rows

    def coldstart(self) -> None:
        """The Lambda consumer's module import and handler set-up, in fresh interpreters."""
        n = self.sizes.coldstart_samples
        result = measure_coldstart(n, self.bar(f"Lambda cold start: {n} fresh interpreters", n))
        self.results["coldstart"] = result.to_json()

    def backlog(self) -> None:
        """Republish under a backlog, with maintenance's queue counts and without
        (bench/backlog.py)."""
        runs = self.sizes.backlog_runs
        rows = measure_backlog(self.backend, runs, lambda mode: self.bar(f"backlog: {mode}", runs))
        self.results["backlog"] = [r.to_json() for r in rows]
        for row in rows:
            if row.status != "ok":
                self.results["errors"].append(f"backlog ({row.mode}): {row.status}")

    def tracing(self) -> None:
        """CPU time per run with traces and metrics off, API only, SDK on, EMF
        (bench/tracing.py; in memory, whatever the backend)."""
        runs = self.sizes.tracing_runs
        bar = self.bar(f"tracing: {runs} runs x {ROUNDS} rounds per mode", len(MODES) * ROUNDS)
        self.results["tracing"] = [r.to_json() for r in measure_tracing(runs, bar)]

    def console(self) -> None:
        """What each web-console page load costs at each table size (bench/console.py)."""
        rows = measure_console(
            self.backend,
            self.sizes.console_sizes,
            self.sizes.console_loads,
            lambda size: self.bar(f"console: seed {size:,} runs", size),
        )
        self.results["console"] = [r.to_json() for r in rows]
        for row in rows:
            if row.status.startswith("failed"):
                self.results["errors"].append(f"console ({row.table_runs:,} runs): {row.status}")

    def fanout(self) -> None:
        """A ``ctx.map`` over 200 children (10,000 on aws-local) on top of plain runs:
        requests and units per child, parent resumes, the join's latency, the parent's
        item size, worker memory (bench/fanout.py)."""
        sizes = self.sizes
        children = (
            sizes.fanout_children_aws_local
            if self.backend.name == backends.AWS_LOCAL
            else sizes.fanout_children
        )
        total = children + sizes.fanout_join_groups * JOIN_CHILDREN
        bar = self.bar(f"fanout: ctx.map over {children:,} children, then join timings", total)
        result = measure_fanout(
            self.backend, children, sizes.cost_runs, sizes.fanout_join_groups, bar
        )
        self.results["fanout"] = result.to_json()

    def clients(self) -> None:
        """Client CPU per request, botocore against the lean client (bench/clients.py)."""
        calls = self.sizes.client_calls
        bar = self.bar(f"clients: {calls} requests of each kind, per client", CLIENT_STEPS)
        rows = measure_clients(self.backend, calls, bar)
        self.results["clients"] = [row.to_json() for row in rows]

    def values(self) -> None:
        """Runs with payloads and results of 1 KB to 10 MB on an app with a payload
        bucket: requests, units, S3 bytes, dollars, trigger -> start (bench/values.py)."""
        runs = self.sizes.value_runs
        bar = self.bar(
            f"values: {len(runs)} sizes of payload, {sum(runs.values())} runs", len(runs)
        )
        rows = measure_values(self.backend, runs, self.sizes.value_latency_samples, bar)
        self.results["values"] = [row.to_json() for row in rows]

    def codecs(self) -> None:
        """Each codec's CPU per MB of JSON, encoding and decoding (bench/codecs.py)."""
        rows = measure_codecs(self.backend, CODEC_DOCUMENT_BYTES, self.sizes.codec_rounds)
        self.results["codecs"] = [row.to_json() for row in rows]

    def transactions(self) -> None:
        """Per run: app.trigger, the caller's PutItem then app.trigger, and
        app.transaction() with and without an idempotency key: requests, units, trigger
        latency (bench/transactions.py)."""
        runs, warmup = self.sizes.transaction_runs, self.sizes.transaction_warmup
        bar = self.bar(f"transactions: {len(WAYS)} ways to trigger, {runs} runs each", runs)
        rows = measure_transactions(self.backend, runs, warmup, bar)
        self.results["transactions"] = [row.to_json() for row in rows]

    def typed(self) -> None:
        """CPU per run and per trigger with a 1 KB pydantic payload and result against
        plain dicts; whether a plain app imports pydantic (bench/typed.py)."""
        result = measure_typed(self.sizes.typed_runs)
        self.results["typed"] = result.to_json()


def _versions() -> dict[str, str]:
    names = ("boto3", "botocore", "celery", "kombu", "moto", "rich")
    return {name: version(name) for name in names} | {"python": platform.python_version()}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--backend", choices=backends.BACKENDS, default=backends.MOTO)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CI): under 3 minutes")
    parser.add_argument(
        "--only", default=",".join(MEASUREMENTS), help=f"comma-separated: {','.join(MEASUREMENTS)}"
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="where results go")
    args = parser.parse_args(argv)
    args.only = [m.strip() for m in args.only.split(",") if m.strip()]
    unknown = sorted(set(args.only) - set(MEASUREMENTS))
    if unknown:
        parser.error(f"unknown measurement(s): {', '.join(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    console = Console() if sys.stdout.isatty() else Console(width=CONSOLE_WIDTH)
    started = datetime.now(UTC)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    sizes = SMOKE if args.smoke else Sizes()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    console.print(f"starting the {args.backend} backend ...")
    with (
        backends.start(args.backend) as backend,
        Progress(*columns, TimeElapsedColumn(), console=console) as progress,
    ):
        runner = Runner(backend, sizes, progress)
        for name in args.only:
            with runner.step(name):
                getattr(runner, name)()
    results: dict[str, Any] = {
        "backend": backend.name,
        "backend_description": backend.description,
        "authoritative_capacity": backend.authoritative_capacity,
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])]),
        "smoke": args.smoke,
        "sizes": sizes.__dict__,
        "host": {"cpus": os.cpu_count(), "platform": platform.platform(), **_versions()},
        **runner.results,
    }
    if not backend.authoritative_capacity:
        results["notes"].append(report.MOTO_CAPACITY_NOTE)
    checked = targets.evaluate(results)
    results["targets"] = [t.to_json() for t in checked]
    report.print_results(console, results, checked)
    print_transactions(console, results.get("transactions"), backend.name)
    print_rates(console, results.get("rates"), backend.name)
    if "typed" in results:
        print_typed(results["typed"])
    json_path = args.out / f"{stamp}-{backend.name}.json"
    report.write_json(json_path, results)
    chart.write_chart(json_path.with_suffix(".png"), results)
    console.print(f"wrote {json_path} and {json_path.with_suffix('.png').name}")
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
