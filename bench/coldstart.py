"""Lambda cold start: what a fresh interpreter spends importing the consumer's module and
building the handler, before the first record.

Each sample is a new ``python -I`` process that times itself with
``time.perf_counter()``: importing :mod:`runlane_sqs.lambdas.consumer` (boto3 and
botocore included, as the runtime's boto3 is imported by it), then what a handler module
does next (``Runlane.from_env()`` and ``sqs_handler(app)``: no AWS request), then
building the app's DynamoDB and SQS clients, which the first invocation does before its
first request (service models loaded, no request sent). The processes share a bytecode
cache in a temporary directory (``-X pycache_prefix``), written by one unmeasured process
first, so every sample reads compiled modules as an installed package does.

Credentials, region and table come from variables set for the child only (fake keys: no
request is made), and ``~/.aws`` is not read, so nothing of the bench host's AWS setup
(or of the emulator the other measurements use) changes the figures.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MODULE = "runlane_sqs.lambdas.consumer"
CHILD_TIMEOUT_SECONDS = 60
CHILD = f"""
import json, sys, time

started = time.perf_counter()
import {MODULE}
imported = time.perf_counter()
from runlane_sqs import Runlane
from {MODULE} import sqs_handler

app = Runlane.from_env()
handler = sqs_handler(app)
built = time.perf_counter()
app.client("dynamodb")
app.client("sqs")
clients = time.perf_counter()
print(json.dumps({{
    "import_ms": (imported - started) * 1000,
    "app_ms": (built - imported) * 1000,
    "clients_ms": (clients - built) * 1000,
    "modules": len(sys.modules),
}}))
"""
CHILD_VARIABLES = {
    "RUNLANE_TABLE": "runlane",
    "RUNLANE_ENVIRONMENT": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_EC2_METADATA_DISABLED": "true",
}
"""What a Lambda function has in its environment (region, credentials), with fake keys."""


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(fraction * len(ordered))))
    return ordered[rank - 1]


@dataclass
class Phase:
    """One phase's wall time over the samples."""

    name: str
    samples_ms: list[float]

    def to_json(self) -> dict[str, Any]:
        ms = self.samples_ms
        return {
            "name": self.name,
            "n": len(ms),
            "p50_ms": statistics.median(ms),
            "p90_ms": percentile(ms, 0.9),
            "max_ms": max(ms),
            "samples_ms": ms,
        }


@dataclass
class ColdStart:
    module: str
    phases: list[Phase]
    modules_loaded: int
    """``len(sys.modules)`` once the clients are built."""

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "phases": [p.to_json() for p in self.phases]}


def child_environment(home: Path) -> dict[str, str]:
    """The bench's environment without its AWS, runlane and Python settings, plus
    :data:`CHILD_VARIABLES`; ``~/.aws`` files pointed at nothing under ``home``."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RUNLANE_", "PYTHON"))}
    return {
        **kept,
        **CHILD_VARIABLES,
        "AWS_CONFIG_FILE": str(home / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "credentials"),
    }


def sample(cache: Path, env: dict[str, str]) -> dict[str, Any]:
    """One fresh interpreter's report."""
    done = subprocess.run(
        [sys.executable, "-I", "-X", f"pycache_prefix={cache}", "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_SECONDS,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the cold start child failed: {done.stderr.strip()[-2000:]}")
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


def measure_coldstart(samples: int, progress: Callable[[int], None]) -> ColdStart:
    """``samples`` fresh interpreters, after one that fills the bytecode cache."""
    with tempfile.TemporaryDirectory(prefix="runlane-coldstart-") as tmp:
        cache, env = Path(tmp) / "pycache", child_environment(Path(tmp))
        sample(cache, env)
        reports = []
        for n in range(samples):
            reports.append(sample(cache, env))
            progress(n + 1)
    return ColdStart(
        module=MODULE,
        phases=[
            Phase(f"import {MODULE}", [r["import_ms"] for r in reports]),
            Phase("Runlane.from_env() + sqs_handler(app)", [r["app_ms"] for r in reports]),
            Phase("DynamoDB and SQS clients built", [r["clients_ms"] for r in reports]),
        ],
        modules_loaded=max(r["modules"] for r in reports),
    )


if __name__ == "__main__":  # python -m bench.coldstart [SAMPLES]: this measurement alone
    result = measure_coldstart(int(sys.argv[1]) if len(sys.argv) > 1 else 20, lambda _: None)
    for phase in result.phases:
        row = phase.to_json()
        print(f"{phase.name}: p50 {row['p50_ms']:.0f} ms, p90 {row['p90_ms']:.0f} ms")
    print(f"modules loaded: {result.modules_loaded}")
