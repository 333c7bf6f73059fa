"""The Celery compatibility layer's settings and task modules: ``app.conf``,
``config_from_object`` and ``autodiscover_tasks`` as a Celery project uses them, what each
supported setting does to the runs, and the settings refused by name (docs/from-celery.md,
"Settings")."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from runlane_sqs import ManualClock, Runlane
from runlane_sqs.compat.celery import Celery, InvalidOptionValue, UnsupportedOption
from runlane_sqs.testing import in_memory_app


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def runlane(clock: ManualClock) -> Runlane:
    return in_memory_app(clock=clock)


def test_app_conf_routes_and_default_queue_send_runs_to_their_queues(runlane: Runlane) -> None:
    app = Celery("shop", runlane=runlane)
    app.conf.task_routes = {"mail.*": {"queue": "mail"}}  # the migration guide's "before"
    app.conf["task_default_queue"] = "work"

    @app.task(name="mail.send")
    def send(to):
        return to

    @app.task(name="orders.ship")
    def ship(order):
        return order

    runs = [runlane.runs.get(send.delay("a@example.com").id), runlane.runs.get(ship.delay(7).id)]
    assert [run.queue for run in runs] == ["mail", "work"]
    assert app.conf.task_routes == {"mail.*": {"queue": "mail"}}
    assert app.conf.get("task_default_queue") == "work" and app.conf.enable_utc is True
    assert app.conf.get("no_such_setting", "fallback") == "fallback"


def test_config_from_object_reads_django_settings_by_namespace(
    runlane: Runlane, clock: ManualClock
) -> None:
    django_settings = types.SimpleNamespace(  # what "django.conf:settings" holds
        DEBUG=True,
        INSTALLED_APPS=["shop"],
        CELERY_TASK_ROUTES={"shop.tasks.charge": {"queue": "payments"}},
        CELERY_TASK_ANNOTATIONS={"*": {"default_retry_delay": 30, "max_retries": 1}},
        CELERY_TASK_DEFAULT_RATE_LIMIT="10/m",
    )
    app = Celery("shop", runlane=runlane)
    app.config_from_object(django_settings, namespace="CELERY")

    @app.task(name="shop.tasks.charge", bind=True)
    def charge(self):
        raise self.retry()

    run = runlane.runs.get(charge.delay().id)
    assert run.queue == "payments"
    assert runlane.tasks.resolve("shop.tasks.charge").rate_limits[0].rate == 10
    runlane.worker().drain()
    assert runlane.runs.get(run.id).due_at == clock.now() + timedelta(seconds=30)


def test_config_from_object_reads_a_celeryconfig_module_by_path(
    runlane: Runlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "shop_celeryconfig.py").write_text(
        "import os\n"
        "from datetime import timedelta\n"
        "task_default_queue = 'shop'\n"
        "task_time_limit = 120\n"
        "task_acks_late = True\n"
        "accept_content = ['json']\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shop_celeryconfig", raising=False)
    app = Celery("shop", runlane=runlane)

    app.config_from_object("shop_celeryconfig")
    app.config_from_object("shop_missing_config", silent=True)

    @app.task(name="shop.report")
    def report():
        return 1

    task = runlane.tasks.resolve("shop.report")
    assert (task.queue, task.timeout) == ("shop", timedelta(seconds=120))
    with pytest.raises(ModuleNotFoundError, match="shop_missing_config"):
        app.config_from_object("shop_missing_config")


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"broker_url": "sqs://"}, UnsupportedOption, "broker_url: runlane-sqs keeps runs in"),
        ({"result_backend": "redis://"}, UnsupportedOption, "stored with each run in DynamoDB"),
        ({"task_always_eager": True}, UnsupportedOption, "docs/testing.md"),
        ({"beat_schedule": {}}, UnsupportedOption, "schedules=\\[Schedule.cron"),
        ({"worker_concurrency": 8}, UnsupportedOption, "runlane-sqs worker --concurrency"),
        ({"task_default_priority": 5}, UnsupportedOption, "SQS has no priorities"),
        ({"task_rotues": {}}, UnsupportedOption, "did you mean 'task_routes'"),
        ({"task_routes": [{"a": {"queue": "b"}}]}, UnsupportedOption, "not a list of routers"),
        ({"task_routes": {"a": {"exchange": "x"}}}, UnsupportedOption, "routing is by queue"),
        ({"task_default_queue": "a b"}, InvalidOptionValue, "task_default_queue: queue name"),
        ({"task_annotations": {"*": {"@__call__": 1}}}, UnsupportedOption, "worker hooks"),
        ({"task_annotations": {"*": {"prioritee": 1}}}, UnsupportedOption, "prioritee="),
        ({"task_annotations": [{"*": {}}]}, UnsupportedOption, "not annotation classes"),
        ({"task_default_rate_limit": "fast"}, UnsupportedOption, "whole number of starts"),
        ({"task_time_limit": -1}, InvalidOptionValue, "task_time_limit: seconds above 0"),
        ({"task_serializer": "pickle"}, InvalidOptionValue, "JSON only"),
        ({"accept_content": ["pickle"]}, InvalidOptionValue, "accept_content"),
        ({"enable_utc": False}, InvalidOptionValue, "naive eta is UTC"),
        ({"timezone": "Europe/Paris"}, InvalidOptionValue, "Schedule.cron\\(..., tz="),
    ],
)
def test_settings_refused_by_name(
    runlane: Runlane, settings: dict[str, object], error: type, message: str
) -> None:
    app = Celery("shop", runlane=runlane)
    with pytest.raises(error, match=message):
        app.conf.update(settings)
    with pytest.raises(error, match=message):
        Celery("shop", runlane=runlane, **settings)
    assert app.conf.task_routes == {} and app.conf.task_default_queue == "default"


def test_reading_or_setting_a_refused_setting_names_it(runlane: Runlane) -> None:
    app = Celery("shop", runlane=runlane)
    with pytest.raises(UnsupportedOption, match="Celery setting broker_url"):
        app.conf.broker_url  # noqa: B018
    with pytest.raises(UnsupportedOption, match="Celery setting result_backend"):
        app.conf.result_backend = "redis://"
    with pytest.raises(UnsupportedOption, match="Celery setting broker:"):
        Celery("shop", runlane=runlane, broker="sqs://")  # Celery's own "before" call


def test_celery_3_setting_names_are_refused_with_the_new_name(runlane: Runlane) -> None:
    config = types.SimpleNamespace(CELERY_ROUTES={"a": {"queue": "b"}})
    with pytest.raises(UnsupportedOption, match="CELERY_ROUTES: Celery 3's uppercase names"):
        Celery("shop", runlane=runlane).config_from_object(config)


def test_a_setting_that_would_change_a_registered_task_is_refused(runlane: Runlane) -> None:
    app = Celery("shop", runlane=runlane)

    @app.task(name="mail.send")
    def send():
        return 1

    app.conf.task_routes = {"orders.*": {"queue": "orders"}}  # changes no registered task
    with pytest.raises(UnsupportedOption, match=r"would change task 'mail\.send', registered"):
        app.conf.task_routes = {"mail.*": {"queue": "mail"}}
    with pytest.raises(UnsupportedOption, match="task_annotations would change task"):
        app.conf.task_annotations = {"mail.send": {"max_retries": 9}}
    assert app.conf.task_routes == {"orders.*": {"queue": "orders"}}
    assert runlane.tasks.resolve("mail.send").queue == "default"


@pytest.fixture
def task_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Celery]:
    """Packages ``shop_orders`` (with a ``tasks`` module that registers ``orders.ship``)
    and ``shop_pages`` (without one), and the app their tasks use."""
    (tmp_path / "shop_orders").mkdir()
    (tmp_path / "shop_orders" / "__init__.py").write_text("")
    (tmp_path / "shop_orders" / "tasks.py").write_text(
        "from shop_celery import app\n\n\n"
        "@app.task(name='orders.ship')\n"
        "def ship(order):\n"
        "    return order\n"
    )
    (tmp_path / "shop_pages").mkdir()
    (tmp_path / "shop_pages" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    app = Celery("shop", runlane=in_memory_app())
    monkeypatch.setitem(sys.modules, "shop_celery", types.SimpleNamespace(app=app))
    yield app
    for name in ("shop_orders", "shop_orders.tasks", "shop_pages"):
        sys.modules.pop(name, None)


def test_autodiscover_tasks_imports_task_modules_when_the_worker_reads_the_app(
    task_packages: Celery,
) -> None:
    app = task_packages
    app.autodiscover_tasks(["shop_orders", "shop_pages"])
    assert "orders.ship" not in app.tasks  # not yet: as in Celery, at the worker's start

    runlane = app.runlane  # what the worker's module does

    assert "orders.ship" in app.tasks and runlane.tasks.get("orders.ship") is not None
    assert app.import_discovered_tasks() == []  # once


def test_autodiscover_tasks_with_force_imports_at_once(task_packages: Celery) -> None:
    task_packages.autodiscover_tasks(lambda: ["shop_orders"], force=True)
    assert "orders.ship" in task_packages.tasks


def test_autodiscover_tasks_refuses_what_names_no_packages(task_packages: Celery) -> None:
    with pytest.raises(InvalidOptionValue, match="packages must be a list of package names"):
        task_packages.autodiscover_tasks("shop_orders")
    with pytest.raises(InvalidOptionValue, match="related_name"):
        task_packages.autodiscover_tasks(["shop_orders"], related_name="tasks.py")
    task_packages.autodiscover_tasks(["shop_missing"])
    with pytest.raises(ModuleNotFoundError, match="shop_missing"):
        task_packages.import_discovered_tasks()
