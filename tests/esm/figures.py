"""The figures the simulated event source mapping test prints (docs/deploy-lambda.md,
"Simulated event source mapping"): invocations, time to recovery, requests per run."""

from __future__ import annotations

import statistics
from collections import Counter

from runlane_sqs import EventType, Runlane
from tests.esm.maintenance import MaintenanceLoop
from tests.esm.mapping import EventSourceMapping
from tests.esm.recovery import KILLED_ATTEMPT, STRANDED_RECORD, Recovery, summary


def figures(
    app: Runlane,
    mapping: EventSourceMapping,
    maintenance: MaintenanceLoop,
    produced: dict[str, Counter[str]],
    found: list[Recovery],
    runs: int,
) -> list[str]:
    """Lines to print: what the mapping did, how long recovery took, what it cost."""
    duplicated = sum(b.duplicated for b in mapping.batches)
    lines = [
        f"  {len(mapping.invocations)} invocations of {len(mapping.batches)} batches "
        f"({duplicated} invoked twice): {dict(mapping.outcomes())}",
        f"  time to recovery, {summary(found, KILLED_ATTEMPT)}",
        f"    (lease expiry recorded {lease_recovery(app, found)})",
        f"  time to recovery, {summary(found, STRANDED_RECORD)}",
        "  requests per run:",
    ]
    return lines + [
        f"    {line}" for line in requests_per_run(mapping, maintenance, produced, runs)
    ]


def lease_recovery(app: Runlane, found: list[Recovery]) -> str:
    """How long after the death maintenance recorded the killed attempts' lease expiry."""
    delays: list[float] = []
    for recovery in found:
        if recovery.kind != KILLED_ATTEMPT:
            continue
        expiries = [
            e.at.timestamp()
            for e in app.runs.events(recovery.run_id)
            if e.type is EventType.LEASE_EXPIRED and not e.data.get("before_start")
        ]
        delays.extend(at - recovery.died_at for at in expiries if at > recovery.died_at)
    if not delays:
        return "never"
    return f"median {statistics.median(delays):.1f} s, max {max(delays):.1f} s after the death"


def requests_per_run(
    mapping: EventSourceMapping,
    maintenance: MaintenanceLoop,
    produced: dict[str, Counter[str]],
    runs: int,
) -> list[str]:
    """The requests of each component, per run (and per pass for maintenance, whose
    requests depend on how long the test ran rather than on the runs)."""
    consumer: dict[str, Counter[str]] = {"dynamodb": Counter(), "sqs": Counter()}
    for invocation in mapping.invocations:
        for key, n in invocation.requests.items():
            service, _, operation = key.partition(".")
            consumer[service][operation] += n

    def per_run(counts: Counter[str], label: str, divisor: int = runs) -> str:
        parts = ", ".join(f"{op} {n / divisor:.2f}" for op, n in counts.most_common())
        return f"{sum(counts.values()) / divisor:.2f} {label} ({parts or 'none'})"

    receives = mapping.requests["ReceiveMessage"]
    passes = max(1, len(maintenance.reports))
    durations = sorted(r.duration_ms / 1000 for r in maintenance.reports)
    return [
        f"ESM: {receives / runs:.2f} ReceiveMessage ({mapping.empty_receives / runs:.2f} "
        f"of them empty), {mapping.requests['DeleteMessageBatch'] / runs:.2f} "
        "DeleteMessageBatch",
        f"producer: {per_run(produced['dynamodb'], 'DynamoDB')}, {per_run(produced['sqs'], 'SQS')}",
        f"consumer: {per_run(consumer['dynamodb'], 'DynamoDB')}, {per_run(consumer['sqs'], 'SQS')}",
        f"maintenance: {per_run(maintenance.requests['dynamodb'], 'DynamoDB')}, "
        f"{per_run(maintenance.requests['sqs'], 'SQS')}",
        f"maintenance per pass ({len(maintenance.reports)} passes, median "
        f"{maintenance.median_pass_seconds():.1f} s, max {max(durations, default=0):.1f} s): "
        f"{per_run(maintenance.requests['dynamodb'], 'DynamoDB', passes)}, "
        f"{per_run(maintenance.requests['sqs'], 'SQS', passes)}; wakeups published "
        f"{dict(+maintenance.published())}",
    ]
