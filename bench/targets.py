"""The targets the benchmark checks, each met, missed or not measured."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

PLAIN_WRITES = 3.0
PLAIN_READS = 1.0
PLAIN_SQS = 1.2
CELERY_RATIO = {"aws-local": 1.0, "moto": 0.6}
"""Our runs/s over Celery's by backend: moto applies DynamoDB writes one at a time and
slowly, a cost only our runs pay there (docs/performance.md)."""
MAINTENANCE_ITEMS_PER_DUE = 2.0
TRIGGER_TO_START_P50_MS = 100.0
TOKEN_TO_RESUME_P95_MS = 1000.0
WORKER_RSS_MB = 120.0
CELERY_CPU_RATIO = 1.0
"""Our worker's CPU per run over Celery worker's: at most the same."""
COLDSTART_IMPORT_MS = 400.0
"""Median wall time of importing the Lambda consumer's module in a fresh interpreter
(boto3 included; bench/coldstart.py)."""
TRACING_API_ONLY_OVERHEAD = 0.05
"""With OpenTelemetry's API installed and no SDK configured: at most 5% more CPU per
run than with telemetry off (the machine's noise is about that; bench/tracing.py)."""
TRACING_SDK_OVERHEAD_US = 500.0
"""With the SDK recording every span and metric: CPU per run added, at most."""
BACKLOG_REPUBLISHED_PER_RUN = 0.05
BACKLOG_WAKEUPS_PER_RUN = 1.1
"""With maintenance's queue counts, runs waiting in a backlog longer than
``republish_after`` (bench/backlog.py): republishes and wakeups sent per run."""
FANOUT_EXTRA_WRITES_PER_CHILD = 1.0
FANOUT_EXTRA_WCU_PER_CHILD = 4.0
"""A ``ctx.map`` child on top of a plain run: write requests and write units, at most
(bench/fanout.py)."""
FANOUT_PARENT_RESUMES = 1
RATE_EXTRA_WRITES_PER_RUN = 1.0
"""A run under a rate limit that starts at once, on top of the same run without one:
write requests, at most (its reservation; bench/rates.py)."""
RATE_REFUSED_PER_RUN = 1.0
"""Claims refused by a saturated rate limit per run, at most (each run waits once)."""
SMALL_VALUE_S3_REQUESTS = 0
"""With a payload bucket, S3 requests per run whose values are all under ``inline_limit``
(bench/values.py): none, a small value costs what it did without one."""
TYPED_WORKER_RATIO = 1.05
"""Worker CPU per run with a 1 KB pydantic payload and result over the same run with
plain dicts, at most (bench/typed.py)."""
CONSOLE_SAME_REQUESTS = ("/runs", "/runs?status=failed")
"""Console pages whose requests per load must not grow with the table
(bench/console.py)."""


@dataclass
class Target:
    name: str
    limit: str
    measured: float | None
    unit: str = ""
    met: bool | None = None
    """``None`` when not measured."""
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def at_most(name: str, value: float | None, limit: float, unit: str = "", note: str = "") -> Target:
    met = None if value is None else value <= limit
    return Target(name, f"<= {limit:g}{unit}", value, unit, met, note)


def below(name: str, value: float | None, limit: float, unit: str = "", note: str = "") -> Target:
    met = None if value is None else value < limit
    return Target(name, f"< {limit:g}{unit}", value, unit, met, note)


def at_least(
    name: str, value: float | None, limit: float, unit: str = "", note: str = ""
) -> Target:
    met = None if value is None else value >= limit
    return Target(name, f">= {limit:g}{unit}", value, unit, met, note)


TAGS_PER_TAGGED_RUN = 2
"""Tags a run of the ``tagged`` cost scenario carries: one tag-index entry each."""


def tags_target(plain: dict[str, Any], tagged: dict[str, Any], backend: str) -> Target:
    """Write units two tags add to a run: ``tagged`` less ``plain`` (docs/tags.md,
    "Costs": one per tag, at the trigger). Only a backend that reports index units
    (DynamoDB Local, AWS) measures it: on moto, which reports none, it is not measured."""
    units = None
    measured = plain.get("write_units") is not None and tagged.get("write_units") is not None
    if measured and backend != "moto":
        units = round(tagged["write_units"] - plain["write_units"], 2)
    return at_most(
        "write units added by 2 tags per run",
        units,
        TAGS_PER_TAGGED_RUN,
        note="one tag-index entry per tag, at the trigger only",
    )


def evaluate(results: dict[str, Any]) -> list[Target]:
    """Every target, from the JSON shape of the results."""
    targets: list[Target] = []
    cost = {c["scenario"]: c["per_run"] for c in results.get("cost", [])}
    plain = cost.get("plain", {})
    single = cost.get("plain_single", {})
    targets.append(
        at_most("DynamoDB writes per plain run", plain.get("dynamodb_writes"), PLAIN_WRITES)
    )
    targets.append(
        at_most("DynamoDB reads per plain run", plain.get("dynamodb_reads"), PLAIN_READS)
    )
    targets.append(
        at_most("SQS requests per plain run (trigger_many)", plain.get("sqs_requests"), PLAIN_SQS)
    )
    targets.append(
        at_most(
            "SQS requests per plain run (one trigger each)",
            single.get("sqs_requests"),
            PLAIN_SQS,
            note="1 SendMessage per run by itself; receives and deletes add the rest",
        )
    )
    targets.append(tags_target(plain, cost.get("tagged", {}), results.get("backend", "")))
    ratio = CELERY_RATIO.get(results.get("backend", ""), max(CELERY_RATIO.values()))
    targets += throughput_targets(results.get("throughput", []), ratio)
    for row in results.get("maintenance", []):
        targets.append(
            at_most(
                f"maintenance items read per due run, {row['table_runs']:,} runs",
                row.get("items_read_per_due_run"),
                MAINTENANCE_ITEMS_PER_DUE,
                note=row["status"] if row["status"] != "ok" else "",
            )
        )
    latency = {s["name"]: s for s in results.get("latency", [])}
    start = latency.get("trigger -> handler start", {})
    resume = latency.get("token complete -> resumed start", {})
    targets.append(
        below("trigger -> start p50", start.get("p50_ms"), TRIGGER_TO_START_P50_MS, " ms")
    )
    targets.append(
        below("token -> resume p95", resume.get("p95_ms"), TOKEN_TO_RESUME_P95_MS, " ms")
    )
    coldstart = results.get("coldstart") or {}
    phases = coldstart.get("phases") or [{}]
    targets.append(
        at_most(
            "Lambda consumer module import p50",
            phases[0].get("p50_ms"),
            COLDSTART_IMPORT_MS,
            " ms",
            note=f"p90 {phases[0]['p90_ms']:.0f} ms" if "p90_ms" in phases[0] else "",
        )
    )
    targets += backlog_targets(results.get("backlog") or [])
    targets += tracing_targets(results.get("tracing") or [])
    targets += console_targets(results.get("console") or [])
    targets += fanout_targets(results.get("fanout") or {})
    targets.append(values_target(results.get("values") or []))
    targets += rate_targets(results.get("rates") or [])
    typed = results.get("typed") or {}
    targets.append(
        at_most(
            "worker CPU per run, 1 KB pydantic payload and result over plain dicts",
            typed.get("worker_ratio"),
            TYPED_WORKER_RATIO,
            "x",
        )
    )
    if "plain_app_imports_pydantic" in typed:
        targets.append(
            at_most(
                "pydantic modules a plain app imports",
                float(typed["plain_app_imports_pydantic"]),
                0,
            )
        )
    for memory in results.get("memory") or []:
        rss = memory.get("worker_rss")
        targets.append(
            at_most(
                f"{memory.get('kind', 'sync')} worker peak RSS, concurrency "
                f"{memory.get('concurrency', 32)}",
                rss / 2**20 if rss else None,
                WORKER_RSS_MB,
                " MB",
            )
        )
    return targets


def throughput_targets(rows: list[dict[str, Any]], ratio: float) -> list[Target]:
    """Runs per second (at least ``ratio`` times Celery's) and worker CPU per run of each
    of our workers against Celery's."""
    celery_cpu = next((r.get("cpu_ms_per_run") for r in rows if r["system"] == "celery"), None)
    targets: list[Target] = []
    for row in rows:
        if row["system"] == "celery":
            continue
        status = row["status"] if row["status"] != "ok" else ""
        targets.append(
            at_least(
                f"{row['system']} runs/s vs Celery",
                row.get("celery_ratio"),
                ratio,
                "x",
                note=status,
            )
        )
        ours = row.get("cpu_ms_per_run")
        compared = f"{ours:.2f} vs {celery_cpu:.2f} ms" if ours and celery_cpu else ""
        targets.append(
            at_most(
                f"{row['system']} worker CPU per run vs Celery's",
                row.get("celery_cpu_ratio"),
                CELERY_CPU_RATIO,
                "x",
                note=status or compared,
            )
        )
    return targets


def backlog_targets(rows: list[dict[str, Any]]) -> list[Target]:
    """Republishes and wakeups per run with counts on, the backlog scenario's (counts off
    is the comparison: no target)."""
    row = next((r for r in rows if r["mode"] == "counts on"), None)
    per = row["per_run"] if row else {}
    note = row["status"] if row and row["status"] != "ok" else ""
    return [
        at_most(
            "republished per run under a backlog (counts on)",
            per.get("republished"),
            BACKLOG_REPUBLISHED_PER_RUN,
            note=note,
        ),
        at_most(
            "wakeups sent per run under a backlog (counts on)",
            per.get("wakeups_sent"),
            BACKLOG_WAKEUPS_PER_RUN,
            note=note,
        ),
    ]


def tracing_targets(rows: list[dict[str, Any]]) -> list[Target]:
    """Telemetry's cost per run, without an SDK and with one (bench/tracing.py)."""
    by_mode = {row["mode"]: row for row in rows}
    off = by_mode.get("off", {}).get("us_per_run")
    api = by_mode.get("api-only", {}).get("us_per_run")
    sdk = by_mode.get("sdk", {}).get("overhead_us")
    ratio = api / off - 1 if api is not None and off else None
    return [
        at_most(
            "tracing: API without SDK, CPU per run over off",
            None if ratio is None else round(ratio * 100, 1),
            TRACING_API_ONLY_OVERHEAD * 100,
            " %",
        ),
        at_most("tracing: SDK recording, CPU added per run", sdk, TRACING_SDK_OVERHEAD_US, " us"),
    ]


def console_targets(rows: list[dict[str, Any]]) -> list[Target]:
    """A console page costs as many requests at the largest table size measured as at
    the smallest, and no page sends a Scan (bench/console.py); sizes not measured (moto
    skips those it would take too long on) are named in the note."""
    measured = [row for row in rows if row["status"] == "ok" and row["pages"]]
    note = "; ".join(f"{r['table_runs']:,}: {r['status']}" for r in rows if r["status"] != "ok")
    targets: list[Target] = []
    for name in CONSOLE_SAME_REQUESTS:
        few = _page(measured[0], name) if len(measured) > 1 else None
        many = _page(measured[-1], name) if len(measured) > 1 else None
        if few is None or many is None:
            targets.append(
                Target(f"console {name} requests per load", "== at fewer runs", None, note=note)
            )
            continue
        before, after = sum(few["requests"].values()), sum(many["requests"].values())
        targets.append(
            Target(
                f"console {name} requests per load at {measured[-1]['table_runs']:,} runs",
                f"== at {measured[0]['table_runs']:,} runs ({before})",
                after,
                met=after == before,
                note=note,
            )
        )
    loaded = [page for row in rows for page in row["pages"]]
    scans = sum(page["scans"] for page in loaded) if loaded else None
    targets.append(at_most("console Scan requests, every page and size", scans, 0))
    return targets


def _page(row: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((p for p in row["pages"] if p["page"] == name), None)


def fanout_targets(result: dict[str, Any]) -> list[Target]:
    """A map's children on top of plain runs: extra write requests and write units per
    child (what one more child adds, when the small map was counted; else the parent's
    share spread over the children too), and the parent resumed exactly once."""
    extra = result.get("marginal_extra_per_child") or result.get("extra_per_child") or {}
    note = result["status"] if result and result["status"] != "ok" else ""
    units_note = note or (
        f"capacity {result['capacity']}" if result and result["capacity"] != "complete" else ""
    )
    resumes = result.get("parent_resumes") if result else None
    return [
        at_most(
            "DynamoDB writes per map child over a plain run",
            extra.get("dynamodb_writes"),
            FANOUT_EXTRA_WRITES_PER_CHILD,
            note=note,
        ),
        at_most(
            "write units per map child over a plain run",
            extra.get("write_units"),
            FANOUT_EXTRA_WCU_PER_CHILD,
            note=units_note,
        ),
        Target(
            "parent resumes per map",
            f"= {FANOUT_PARENT_RESUMES}",
            resumes,
            met=None if resumes is None else resumes == FANOUT_PARENT_RESUMES,
            note=note,
        ),
    ]


def rate_targets(rows: list[dict[str, Any]]) -> list[Target]:
    """A rate limit's extra writes for a run not refused (the case the worker never
    reaches, over the unlimited one), its refused claims per run at saturation (the
    last case), and no window over its limit there."""
    by_case = {row["case"]: row for row in rows if row["status"] == "ok"}
    base = by_case.get("unlimited")
    free = next((r for r in rows if r.get("rate") and r["rate"] >= 1000), None)
    full = next((r for r in reversed(rows) if r.get("rate") and r["rate"] < 1000), None)
    extra = None
    if base is not None and free is not None and free["status"] == "ok":
        extra = free["per_run"]["dynamodb_writes"] - base["per_run"]["dynamodb_writes"]
    saturated = full if full is not None and full["status"] == "ok" else None
    return [
        at_most("DynamoDB writes per run under a rate limit, not refused", extra,
                RATE_EXTRA_WRITES_PER_RUN),
        at_most("refused claims per run at a saturated rate limit",
                saturated["refused_claims_per_run"] if saturated else None,
                RATE_REFUSED_PER_RUN),
        Target(
            "most starts in a second at a saturated rate limit",
            f"<= {saturated['rate']}" if saturated else "<= the limit",
            saturated["most_in_a_second"] if saturated else None,
            met=None if saturated is None else saturated["most_in_a_second"] <= saturated["rate"],
        ),
    ]  # fmt: skip


def values_target(rows: list[dict[str, Any]]) -> Target:
    """No S3 request for a run whose payload and result are under ``inline_limit``."""
    small = [row for row in rows if row["size_bytes"] <= row["inline_limit"]]
    measured = max((row["per_run"]["s3_requests"] for row in small), default=None)
    sizes = ", ".join(row["size"] for row in small)
    return at_most(
        "S3 requests per run, values under inline_limit",
        measured,
        SMALL_VALUE_S3_REQUESTS,
        note=f"payload and result of {sizes}" if sizes else "",
    )
