"""The pure pieces of the CLI: JSON shapes, exit codes, option parsing, log formats."""

from __future__ import annotations

import json
import logging
import sys
import types
from datetime import UTC, datetime, timedelta, timezone

import click
import pytest
from botocore.exceptions import EndpointConnectionError

from runlane_sqs import IllegalTransition, InvalidKeyError, MissingResourceError, RunNotFound
from runlane_sqs.api.loading import AppNotImportable, InvalidAppSpec, load_app
from runlane_sqs.api.shapes import iso, run_to_json, token_to_json
from runlane_sqs.cli.exits import (
    EXIT_APP_NOT_IMPORTABLE,
    EXIT_BACKEND,
    EXIT_ILLEGAL,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    exit_code_for,
)
from runlane_sqs.cli.logs import TextFormatter, json_formatter
from runlane_sqs.cli.options import parse_age_or_time, parse_json_option, parse_time
from runlane_sqs.core.errors import (
    ConfigurationError,
    InvalidCursor,
    StorageUnavailable,
    TransportError,
    UnknownTaskError,
)
from runlane_sqs.core.tokens import TokenAlreadyDecided, TokenNotFound
from runlane_sqs.testing import in_memory_app


def test_times_are_iso_utc_with_milliseconds_and_z() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert iso(datetime(2026, 11, 30, 12, 0, 5, 40000, tzinfo=plus_two)) == (
        "2026-11-30T10:00:05.040Z"
    )
    assert iso(datetime(2026, 11, 30, 10, 0)) == "2026-11-30T10:00:00.000Z"  # naive: UTC
    assert iso(None) is None


def test_run_and_token_shapes_are_plain_json_without_the_lease_token() -> None:
    app = in_memory_app()
    app.task(lambda ctx, payload: payload, name="echo")
    run = app.trigger("echo", {"n": 1}, idempotency_key="k-1")
    shape = run_to_json(run)
    assert json.loads(json.dumps(shape)) == shape
    assert (shape["id"], shape["status"], shape["payload"], shape["idempotency_key"]) == (
        run.id,
        "queued",
        {"n": 1},
        "k-1",
    )
    assert shape["created_at"].endswith("Z")
    token = token_to_json(app.tokens.create(timeout=60))
    assert (token["status"], token["value"], token["decided_at"]) == ("pending", None, None)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (AppNotImportable("x"), EXIT_APP_NOT_IMPORTABLE),
        (InvalidAppSpec("x"), EXIT_APP_NOT_IMPORTABLE),
        (RunNotFound("r"), EXIT_NOT_FOUND),
        (TokenNotFound("t"), EXIT_NOT_FOUND),
        (UnknownTaskError("t", []), EXIT_NOT_FOUND),
        (IllegalTransition("x"), EXIT_ILLEGAL),
        (InvalidKeyError("x"), EXIT_USAGE),
        (InvalidCursor("cursor 'garbage' is not valid"), EXIT_USAGE),
        (ConfigurationError("concurrency must be at least 1"), EXIT_BACKEND),
        (MissingResourceError("x"), EXIT_BACKEND),
        (StorageUnavailable("x"), EXIT_BACKEND),
        (TransportError("x"), EXIT_BACKEND),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), EXIT_BACKEND),
    ],
)
def test_each_error_has_its_documented_exit_code(error: Exception, code: int) -> None:
    assert exit_code_for(error) == code


def test_an_optional_extra_that_is_not_installed_is_an_app_that_cannot_load() -> None:
    error = ConfigurationError("the async worker needs aioboto3: pip install 'runlane-sqs[async]'")
    error.__cause__ = ModuleNotFoundError("No module named 'aioboto3'", name="aioboto3")
    assert exit_code_for(error) == EXIT_APP_NOT_IMPORTABLE


