"""Settings an operator sets without changing code: the lease, maintenance's republish
throttle, parking and legacy values from ``RUNLANE_*`` variables
(``RunlaneConfig.from_env``), and a
worker's id, which names the host and process unless ``worker_id=`` or
``RUNLANE_WORKER_ID`` gives one."""

from __future__ import annotations

import os
import re
import socket
from datetime import timedelta

import pytest

from runlane_sqs import ConfigurationError, Runlane, RunlaneConfig
from runlane_sqs.runtime.worker import WorkerConfig
from runlane_sqs.testing import in_memory_app


def test_lease_republish_and_parking_come_from_the_environment() -> None:
    config = RunlaneConfig.from_env(
        {
            "RUNLANE_LEASE_SECONDS": "90",
            "RUNLANE_REPUBLISH_AFTER_SECONDS": "30.5",
            "RUNLANE_REPUBLISH_MAX_SECONDS": "600",
            "RUNLANE_PARK_AFTER_RECEIVES": "4",
        }
    )

    assert config.lease_duration == timedelta(seconds=90)
    assert (config.republish_after, config.republish_max) == (
        timedelta(seconds=30.5),
        timedelta(minutes=10),
    )
    assert config.park_after_receives == 4


def test_without_the_variables_the_defaults_hold() -> None:
    config = RunlaneConfig.from_env({})

    assert config.lease_duration == timedelta(seconds=60)
    assert (config.republish_after, config.republish_max) == (
        timedelta(minutes=5),
        timedelta(hours=1),
    )
    assert config.park_after_receives == 3


def test_settings_given_in_code_win_over_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNLANE_LEASE_SECONDS", "soon")  # invalid, but not read
    monkeypatch.setenv("RUNLANE_REPUBLISH_AFTER_SECONDS", "45")

    app = Runlane.from_env(lease_duration=30, store=in_memory_app().store)

    assert app.config.lease_duration == timedelta(seconds=30)
    assert app.config.republish_after == timedelta(seconds=45)


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"RUNLANE_LEASE_SECONDS": "a minute"},
            "RUNLANE_LEASE_SECONDS must be a number of seconds, not 'a minute'",
        ),
        (
            {"RUNLANE_LEASE_SECONDS": "2"},
            "lease_duration must be at least 3 seconds (set by RUNLANE_LEASE_SECONDS=2)",
        ),
        ({"RUNLANE_LEASE_SECONDS": "inf"}, "RUNLANE_LEASE_SECONDS must be finite"),
        (
            {"RUNLANE_REPUBLISH_AFTER_SECONDS": "-1"},
            "(set by RUNLANE_REPUBLISH_AFTER_SECONDS=-1)",
        ),
        (
            {"RUNLANE_REPUBLISH_AFTER_SECONDS": "600", "RUNLANE_REPUBLISH_MAX_SECONDS": "60"},
            "republish_after must be at least 1 s and at most republish_max (set by "
            "RUNLANE_REPUBLISH_AFTER_SECONDS=600, RUNLANE_REPUBLISH_MAX_SECONDS=60)",
        ),
        (
            {"RUNLANE_PARK_AFTER_RECEIVES": "2.5"},
            "RUNLANE_PARK_AFTER_RECEIVES must be a whole number, not '2.5'",
        ),
        (
            {"RUNLANE_PARK_AFTER_RECEIVES": "0"},
            "(set by RUNLANE_PARK_AFTER_RECEIVES=0)",
        ),
    ],
    ids=["not-a-number", "too-short", "infinite", "negative", "after-over-max", "fraction", "zero"],
)
def test_a_bad_value_is_a_configuration_error_naming_the_variable(
    variables: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError) as error:
        RunlaneConfig.from_env(variables)

    assert message in str(error.value)


@pytest.mark.parametrize(
    ("text", "opened"), [("true", True), ("1", True), ("YES", True), ("false", False), ("0", False)]
)
def test_legacy_values_open_only_when_the_variable_says_so(text: str, opened: bool) -> None:
    assert RunlaneConfig.from_env({}).open_legacy_values is False
    config = RunlaneConfig.from_env({"RUNLANE_OPEN_LEGACY_VALUES": text})
    assert config.open_legacy_values is opened
    with pytest.raises(ConfigurationError, match="must be true or false, not 'sometimes'"):
        RunlaneConfig.from_env({"RUNLANE_OPEN_LEGACY_VALUES": "sometimes"})
    with pytest.raises(ConfigurationError, match="open_legacy_values must be True or False"):
        RunlaneConfig(open_legacy_values="yes")  # type: ignore[arg-type]


def test_an_error_of_another_setting_does_not_blame_the_variables() -> None:
    with pytest.raises(ConfigurationError) as error:
        RunlaneConfig.from_env({"RUNLANE_LEASE_SECONDS": "90", "RUNLANE_ENVIRONMENT": "Prod"})

    assert "environment 'Prod'" in str(error.value)
    assert "RUNLANE_LEASE_SECONDS" not in str(error.value)


def test_the_default_worker_id_names_the_host_and_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RUNLANE_WORKER_ID", raising=False)
    host = re.sub(r"[^A-Za-z0-9.-]+", "-", socket.gethostname()).strip(".-")

    first = WorkerConfig.build(["default"]).worker_id
    second = WorkerConfig.build(["default"]).worker_id

    assert first.startswith(f"worker-{host[:63]}-{os.getpid()}-")
    assert re.fullmatch(r"worker-[A-Za-z0-9.-]+-\d+-[0-9a-f]{6}", first)
    assert first != second  # two workers of one process are told apart


def test_an_odd_host_name_is_kept_to_safe_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNLANE_WORKER_ID", raising=False)
    monkeypatch.setattr(socket, "gethostname", lambda: "build box #3 (ü)")

    worker_id = WorkerConfig.build(["default"]).worker_id

    assert worker_id.startswith(f"worker-build-box-3-{os.getpid()}-")


def test_the_worker_id_comes_from_the_argument_then_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RUNLANE_WORKER_ID", "ecs-task-7f3a")

    assert WorkerConfig.build(["default"]).worker_id == "ecs-task-7f3a"
    assert WorkerConfig.build(["default"], worker_id="given").worker_id == "given"
    assert in_memory_app().worker().worker_id == "ecs-task-7f3a"


@pytest.mark.parametrize(
    ("given", "variable", "named"),
    [("two words", None, "worker_id"), (None, "tab\there", "RUNLANE_WORKER_ID")],
)
def test_a_worker_id_with_spaces_is_refused_naming_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, given: str | None, variable: str | None, named: str
) -> None:
    if variable is None:
        monkeypatch.delenv("RUNLANE_WORKER_ID", raising=False)
    else:
        monkeypatch.setenv("RUNLANE_WORKER_ID", variable)

    with pytest.raises(ConfigurationError, match=f"^{named} "):
        WorkerConfig.build(["default"], worker_id=given)
