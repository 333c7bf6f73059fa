"""App versions (docs/versions.md): the setting and its variable, the version a claim
records, the installed distribution's version as the default, and the count of
unfinished runs per version and task."""

from __future__ import annotations

import importlib.metadata
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import pytest

from runlane_sqs import ConfigurationError, RunlaneConfig
from runlane_sqs.core import machine
from runlane_sqs.core.machine import Transition
from runlane_sqs.core.model import EventType, Run, RunStatus
from runlane_sqs.core.versions import count_versions, pinned_elsewhere, pinned_retry_delay
from runlane_sqs.engine.tasks import TaskRegistry

NOW = datetime(2026, 12, 5, 12, tzinfo=UTC)


def a_run(task: str = "billing.charge", **changes: object) -> Run:
    run = Run(
        id="a" * 32,
        environment="test",
        task=task,
        queue="default",
        status=RunStatus.QUEUED,
        payload=None,
        created_at=NOW,
        updated_at=NOW,
        seq=1,
        due_at=NOW,
    )
    return run.with_changes(**changes)


def claimed(run: Run, version: str | None) -> Transition:
    decision = machine.claim_lease(
        run,
        now=NOW,
        owner="worker-1",
        token="t" * 32,
        duration=timedelta(seconds=60),
        app_version=version,
    )
    assert isinstance(decision, Transition)
    return decision


@pytest.mark.parametrize("version", ["2026.12.1", "shop==1.4.0", "a1b2c3d", "v1+build.7", "x"])
def test_a_version_is_taken_from_the_setting_or_the_variable(version: str) -> None:
    assert RunlaneConfig(app_version=version).app_version == version
    assert RunlaneConfig.from_env({"RUNLANE_APP_VERSION": f" {version} "}).app_version == version


def test_no_version_is_configured_by_default_and_the_setting_wins_over_the_variable() -> None:
    assert RunlaneConfig.from_env({}).app_version is None
    given = RunlaneConfig.from_env({"RUNLANE_APP_VERSION": "old"}, app_version="new")
    assert given.app_version == "new"


@pytest.mark.parametrize(
    "version",
    ["", "v1 beta", "v1\nv2", "v1\x00", "<b>v1</b>", "v\u202e1", "v\ud8001", ".v1", "9" * 129],
)
def test_a_bad_version_is_a_configuration_error_naming_the_variable(version: str) -> None:
    with pytest.raises(ConfigurationError, match=r"app_version .* must match"):
        RunlaneConfig(app_version=version)
    if version.strip():
        with pytest.raises(ConfigurationError, match="set by RUNLANE_APP_VERSION="):
            RunlaneConfig.from_env({"RUNLANE_APP_VERSION": version})


def test_the_first_attempt_gives_the_run_its_version_and_every_attempt_records_its_own() -> None:
    first = claimed(a_run(), "2026.11.3")
    assert first.after.app_version == "2026.11.3"
    assert first.events[-1].type is EventType.STARTED
    assert first.events[-1].data == {"worker": "worker-1", "app_version": "2026.11.3"}

    released = first.after.with_changes(status=RunStatus.RELEASED, lease=None, due_at=NOW)
    second = claimed(released, "2026.12.1")
    assert second.after.app_version == "2026.11.3"  # the version it started under stays
    assert second.events[-1].data == {"worker": "worker-1", "app_version": "2026.12.1"}


def test_a_worker_with_no_version_records_none() -> None:
    first = claimed(a_run(), None)
    assert first.after.app_version is None
    assert first.events[-1].data == {"worker": "worker-1"}
    # a run that started before versions were recorded does not take a later one
    second = claimed(a_run(attempt=1, status=RunStatus.RELEASED), "2026.12.1")
    assert second.after.app_version is None


def test_the_default_version_is_the_installed_distribution_the_handlers_come_from() -> None:
    registry = TaskRegistry()
    registry.register(lambda ctx, payload: None, name="local.task")
    assert registry.installed_version() is None  # this test module is no distribution

    # a function of an installed one, its annotations no payload type
    registry.register(click.echo, name="installed.task", payload_type=Any)
    assert registry.installed_version() == f"click=={importlib.metadata.version('click')}"


def test_the_count_groups_unfinished_runs_by_version_and_task_and_leaves_finished_out() -> None:
    runs = [
        a_run(attempt=1, status=RunStatus.RELEASED, app_version="2026.12.1"),
        a_run(attempt=2, status=RunStatus.RUNNING, app_version="2026.12.1"),
        a_run(attempt=1, status=RunStatus.RELEASED, app_version="2026.11.3"),
        a_run("mail.send", attempt=1, status=RunStatus.RETRYING, app_version="2026.11.3"),
        a_run(attempt=3, status=RunStatus.PARKED),
        a_run(attempt=1, status=RunStatus.SUCCEEDED, app_version="2026.10.1"),
        a_run(),
        a_run("mail.send"),
        a_run("mail.send"),
    ]
    report = count_versions(runs)

    assert [(c.app_version, c.task, c.runs, c.statuses) for c in report.counts] == [
        (None, "billing.charge", 1, {"parked": 1}),
        ("2026.11.3", "billing.charge", 1, {"released": 1}),
        ("2026.11.3", "mail.send", 1, {"retrying": 1}),
        ("2026.12.1", "billing.charge", 2, {"released": 1, "running": 1}),
    ]
    assert report.not_started == {"billing.charge": 1, "mail.send": 2}
    assert report.versions == ["2026.11.3", "2026.12.1"]
    assert report.to_json()["not_started"] == {"billing.charge": 1, "mail.send": 2}


def test_a_pinned_run_is_left_only_when_it_started_elsewhere_and_could_run_now() -> None:
    started = a_run(attempt=1, app_version="v1")
    assert pinned_elsewhere(started, "v2", NOW)
    assert pinned_elsewhere(started, None, NOW)  # a worker with no version is another one
    assert not pinned_elsewhere(started, "v1", NOW)
    assert not pinned_elsewhere(a_run(), "v2", NOW)  # not started: anyone's
    assert not pinned_elsewhere(started.with_changes(due_at=NOW + timedelta(1)), "v2", NOW)
    assert not pinned_elsewhere(started.with_changes(status=RunStatus.RUNNING), "v2", NOW)


@pytest.mark.parametrize(
    ("waited", "delay"),
    [(0, 5), (4, 5), (60, 30), (600, 300), (1800, 900), (86_400, 900)],
)
def test_a_left_wakeup_comes_back_later_the_longer_the_run_has_waited(
    waited: int, delay: int
) -> None:
    run = a_run(attempt=1, app_version="v1", due_at=NOW - timedelta(seconds=waited))
    assert pinned_retry_delay(run, NOW) == timedelta(seconds=delay)
