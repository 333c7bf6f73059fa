"""The Celery compatibility layer (``runlane_sqs.compat.celery``) on the in-memory app with
a manual clock: what a call creates, how results read, how retries, expiry and
revocation map, and what it refuses. (The Celery shop in ``tests/apps/celery_shop``
runs a Celery user's own tests on it, with a real worker too.)"""

from __future__ import annotations

import builtins
from datetime import UTC, datetime, timedelta

import pytest

from runlane_sqs import (
    ConfigurationError,
    ManualClock,
    RateLimit,
    Runlane,
    RunStatus,
    Schedule,
)
from runlane_sqs.compat.celery import (
    STATES,
    AsyncResult,
    Celery,
    InvalidOptionValue,
    MaxRetriesExceededError,
    Retry,
    TaskFailure,
    TaskRevokedError,
    TimeoutError,
    UnsupportedOption,
    shared_task,
)
from runlane_sqs.compat.celery import app as celery_compat
from runlane_sqs.errors import InvalidPayloadError, RunWaitTimedOut
from runlane_sqs.testing import in_memory_app


class Declined(Exception):
    """Defined in this module, beside the tasks: a failure is raised as it again."""


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def runlane(clock: ManualClock) -> Runlane:
    return in_memory_app(clock=clock)


@pytest.fixture
def app(runlane: Runlane) -> Celery:
    return Celery("shop", runlane=runlane, task_routes={"mail.*": {"queue": "mail"}})


def drain(runlane: Runlane) -> int:
    return runlane.worker().drain()


def test_delay_creates_a_run_whose_payload_is_the_arguments(app: Celery, runlane: Runlane) -> None:
    @app.task
    def add(a, b=0):
        return a + b

    result = add.delay(2, b=3)

    run = runlane.runs.get(result.id)
    assert run.task == add.name == f"{__name__}.add"
    assert run.payload == {"args": [2], "kwargs": {"b": 3}}
    assert (result.state, result.ready(), result.result) == ("PENDING", False, None)
    assert drain(runlane) == 1
    assert (result.get(timeout=1), result.state, result.successful()) == (5, "SUCCESS", True)
    assert app.AsyncResult(result.id) == result and result.task_id == result.id


def test_calling_a_task_runs_it_here_without_a_run(app: Celery, runlane: Runlane) -> None:
    @app.task(bind=True)
    def who(self, x):
        return [self.request.id, self.request.retries, self.request.called_directly, x]

    assert who(7) == [None, 0, True, 7]
    assert runlane.runs.list().runs == []


def test_a_bound_task_reads_the_run_id_and_retries_from_the_context(
    app: Celery, runlane: Runlane, clock: ManualClock
) -> None:
    @app.task(bind=True, max_retries=2, default_retry_delay=5)
    def flaky(self):
        if self.request.retries < 2:
            raise self.retry(exc=ConnectionError("down"))
        return {"id": self.request.id, "retries": self.request.retries}

    result = flaky.delay()
    drain(runlane)
    assert result.state == "RETRY"
    assert isinstance(result.result, Retry)
    clock.advance(5)  # the policy's delay: default_retry_delay
    drain(runlane)
    clock.advance(5)
    drain(runlane)
    assert result.get(timeout=1) == {"id": result.id, "retries": 2}
    failures = [a.failure for a in runlane.runs.attempts(result.id) if a.failure]
    assert [f.type for f in failures] == ["runlane_sqs.compat.celery.Retry"] * 2
    assert "ConnectionError('down')" in failures[0].message


def test_retry_countdown_and_eta_are_when_the_retry_is_due(
    app: Celery, runlane: Runlane, clock: ManualClock
) -> None:
    at = clock.now() + timedelta(hours=2)

    @app.task(bind=True, default_retry_delay=1)
    def wait(self, how):
        if self.request.retries == 0:
            if how == "countdown":
                raise self.retry(exc=ConnectionError("down"), countdown=30)
            if how == "eta":
                raise self.retry(eta=at)
            raise self.retry(eta=at.replace(tzinfo=None) - timedelta(hours=3))  # past: now
        return how

    by_countdown, by_eta, past = wait.delay("countdown"), wait.delay("eta"), wait.delay("past")
    failed_at = clock.now()
    drain(runlane)
    due = [runlane.runs.get(r.id).due_at for r in (by_countdown, by_eta)]
    assert due == [failed_at + timedelta(seconds=30), at]
    assert "Retry in 30s: ConnectionError('down')" in str(by_countdown.result)
    assert past.get(timeout=1) == "past"  # an eta already past: retried at once
    assert runlane.runs.get(past.id).attempt == 2
    clock.advance(29)
    assert drain(runlane) == 0
    clock.advance(1)
    assert drain(runlane) == 1
    assert by_countdown.get(timeout=1) == "countdown"
    clock.advance(timedelta(hours=2))
    runlane.maintenance.run_pass()  # publishes the retry due in two hours
    assert drain(runlane) == 1 and by_eta.get(timeout=1) == "eta"


