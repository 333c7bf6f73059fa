"""Traces, on every backend and with both workers (OpenTelemetry's SDK with an in-memory
exporter): a run's trigger span, its attempts as children of it across retries, waits
and republishes, the handler running in its attempt's span, the spans of maintenance,
token decisions and signals linked where they wake a run (docs/observability.md)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from runlane_sqs import RetryPolicy, Runlane, RunStatus, TaskContext, Telemetry
from runlane_sqs.core.telemetry import trace_id_of, unpack_trace
from runlane_sqs.core.tokens import Token
from runlane_sqs.core.wakeup import Wakeup
from runlane_sqs.engine.maintenance import JOB_TOKENS
from runlane_sqs.engine.resuming import RESUME_BATCH
from tests.backends import Backend
from tests.otel import Recorded, recorded  # noqa: F401 (a fixture)
from tests.workers import WorkerKind

FLAKY = "traced.flaky"
TOKEN = "traced.token"
SIGNAL = "traced.signal"
INSIDE = "traced.inside"
SECRET = "4111-1111-1111-1111"


def register(app: Runlane, seen: dict[str, Any]) -> None:
    @app.task(name=FLAKY, retry=RetryPolicy(max_attempts=3, delay=0))
    def flaky(ctx: TaskContext, payload: Any) -> Any:
        if ctx.attempt == 1:
            raise RuntimeError(f"card {SECRET} declined")
        return "ok"

    @app.task(name=TOKEN)
    def on_token(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_token(payload["token"]).value

    @app.task(name=SIGNAL)
    def on_signal(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_signal("order-7").payload

    @app.task(name=INSIDE)
    def inside(ctx: TaskContext, payload: Any) -> Any:
        current = trace.get_current_span().get_span_context()
        seen["current"] = (current.trace_id, current.span_id)
        seen["trace_id"] = ctx.trace_id
        with seen["tracer"].start_as_current_span("charge"):
            ctx.log.info("charging")
        return None


def traced_app(backend: Backend, recorded: Recorded, **options: Any) -> tuple[Runlane, dict]:  # noqa: F811
    seen: dict[str, Any] = {"tracer": recorded.tracer_provider.get_tracer("the-app")}
    app = backend.app(
        register=lambda a: register(a, seen),
        telemetry=recorded.telemetry(**options),
        redact=lambda text: text.replace(SECRET, "[card]"),
    )
    return app, seen


def attempts(recorded: Recorded, task: str) -> list[ReadableSpan]:  # noqa: F811
    return recorded.spans(f"attempt {task}")


def linked(span: ReadableSpan) -> set[tuple[int, int]]:
    return {(link.context.trace_id, link.context.span_id) for link in span.links}


def ids(span: ReadableSpan | None) -> tuple[int, int]:
    assert span is not None
    context = span.get_span_context() if isinstance(span, ReadableSpan) else span
    return (context.trace_id, context.span_id)


def test_a_run_s_attempts_are_children_of_its_trigger_across_retries(
    backend: Backend,
    worker_kind: WorkerKind,
    recorded: Recorded,  # noqa: F811
) -> None:
    app, _ = traced_app(backend, recorded)
    caller = recorded.tracer_provider.get_tracer("the-app")
    with caller.start_as_current_span("POST /checkout") as request:
        run = app.trigger(FLAKY, {"order": 7})
    worker_kind.drain_all(app)

    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED
    (trigger,) = recorded.spans(f"trigger {FLAKY}")
    assert trigger.kind is SpanKind.PRODUCER
    assert trigger.parent is not None and ids(trigger.parent) == ids(request.get_span_context())
    assert trigger.attributes is not None
    assert trigger.attributes["runlane.run.id"] == run.id
    assert trigger.attributes["messaging.destination.name"] == "default"
    stored = app.runs.get(run.id).trace
    assert unpack_trace(stored)["traceparent"].split("-")[1:3] == [
        f"{trigger.context.trace_id:032x}",
        f"{trigger.context.span_id:016x}",
    ]

    first, second = attempts(recorded, FLAKY)
    for number, span in enumerate((first, second), start=1):
        assert span.kind is SpanKind.CONSUMER
        assert span.context.trace_id == trigger.context.trace_id
        assert span.parent is not None and ids(span.parent) == ids(trigger)
        assert ids(trigger) in linked(span)
        assert span.attributes is not None
        assert span.attributes["runlane.attempt"] == number
        assert span.attributes["runlane.run.id"] == run.id
        assert span.attributes["messaging.operation.type"] == "process"
    assert first.attributes is not None and second.attributes is not None
    assert first.attributes["runlane.outcome"] == "retrying"
    assert first.status.status_code is StatusCode.ERROR
    (event,) = [e for e in first.events if e.name == "exception"]
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "builtins.RuntimeError"
    assert event.attributes["exception.message"] == "card [card] declined"  # redacted
    assert SECRET not in str(event.attributes["exception.stacktrace"])
    assert second.attributes["runlane.outcome"] == "succeeded"
    assert second.status.status_code is not StatusCode.ERROR


def test_the_handler_runs_in_its_attempt_s_span_and_its_log_lines_name_the_trace(
    backend: Backend,
    worker_kind: WorkerKind,
    recorded: Recorded,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, seen = traced_app(backend, recorded)
    caplog.set_level(logging.INFO, logger="runlane_sqs")
    run = app.trigger(INSIDE)
    worker_kind.drain_all(app)

    (attempt,) = attempts(recorded, INSIDE)
    assert seen["current"] == ids(attempt)
    assert seen["trace_id"] == f"{attempt.context.trace_id:032x}"
    (charge,) = recorded.spans("charge")
    assert charge.parent is not None and ids(charge.parent) == ids(attempt)
    lines = [r for r in caplog.records if getattr(r, "run_id", None) == run.id]
    attempt_lines = [r for r in lines if r.name == "runlane_sqs.task"]
    assert {r.getMessage() for r in attempt_lines} >= {
        "attempt 1 started",
        "charging",
        "attempt 1 succeeded",
    }
    for record in attempt_lines:
        assert record.trace_id == seen["trace_id"]  # type: ignore[attr-defined]
    (triggered,) = [r for r in lines if r.getMessage().startswith("triggered run")]
    assert triggered.trace_id == seen["trace_id"]  # type: ignore[attr-defined]


def test_a_token_decision_links_the_attempt_it_resumes_which_stays_in_the_run_s_trace(
    backend: Backend,
    worker_kind: WorkerKind,
    recorded: Recorded,  # noqa: F811
) -> None:
    app, _ = traced_app(backend, recorded)
    token = app.tokens.create()
    run = app.trigger(TOKEN, {"token": token.id})
    worker_kind.drain_all(app)
    assert app.runs.get(run.id).status is RunStatus.RELEASED
    approver = recorded.tracer_provider.get_tracer("the-app")
    with approver.start_as_current_span("POST /approve") as request:
        app.tokens.complete(token.id, "approved")
    worker_kind.drain_all(app)

    assert app.runs.get(run.id).result == "approved"
    (trigger,) = recorded.spans(f"trigger {TOKEN}")
    (decide,) = recorded.spans("runlane decide token")
    assert decide.parent is not None and ids(decide.parent) == ids(request.get_span_context())
    assert decide.attributes is not None
    assert decide.attributes["runlane.resumed"] == 1
    assert token.id not in str(dict(decide.attributes))  # a bearer secret: a digest only
    waited, resumed = attempts(recorded, TOKEN)
    assert waited.attributes is not None and waited.attributes["runlane.outcome"] == "released"
    for span in (waited, resumed):
        assert span.parent is not None and ids(span.parent) == ids(trigger)
    assert ids(decide) in linked(resumed)
    assert ids(decide) not in linked(waited)


def test_every_run_a_token_resumes_links_to_its_decision_even_in_maintenance_s_batches(
    backend: Backend,
    worker_kind: WorkerKind,
    recorded: Recorded,  # noqa: F811
) -> None:
    """The decision resumes a first batch at once; maintenance resumes the rest later,
    and their attempts link to the decision too (the token keeps its context)."""
    app, _ = traced_app(backend, recorded)
    token = app.tokens.create()
    runs = app.trigger_many(TOKEN, [{"token": token.id}] * (RESUME_BATCH + 1))
    worker_kind.drain_all(app)
    approver = recorded.tracer_provider.get_tracer("the-app")
    with approver.start_as_current_span("POST /approve"):
        app.tokens.complete(token.id, "approved")
    later = app.maintenance.run_pass()
    worker_kind.drain_all(app)

    assert later.jobs[JOB_TOKENS].published == 1
    assert {app.runs.get(run.id).result for run in runs} == {"approved"}
    (decide,) = recorded.spans("runlane decide token")
    resumed = [s for s in attempts(recorded, TOKEN) if (s.attributes or {})["runlane.attempt"] == 2]
    assert len(resumed) == len(runs)
    assert all(ids(decide) in linked(span) for span in resumed)


def test_a_run_released_just_as_its_token_is_decided_links_to_the_decision(
    backend: Backend,
    worker_kind: WorkerKind,
    recorded: Recorded,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The token is decided after the handler found it pending and before the release is
    written: the decision finds no waiter, and the worker's look after its release
    resumes the run, its wakeup carrying the decision's context."""
    app, _ = traced_app(backend, recorded)
    token = app.tokens.create()
    tokens = app.store.tokens
    read = tokens.get_token

    def decided_right_after_reading(token_id: str) -> Token | None:
        found = read(token_id)
        if found is not None and not found.is_decided:
            with approver.start_as_current_span("POST /approve"):
                app.tokens.complete(token_id, "approved")
        return found

    approver = recorded.tracer_provider.get_tracer("the-app")
    monkeypatch.setattr(tokens, "get_token", decided_right_after_reading)
    run = app.trigger(TOKEN, {"token": token.id})
    worker_kind.drain_all(app)

    assert app.runs.get(run.id).result == "approved"
    (decide,) = recorded.spans("runlane decide token")
    assert decide.attributes is not None and decide.attributes["runlane.resumed"] == 0
    waited, resumed = attempts(recorded, TOKEN)
    assert ids(decide) in linked(resumed)
    assert ids(decide) not in linked(waited)


