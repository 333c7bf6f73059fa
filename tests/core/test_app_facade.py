"""The app's options are declared once and reach what they set: settings given as keyword
arguments or as a ``RunlaneConfig`` (and both, only when they agree), task options to the
registered task, trigger options to the run, worker options to the worker."""

from __future__ import annotations

from dataclasses import fields
from datetime import timedelta

import pytest

from runlane_sqs import (
    ConfigurationError,
    ManualClock,
    RetryPolicy,
    Runlane,
    RunlaneConfig,
    RunlaneSettings,
    Schedule,
    TaskContext,
)
from runlane_sqs.testing import InMemoryRunStore, in_memory_app


def echo(ctx: TaskContext, payload: object) -> object:
    return payload


def test_the_keyword_settings_are_the_fields_of_the_config() -> None:
    assert set(RunlaneSettings.__optional_keys__) == {f.name for f in fields(RunlaneConfig)}


def test_settings_as_keyword_arguments_make_the_config() -> None:
    app = Runlane(table="t", environment="e", lease_duration=30, queue_urls={"q": "https://x/q"})

    assert (app.config.table, app.config.environment) == ("t", "e")
    assert app.config.lease_duration == timedelta(seconds=30)
    assert app.config.queue_urls == {"q": "https://x/q"}


def test_a_setting_that_conflicts_with_the_config_is_refused() -> None:
    config = RunlaneConfig(table="t", environment="e")

    with pytest.raises(ConfigurationError, match="lease_duration=0:00:05 where the config"):
        Runlane(config=config, lease_duration=5)
    with pytest.raises(ConfigurationError, match="environment=prod where the config has e"):
        Runlane(config=config, table="t", environment="prod")


def test_settings_that_agree_with_the_config_or_none_are_accepted() -> None:
    config = RunlaneConfig(table="t", environment="e", lease_duration=timedelta(seconds=30))

    assert Runlane(config=config).config is config
    assert Runlane(config=config, lease_duration=30, table="t").config is config
    assert Runlane(config=config, lease_duration=timedelta(seconds=30)).config is config


def test_a_name_that_is_no_setting_is_a_type_error_with_or_without_a_config() -> None:
    with pytest.raises(TypeError, match="lease_seconds"):
        Runlane(lease_seconds=30)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="lease_seconds"):
        Runlane(config=RunlaneConfig(), lease_seconds=30)  # type: ignore[call-arg]


def test_table_and_environment_are_no_longer_positional() -> None:
    with pytest.raises(TypeError):
        Runlane("t")  # type: ignore[arg-type, misc]


def test_from_env_takes_settings_and_collaborators() -> None:
    store = InMemoryRunStore("e")
    clock = ManualClock()

    app = Runlane.from_env(environment="e", park_after_receives=5, store=store, clock=clock)

    assert (app.config.environment, app.config.park_after_receives) == ("e", 5)
    assert (app.store, app.clock) == (store, clock)


def test_in_memory_app_is_in_the_test_environment_unless_told() -> None:
    assert in_memory_app().config.environment == "test"
    other = in_memory_app(environment="other", lease_duration=10)
    assert (other.config.environment, other.config.lease_duration) == (
        "other",
        timedelta(seconds=10),
    )


def test_task_options_reach_the_registered_task() -> None:
    app = in_memory_app(maintenance_period=60)
    retry = RetryPolicy(max_attempts=3)
    schedule = Schedule.every("hourly", timedelta(hours=1))

    task = app.task(
        echo,
        name="echo",
        queue="emails",
        retry=retry,
        timeout=12,
        schedules=[schedule],
        concurrency_key=lambda payload: "k",
        key_limit=2,
    )

    assert app.tasks.resolve("echo") is task
    assert (task.queue, task.retry, task.timeout, task.key_limit) == (
        "emails",
        retry,
        timedelta(seconds=12),
        2,
    )
    assert task.concurrency_key is not None and task.concurrency_key({}) == "k"
    assert [(s.id, s.task) for s in task.schedules] == [("hourly", "echo")]


def test_task_options_given_to_the_decorator_reach_the_task() -> None:
    app = in_memory_app()
    limited = app.queue("slow", concurrency_limit=1)

    @app.task(name="slow", queue=limited, retry=RetryPolicy(max_attempts=2))
    def slow(ctx: TaskContext, payload: object) -> None: ...

    assert (slow.name, slow.queue, slow.retry.max_attempts) == ("slow", "slow", 2)
    assert app.tasks.queue("slow").concurrency_limit == 1


def test_a_task_without_options_takes_the_defaults() -> None:
    app = in_memory_app()

    task = app.task(echo)

    assert task.name == f"{__name__}.echo"
    assert (task.queue, task.retry.max_attempts, task.timeout, task.schedules) == (
        "default",
        1,
        None,
        (),
    )


def test_trigger_options_reach_the_run() -> None:
    clock = ManualClock()
    app = in_memory_app(clock=clock)
    app.task(echo, name="echo")

    delayed = app.trigger("echo", 1, delay=30, idempotency_key="once")
    again = app.trigger("echo", 2, idempotency_key="once")
    batch = app.trigger_many("echo", [3, 4], delay=60)

    assert delayed.due_at == clock.now() + timedelta(seconds=30)
    assert delayed.idempotency_key == "once"
    assert (again.id, again.created) == (delayed.id, False)
    assert [run.due_at for run in batch] == [clock.now() + timedelta(seconds=60)] * 2


def test_worker_options_reach_the_worker() -> None:
    app = in_memory_app()
    app.task(echo, name="echo")

    worker = app.worker(concurrency=3, wait_seconds=2, grace_period=5, worker_id="w-1")

    assert (worker.config.concurrency, worker.config.wait_seconds) == (3, 2)
    assert (worker.config.grace_period, worker.worker_id) == (timedelta(seconds=5), "w-1")