def test_retry_with_a_countdown_longer_than_the_policy_cap_waits_the_countdown(
    app: Celery, runlane: Runlane, clock: ManualClock
) -> None:
    @app.task(bind=True, retry_backoff=True, retry_backoff_max=10, max_retries=1)
    def slow(self):
        if self.request.retries == 0:
            raise self.retry(countdown=3 * 24 * 3600)  # three days: stored, not in SQS
        return "later"

    result = slow.delay()
    drain(runlane)
    assert runlane.runs.get(result.id).due_at == clock.now() + timedelta(days=3)


@pytest.mark.parametrize(
    ("retry_options", "match"),
    [
        ({"countdown": 5, "eta": datetime(2030, 1, 1, tzinfo=UTC)}, "not both"),
        ({"countdown": "soon"}, "countdown must be seconds, not 'soon'"),
        ({"countdown": float("nan")}, "countdown must be seconds"),
        ({"countdown": True}, "countdown must be seconds"),
        ({"eta": "2030-01-01"}, "eta must be a datetime"),
    ],
)
def test_a_bad_retry_time_fails_the_run_naming_it(
    app: Celery, runlane: Runlane, retry_options: dict[str, object], match: str
) -> None:
    @app.task(bind=True, name="bad.retry")
    def bad(self):
        raise self.retry(**retry_options)

    result = bad.delay()
    drain(runlane)
    with pytest.raises(InvalidOptionValue, match=match):
        result.get(timeout=1)
    assert runlane.runs.get(result.id).attempt == 1  # not retried


def test_retries_used_up_fail_with_the_exception_given_to_retry(
    app: Celery, runlane: Runlane, clock: ManualClock
) -> None:
    @app.task(bind=True, max_retries=1, default_retry_delay=1)
    def busy(self):
        raise self.retry(exc=Declined("still busy"))

    @app.task(bind=True, max_retries=0)
    def bare(self):
        raise self.retry()

    first, second = busy.delay(), bare.delay()
    drain(runlane)
    clock.advance(1)
    drain(runlane)

    with pytest.raises(Declined, match="still busy") as raised:
        first.get(timeout=1)
    assert any("its traceback" in note for note in raised.value.__notes__)
    assert (first.state, first.failed(), runlane.runs.get(first.id).attempt) == ("FAILURE", True, 2)
    assert isinstance(second.get(propagate=False), MaxRetriesExceededError)
    assert "can't retry" in str(second.result)


def test_only_autoretry_for_exceptions_are_retried(
    app: Celery, runlane: Runlane, clock: ManualClock
) -> None:
    @app.task(autoretry_for=(ConnectionError,), retry_backoff=2, retry_jitter=False)
    def call(kind):
        raise ConnectionError("down") if kind == "network" else KeyError(kind)

    network, bug = call.delay("network"), call.delay("bug")
    drain(runlane)
    assert (network.state, bug.state) == ("RETRY", "FAILURE")
    assert isinstance(bug.result, KeyError)
    for wait in (2, 4, 8):  # exponential from retry_backoff, max_retries=3 by default
        clock.advance(wait)
        drain(runlane)
    assert runlane.runs.get(network.id).attempt == 4
    with pytest.raises(ConnectionError, match="down"):
        network.get(timeout=1)


def test_an_unknown_exception_type_is_a_task_failure_with_its_type(
    app: Celery, runlane: Runlane
) -> None:
    unknown = type("Unknown", (Exception,), {})

    @app.task
    def fail():
        raise unknown("it broke")

    result = fail.delay()
    drain(runlane)

    with pytest.raises(TaskFailure) as raised:
        result.get(timeout=1)
    assert raised.value.failure.type.endswith("Unknown")
    assert raised.value.failure.message == "it broke"
    assert "it broke" in (result.traceback or "")


def test_get_times_out_with_a_timeout_error(app: Celery) -> None:
    @app.task
    def slow():
        return 1

    result = slow.delay()

    with pytest.raises(TimeoutError) as raised:
        result.get(timeout=0.05)
    assert isinstance(raised.value, builtins.TimeoutError)
    assert isinstance(raised.value, RunWaitTimedOut)
    assert raised.value.run.status is RunStatus.QUEUED