def test_a_signal_send_links_the_attempt_it_wakes(
    backend: Backend,
    worker_kind: WorkerKind,
    recorded: Recorded,  # noqa: F811
) -> None:
    app, _ = traced_app(backend, recorded)
    run = app.trigger(SIGNAL)
    worker_kind.drain_all(app)
    assert app.signals.send("order-7", {"paid": True}) == 1
    worker_kind.drain_all(app)

    assert app.runs.get(run.id).result == {"paid": True}
    (send,) = recorded.spans("runlane send signal")
    assert send.attributes is not None
    assert send.attributes["runlane.resumed"] == 1
    assert "order-7" not in str(dict(send.attributes))  # keys may name customers
    _, woken = attempts(recorded, SIGNAL)
    assert ids(send) in linked(woken)
    (trigger,) = recorded.spans(f"trigger {SIGNAL}")
    assert woken.context.trace_id == trigger.context.trace_id


def test_a_maintenance_republish_is_a_span_in_the_run_s_trace_linked_to_the_pass(
    backend: Backend,
    worker_kind: WorkerKind,
    recorded: Recorded,  # noqa: F811
) -> None:
    app, _ = traced_app(backend, recorded)
    run = app.trigger(FLAKY, delay=timedelta(hours=1))  # beyond SQS's delay: not published
    backend.clock.advance(timedelta(hours=1, seconds=1))
    report = app.maintenance.run_pass()
    worker_kind.drain_all(app)

    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED
    (trigger,) = recorded.spans(f"trigger {FLAKY}")
    (maintenance,) = recorded.spans("runlane maintenance pass")
    assert maintenance.attributes is not None
    assert maintenance.attributes["runlane.maintenance.pass_id"] == report.pass_id
    assert maintenance.attributes["runlane.action.published"] == 1
    (publish,) = recorded.spans(f"publish {FLAKY}")
    assert publish.kind is SpanKind.PRODUCER
    assert publish.parent is not None and ids(publish.parent) == ids(trigger)
    assert ids(maintenance) in linked(publish)
    first, second = attempts(recorded, FLAKY)
    assert ids(publish) in linked(first)  # the wakeup it sent named it
    for span in (first, second):
        assert span.parent is not None and ids(span.parent) == ids(trigger)


