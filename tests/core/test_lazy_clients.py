"""An app can be built, imported and given its tasks with no AWS settings at all: its
clients are built at the first request, and a missing region is then a clear
configuration error naming the variables to set."""

from __future__ import annotations

from pathlib import Path

import pytest

from runlane_sqs import ConfigurationError, Runlane, TaskContext

AWS_VARIABLES = (
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_PROFILE",
)


@pytest.fixture
def no_aws_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))


def build() -> Runlane:
    app = Runlane.from_env()

    @app.task(name="send")
    def send(ctx: TaskContext, payload: object) -> object:
        return payload

    return app


@pytest.mark.usefixtures("no_aws_settings")
def test_an_app_is_built_and_given_tasks_without_a_region() -> None:
    app = build()
    assert app.tasks.names() == ["send"]
    assert app.config.region is None


@pytest.mark.usefixtures("no_aws_settings")
def test_the_first_request_without_a_region_names_the_variables_to_set() -> None:
    app = build()
    with pytest.raises(ConfigurationError) as raised:
        app.trigger("send", {"to": "a@example.com"})
    assert "AWS_DEFAULT_REGION" in str(raised.value)
    assert "sqs" in str(raised.value)
    with pytest.raises(ConfigurationError, match="AWS_DEFAULT_REGION"):
        app.runs.get("0123456789abcdef0123456789abcdef")


@pytest.mark.usefixtures("no_aws_settings")
def test_a_region_given_to_the_app_is_enough_to_build_its_clients() -> None:
    app = Runlane(region="eu-west-1", endpoint_url="http://127.0.0.1:1")
    assert app.client("dynamodb").meta.region_name == "eu-west-1"
    assert app.client("sqs") is app.client("sqs")
