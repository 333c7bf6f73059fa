"""One trace from ``trigger`` to success across processes: the test process triggers a
run (in a request's span), its maintenance pass republishes the wakeup, a real worker
process fails the first attempt, releases the second to wait for a token, and succeeds
the third once the test process decides the token. The worker process exports its spans
and metrics to files through OpenTelemetry's SDK (``tests.apps.traced_app``); the test
process keeps its own in memory. The structure is asserted: every span in the
trigger's trace, each attempt a child of the trigger, the first linked to maintenance's
publish and the third to the token decision (docs/observability.md)."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from runlane_sqs import ManualClock, Runlane, RunStatus
from runlane_sqs.core.telemetry import trace_id_of
from tests.apps.traced_tasks import SPANS_DIR_ENV, TRACED_TASK, register_traced
from tests.emulators import WorkerProcess, wait_until
from tests.otel import Recorded, recorded  # noqa: F401 (a fixture)

WORKER_APP = "tests.apps.traced_app:app"
TIMEOUT = 60.0


def read_lines(directory: Path, prefix: str) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(directory.glob(f"{prefix}-*.jsonl"))
        for line in path.read_text().splitlines()
        if line
    ]


def remote_counts(directory: Path) -> dict[str, int]:
    """The worker processes' ``runlane.attempts.ended`` by outcome, checked against
    their ``runlane.attempts.started`` (each process's last export: they are cumulative)."""
    totals: dict[str, dict[str, int]] = {
        "runlane.attempts.started": {},
        "runlane.attempts.ended": {},
    }
    for path in sorted(directory.glob("metrics-*.jsonl")):
        export = json.loads(path.read_text().splitlines()[-1])
        for resource in export["resource_metrics"]:
            for scope in resource["scope_metrics"]:
                for metric in scope["metrics"]:
                    by = totals.get(metric["name"])
                    for point in metric["data"]["data_points"] if by is not None else ():
                        key = point["attributes"].get("runlane.outcome", "all")
                        by[key] = by.get(key, 0) + point["value"]  # type: ignore[index]
    ended = totals["runlane.attempts.ended"]
    assert totals["runlane.attempts.started"] == {"all": sum(ended.values())}
    return ended


def hex_ids(span: Any) -> tuple[str, str]:
    """``(trace id, span id)`` as the SDK's JSON writes them (``0x``, hex)."""
    context = span.get_span_context()
    return (f"0x{context.trace_id:032x}", f"0x{context.span_id:016x}")


def test_one_trace_from_trigger_through_republish_retry_and_token_to_success(
    make_app: Callable[..., Runlane],
    start_worker: Callable[..., WorkerProcess],
    recorded: Recorded,  # noqa: F811
    tmp_path: Path,
) -> None:
    spans_dir = tmp_path / "spans"
    spans_dir.mkdir()
    app = register_traced(make_app(telemetry=recorded.telemetry()))
    app.provision()
    token = app.tokens.create()
    # triggered an hour ago (a clock set back) 40 minutes ahead: beyond what SQS delays,
    # so only maintenance publishes its wakeup
    past = register_traced(
        make_app(
            clock=ManualClock(datetime.now(UTC) - timedelta(hours=1)),
            telemetry=recorded.telemetry(),
        )
    )
    caller = recorded.tracer_provider.get_tracer("the-app")
    with caller.start_as_current_span("POST /orders") as request:
        run = past.trigger(TRACED_TASK, {"token": token.id}, delay=timedelta(minutes=40))
    assert run.wake_at is None
    report = app.maintenance.run_pass()
    assert report.due.published == 1

    worker = start_worker(
        "--app", WORKER_APP, "--concurrency", "2", extra_env={SPANS_DIR_ENV: str(spans_dir)}
    )
    wait_until(
        lambda: app.runs.get(run.id).status is RunStatus.RELEASED,
        TIMEOUT,
        f"run {run.id} to wait for its token\n{worker.log()}",
    )
    with caller.start_as_current_span("POST /approvals"):
        app.tokens.complete(token.id, "approved")
    wait_until(
        lambda: app.runs.get(run.id).status is RunStatus.SUCCEEDED,
        TIMEOUT,
        f"run {run.id} to succeed\n{worker.log()}",
    )
    worker.process.send_signal(signal.SIGTERM)
    assert worker.wait(TIMEOUT) == 0, worker.log()
    assert app.runs.get(run.id).result == "approved"

    (trigger,) = recorded.spans(f"trigger {TRACED_TASK}")
    (publish,) = recorded.spans(f"publish {TRACED_TASK}")
    (decide,) = recorded.spans("runlane decide token")
    trace_id, trigger_id = hex_ids(trigger)
    assert hex_ids(request)[0] == trace_id
    assert trace_id_of(app.runs.get(run.id).trace) == trace_id[2:]
    assert publish.context.trace_id == trigger.context.trace_id

    remote = read_lines(spans_dir, "spans")
    attempts = sorted(
        (s for s in remote if s["name"] == f"attempt {TRACED_TASK}"),
        key=lambda s: s["attributes"]["runlane.attempt"],
    )
    assert [s["attributes"]["runlane.outcome"] for s in attempts] == [
        "retrying",
        "released",
        "succeeded",
    ]
    for span in attempts:
        assert span["kind"] == "SpanKind.CONSUMER"
        assert span["context"]["trace_id"] == trace_id
        assert span["parent_id"] == trigger_id
        assert span["attributes"]["runlane.run.id"] == run.id
    first, second, third = ({link["context"]["span_id"] for link in s["links"]} for s in attempts)
    assert hex_ids(publish)[1] in first  # the wakeup maintenance republished
    assert trigger_id in first & second & third
    assert hex_ids(decide)[1] in third  # the token decision resumed it
    assert hex_ids(decide)[1] not in first | second
    assert attempts[0]["status"]["status_code"] == "ERROR"
    (failure,) = attempts[0]["events"]
    assert failure["attributes"]["exception.message"] == "the ledger was not reachable"

    assert remote_counts(spans_dir) == {"retrying": 1, "released": 1, "succeeded": 1}