def test_get_inside_a_task_is_refused(app: Celery, runlane: Runlane) -> None:
    @app.task
    def inner():
        return 1

    @app.task
    def outer():
        return inner.delay().get(timeout=1)

    result = outer.delay()
    drain(runlane)

    with pytest.raises(RuntimeError, match=r"Never call result\.get"):
        result.get(timeout=1)


def test_countdown_and_eta_delay_the_run(app: Celery, runlane: Runlane, clock: ManualClock) -> None:
    @app.task
    def later():
        return "done"

    by_countdown = later.apply_async(countdown=30)
    by_eta = later.apply_async(eta=clock.now() + timedelta(seconds=60))
    naive_eta = later.apply_async(eta=clock.now().replace(tzinfo=None) + timedelta(seconds=90))

    due = [runlane.runs.get(r.id).due_at - clock.now() for r in (by_countdown, by_eta, naive_eta)]
    assert due == [timedelta(seconds=30), timedelta(seconds=60), timedelta(seconds=90)]


def test_expires_revokes_a_run_that_starts_too_late(
    app: Celery, runlane: Runlane, clock: ManualClock
) -> None:
    @app.task(autoretry_for=(Exception,))
    def timely():
        return "ran"

    late = timely.apply_async(countdown=60, expires=30)
    in_time = timely.apply_async(expires=datetime(2100, 1, 1, tzinfo=UTC))
    clock.advance(60)
    drain(runlane)

    assert in_time.get(timeout=1) == "ran"
    assert (late.state, late.ready(), late.failed()) == ("REVOKED", True, False)
    assert runlane.runs.get(late.id).attempt == 1  # not retried, even under autoretry_for
    with pytest.raises(TaskRevokedError, match="expired"):
        late.get(timeout=1)


def test_revoke_cancels_the_run(app: Celery, runlane: Runlane) -> None:
    @app.task
    def never():
        return 1

    result = never.delay()
    result.revoke()
    result.revoke()  # a finished run: quiet, as Celery's

    assert result.state == "REVOKED"
    assert isinstance(result.get(propagate=False), TaskRevokedError)


def test_routes_and_queue_options_choose_the_run_queue(app: Celery, runlane: Runlane) -> None:
    @app.task(name="mail.send")
    def send():
        return 1

    @app.task(queue="reports")
    def build():
        return 1

    assert runlane.runs.get(send.apply_async(queue="mail").id).queue == "mail"
    assert runlane.runs.get(build.delay().id).queue == "reports"
    assert runlane.runs.get(build.apply_async(queue="urgent").id).queue == "urgent"
    with pytest.raises(ConfigurationError, match="queue name 'not a queue'"):
        build.apply_async(queue="not a queue")


def test_time_limit_is_the_attempt_timeout(app: Celery, runlane: Runlane) -> None:
    @app.task(time_limit=30, soft_time_limit=20)
    def bounded():
        return 1

    @app.task(soft_time_limit=20)
    def soft():
        return 1

    assert runlane.tasks.resolve(bounded.name).timeout == timedelta(seconds=30)
    assert runlane.tasks.resolve(soft.name).timeout == timedelta(seconds=20)


def test_runlane_keys_pass_through_apply_async(app: Celery, runlane: Runlane) -> None:
    @app.task
    def once(order):
        return order

    first = once.apply_async(args=(7,), idempotency_key="order-7")
    again = once.apply_async(args=(7,), idempotency_key="order-7")

    assert first.id == again.id