def test_a_token_decided_twice_is_an_illegal_action() -> None:
    app = in_memory_app()
    token = app.tokens.complete(app.tokens.create().id, 1)
    assert exit_code_for(TokenAlreadyDecided(token)) == EXIT_ILLEGAL


def test_json_options_reject_bad_json_as_usage_errors() -> None:
    ctx = click.Context(click.Command("x"))
    param = click.Option(["--payload"])
    assert parse_json_option(ctx, param, '{"a": [1, true]}') == {"a": [1, True]}
    assert parse_json_option(ctx, param, None) is None
    with pytest.raises(click.BadParameter, match="not valid JSON"):
        parse_json_option(ctx, param, "{'a': 1}")


def test_older_than_is_an_age_in_seconds_or_a_time() -> None:
    ctx = click.Context(click.Command("x"))
    param = click.Option(["--older-than"])
    assert parse_age_or_time(ctx, param, "86400") == 86400.0
    assert parse_age_or_time(ctx, param, "2026-11-30T10:00:00") == datetime(
        2026, 11, 30, 10, tzinfo=UTC
    )
    assert parse_time("2026-11-30T10:00:00Z") == datetime(2026, 11, 30, 10, tzinfo=UTC)
    for bad in ("-1", "yesterday"):
        with pytest.raises(click.BadParameter):
            parse_age_or_time(ctx, param, bad)


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord(
        "runlane_sqs.task", logging.INFO, __file__, 1, "attempt %d", (1,), None
    )
    for name, value in extra.items():
        setattr(record, name, value)
    return record


def test_json_log_lines_carry_the_extras() -> None:
    line = json.loads(json_formatter().format(_record(run_id="r1", task="t", attempt=1)))
    assert line["message"] == "attempt 1"
    assert (line["level"], line["logger"]) == ("INFO", "runlane_sqs.task")
    assert (line["run_id"], line["task"], line["attempt"]) == ("r1", "t", 1)
    assert "time" in line


def test_text_log_lines_append_the_run_context() -> None:
    line = TextFormatter("%(levelname)s %(message)s").format(
        _record(run_id="r1", worker_id="worker-1")
    )
    assert line == "INFO attempt 1 run_id=r1 worker_id=worker-1"


@pytest.fixture
def jobs_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """An importable module ``jobs`` holding two apps, a list and a None."""
    module = types.ModuleType("jobs")
    module.app = in_memory_app()  # type: ignore[attr-defined]
    module.admin = in_memory_app()  # type: ignore[attr-defined]
    module.tasks = []  # type: ignore[attr-defined]
    module.unset = None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jobs", module)
    return module


def test_loading_an_app_by_module_and_attribute(jobs_module: types.ModuleType) -> None:
    assert load_app("jobs:admin") is jobs_module.admin


def test_an_attribute_the_module_lacks_is_named_with_the_apps_it_has(
    jobs_module: types.ModuleType,
) -> None:
    with pytest.raises(AppNotImportable) as raised:
        load_app("jobs:nope")
    assert str(raised.value) == (
        "module 'jobs' has no attribute 'nope'; its Runlane apps: jobs:admin, jobs:app"
    )


def test_a_module_without_apps_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "empty_jobs", types.ModuleType("empty_jobs"))
    with pytest.raises(AppNotImportable) as raised:
        load_app("empty_jobs:app")
    assert str(raised.value) == (
        "module 'empty_jobs' has no attribute 'app'; it holds no Runlane app"
    )


@pytest.mark.parametrize(("attribute", "found"), [("tasks", "a list"), ("unset", "None")])
def test_an_attribute_that_is_not_an_app_says_what_it_is(
    jobs_module: types.ModuleType, attribute: str, found: str
) -> None:
    with pytest.raises(AppNotImportable) as raised:
        load_app(f"jobs:{attribute}")
    assert str(raised.value) == (
        f"'jobs:{attribute}' is {found}, not a Runlane app; its Runlane apps: jobs:admin, jobs:app"
    )