def test_attempts_can_start_traces_of_their_own_linked_to_the_trigger(
    backend: Backend,
    worker_kind: WorkerKind,
    recorded: Recorded,  # noqa: F811
) -> None:
    app, _ = traced_app(backend, recorded, attempts_as_children=False)
    app.trigger(INSIDE)
    worker_kind.drain_all(app)

    (trigger,) = recorded.spans(f"trigger {INSIDE}")
    (attempt,) = attempts(recorded, INSIDE)
    assert attempt.parent is None
    assert attempt.context.trace_id != trigger.context.trace_id
    assert ids(trigger) in linked(attempt)


def test_a_forged_or_malformed_trace_in_a_wakeup_changes_nothing(
    backend: Backend,
    worker_kind: WorkerKind,
    recorded: Recorded,  # noqa: F811
) -> None:
    app, _ = traced_app(backend, recorded)
    run = app.trigger(INSIDE, delay=timedelta(hours=1))
    backend.clock.advance(timedelta(hours=1, seconds=1))
    stored = app.runs.get(run.id)
    for forged in (
        "<script>alert(1)</script>\x1b[31m\u202e",
        "00-" + "0" * 32 + "-" + "1" * 16 + "-01",
    ):
        wakeup = Wakeup(run.environment, run.id, run.queue, backend.clock.now(), trace=forged)
        app.transport.publish([wakeup], None)
    worker_kind.drain_all(app)

    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED
    (trigger,) = recorded.spans(f"trigger {INSIDE}")
    (attempt,) = attempts(recorded, INSIDE)
    assert attempt.parent is not None and ids(attempt.parent) == ids(trigger)
    assert linked(attempt) == {ids(trigger)}  # the forged contexts link nothing
    assert trace_id_of(stored.trace) == f"{trigger.context.trace_id:032x}"


def test_without_tracing_runs_and_wakeups_carry_no_trace(
    backend: Backend, worker_kind: WorkerKind
) -> None:
    seen = {"tracer": trace.NoOpTracer()}
    app = backend.app(register=lambda a: register(a, seen), telemetry=Telemetry.off())
    run = app.trigger(INSIDE)
    assert run.trace is None and app.runs.get(run.id).trace is None
    assert '"trace"' not in app.publisher.wakeups([run])[0].to_json()
    assert worker_kind.drain(app) == 1
    assert app.runs.get(run.id).status is RunStatus.SUCCEEDED