def test_send_task_and_shared_task(runlane: Runlane, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(celery_compat, "_SHARED", [])  # registered on this test's apps only

    @shared_task(name="shared.double")
    def double(x):
        return 2 * x

    app = Celery("shop", runlane=runlane)  # made after the shared task: registers it
    result = app.send_task("shared.double", args=(4,))
    drain(runlane)

    assert result.get(timeout=1) == 8
    assert double(5) == 10
    assert double.delay(1).id != result.id
    with pytest.raises(InvalidOptionValue, match="no task 'nope'"):
        app.send_task("nope")


def test_a_schedule_runs_a_task_with_the_call_payload(
    app: Celery, runlane: Runlane, clock: ManualClock
) -> None:
    at = clock.now() + timedelta(minutes=5)

    @app.task(
        schedules=[Schedule.once("report.once", at, payload={"args": [], "kwargs": {"kind": "x"}})]
    )
    def report(kind):
        return kind

    clock.advance(timedelta(minutes=5))
    runlane.maintenance.run_pass()
    drain(runlane)

    [run] = runlane.runs.list(task=report.name).runs
    assert app.AsyncResult(run.id).get(timeout=1) == "x"


def test_states_cover_every_status() -> None:
    assert set(STATES) == set(RunStatus)
    assert set(STATES.values()) == {"PENDING", "STARTED", "RETRY", "SUCCESS", "FAILURE", "REVOKED"}


# bad input -----------------------------------------------------------------------------


def test_arguments_that_are_not_json_are_refused_by_name(app: Celery, runlane: Runlane) -> None:
    @app.task
    def store(a, b=None):
        return a

    with pytest.raises(InvalidPayloadError, match=r"argument 0 of .*store\(\) is not JSON"):
        store.delay({1, 2})
    with pytest.raises(InvalidPayloadError, match=r"keyword argument 'b' of .*store\(\)"):
        store.delay(1, b=datetime.now(UTC))
    with pytest.raises(InvalidPayloadError, match="argument 0"):
        store.delay(float("nan"))
    with pytest.raises(TypeError, match="keywords must be strings"):
        store.apply_async(args=(1,), kwargs={1: 2})
    with pytest.raises(TypeError, match="missing a required argument: 'a'"):
        store.delay()
    assert runlane.runs.list().runs == []


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"rate_limit": "10/x"}, UnsupportedOption, "whole number of starts per s, m or h"),
        ({"rate_limit": 2.5}, UnsupportedOption, "whole number of starts"),
        ({"rate_limit": "0/s"}, UnsupportedOption, "rate is from 1"),
        ({"serializer": "pickle"}, InvalidOptionValue, "JSON only"),
        ({"max_retries": -1}, InvalidOptionValue, "max_retries"),
        ({"default_retry_delay": -5}, InvalidOptionValue, "must not be negative"),
        ({"retry_kwargs": {"eta": 1}}, UnsupportedOption, "retry_kwargs"),
        ({"autoretry_for": (ValueError, "oops")}, InvalidOptionValue, "exception types"),
        ({"base": object}, UnsupportedOption, "subclass-based tasks"),
        ({"no_such_option": 1}, UnsupportedOption, "not a supported option"),
    ],
)
def test_task_options_refused(
    app: Celery, runlane: Runlane, options: dict[str, object], error: type, message: str
) -> None:
    def handler():
        return 1

    with pytest.raises(error, match=message):
        app.task(**options)(handler)  # type: ignore[call-overload]
    assert runlane.tasks.names() == []


@pytest.mark.parametrize(
    ("rate_limit", "expected"),
    [("10/m", RateLimit(10, per=60)), ("5/s", RateLimit(5)), (3, RateLimit(3))],
)
def test_a_rate_limit_holds_across_the_fleet(
    app: Celery, runlane: Runlane, rate_limit: object, expected: RateLimit
) -> None:
    @app.task(rate_limit=rate_limit)  # type: ignore[call-overload]
    def notify() -> int:
        return 1

    assert runlane.tasks.resolve(notify.name).rate_limits == (expected,)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"task_id": "abc"}, UnsupportedOption, "idempotency_key"),
        ({"link": None}, UnsupportedOption, "chain"),
        ({"priority": 5}, UnsupportedOption, "priorities"),
        ({"countdown": 5, "eta": datetime(2030, 1, 1, tzinfo=UTC)}, InvalidOptionValue, "not both"),
        ({"expires": -1}, InvalidOptionValue, "must not be negative"),
        ({"expires": datetime(2000, 1, 1, tzinfo=UTC)}, InvalidOptionValue, "already past"),
        ({"serializer": "yaml"}, InvalidOptionValue, "JSON only"),
    ],
)
def test_call_options_refused(
    app: Celery, runlane: Runlane, options: dict[str, object], error: type, message: str
) -> None:
    @app.task
    def job():
        return 1

    with pytest.raises(error, match=message):
        job.apply_async(**options)  # type: ignore[arg-type]
    assert runlane.runs.list().runs == []


def test_retry_with_other_arguments_and_async_tasks_are_refused(app: Celery) -> None:
    @app.task(bind=True)
    def again(self):
        self.retry(args=(1,))

    with pytest.raises(UnsupportedOption, match="same payload"):
        again()

    async def coroutine():
        return 1

    with pytest.raises(UnsupportedOption, match="plain functions"):
        app.task(coroutine)
    with pytest.raises(UnsupportedOption, match="signatures"):
        again.s()


def test_a_payload_of_another_shape_fails_without_retry(app: Celery, runlane: Runlane) -> None:
    @app.task(name="plain", autoretry_for=(Exception,))
    def plain(x):
        return x

    run = runlane.trigger("plain", {"x": 1})  # triggered by hand, not by a call
    drain(runlane)

    result = AsyncResult(run.id, app=app)
    assert result.state == "FAILURE"
    with pytest.raises(InvalidPayloadError, match="payload must be"):
        result.get(timeout=1)
