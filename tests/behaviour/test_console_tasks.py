"""The console's task pages over HTTP, on every backend (docs/console.md, "Tasks"): the
tasks with their queues and types, a task's JSON Schemas and the links to its runs, and
the form that triggers a run with a JSON payload validated as ``app.trigger`` validates
it; a refused payload names each wrong field and writes nothing; CSRF, read-only, unknown
tasks and hostile text."""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Literal
from urllib.parse import quote

import pytest
from pydantic import BaseModel, Field, create_model
from starlette.testclient import TestClient

from runlane_sqs import Batch, Runlane, RunStatus, TaskContext
from runlane_sqs.console.security import CSRF_FIELD, Guard
from tests.backends import Backend
from tests.behaviour.console_support import TOKEN, client_for
from tests.behaviour.worker_support import drain

SHIP = "console.ship"
PLAIN = "console.plain"
ODD = "console.odd"
GATHER = "console.gather"
HOSTILE = '<script>alert("x")</script>\u202e\x1b[31m'
ESCAPED = "&lt;script&gt;"


class Order(BaseModel):
    id: int
    customer: str = Field(description="who ordered")
    placed_at: datetime
    lines: dict[str, int] = Field(default_factory=dict)


class Receipt(BaseModel):
    order_id: int
    total: float


Hostile = create_model(HOSTILE, note=(Literal["<b>bold</b>"], Field(description=HOSTILE)))
"""A model whose name, title, description and allowed value are markup."""


def register(app: Runlane) -> None:
    @app.task(name=SHIP, queue="shipping")
    def ship(ctx: TaskContext, order: Order) -> Receipt:
        return Receipt(order_id=order.id, total=42.0)

    @app.task(name=PLAIN)
    def plain(ctx: TaskContext, payload: Any) -> Any:
        return payload

    app.task(lambda ctx, payload: None, name=ODD, payload_type=Hostile)

    @app.task(name=GATHER, batch=Batch(size=10, max_age=60))
    def gather(ctx: TaskContext, items: list[Receipt]) -> int:
        return len(items)


@pytest.fixture
def app(backend: Backend) -> Runlane:
    return backend.app(register=register)


@pytest.fixture
def client(app: Runlane) -> Iterator[TestClient]:
    with client_for(app) as client:
        yield client


def trigger(client: TestClient, task: str, payload: str, **form: str) -> Any:
    fields = {CSRF_FIELD: Guard(TOKEN).csrf, "payload": payload, **form}
    return client.post(f"/tasks/{task}", data=fields, follow_redirects=False)


def nothing_written(app: Runlane, client: TestClient) -> None:
    assert list(app.runs.list()) == []
    assert "No runs match." in client.get("/runs").text


ORDER = '{"id": 7, "customer": "acme", "placed_at": "2026-12-07T10:00:00+00:00"}'


def test_the_tasks_page_lists_each_task_with_its_queue_and_types(client: TestClient) -> None:
    assert 'href="/tasks"' in client.get("/runs").text  # in the navigation
    page = client.get("/tasks")

    assert page.status_code == 200
    rows = re.findall(r'<tr class="task-row" id="task-([^"]+)">(.*?)</tr>', page.text, re.S)
    assert [name for name, _ in rows] == [GATHER, ODD, PLAIN, SHIP]
    ship = dict(rows)[SHIP]
    assert f'href="/tasks/{SHIP}"' in ship and ">shipping<" in ship
    assert '"payload-type">Order<' in ship and '"result-type">Receipt<' in ship
    assert f'href="/runs?task={SHIP}"' in ship
    assert '"payload-type">JSON<' in dict(rows)[PLAIN]
    assert '"payload-type">Receipt<' in dict(rows)[GATHER]  # one item of the batch


def test_a_task_page_shows_its_types_their_schemas_and_links_to_its_runs(
    client: TestClient,
) -> None:
    page = client.get(f"/tasks/{SHIP}")

    assert page.status_code == 200
    assert 'id="task-queue">shipping<' in page.text
    payload = html.unescape(re.findall(r'id="payload-schema">(.*?)</pre>', page.text, re.S)[0])
    assert '  "properties": {\n    "id": {' in payload  # indented, in the model's order
    assert '"description": "who ordered"' in payload and '"format": "date-time"' in payload
    assert '"required": [\n    "id",\n    "customer",\n    "placed_at"\n  ]' in payload
    result = html.unescape(re.findall(r'id="result-schema">(.*?)</pre>', page.text, re.S)[0])
    assert '"title": "Receipt"' in result
    assert f'href="/runs?task={SHIP}"' in page.text
    assert f'href="/runs?task={SHIP}&amp;status=failed"' in page.text
    plain = client.get(f"/tasks/{PLAIN}").text
    assert 'id="payload-schema">any JSON value<' in plain


def test_a_type_without_a_json_schema_says_so_and_still_triggers(
    app: Runlane, client: TestClient
) -> None:
    app.task(lambda ctx, payload: None, name="console.callable", payload_type=Callable[[], None])
    page = client.get("/tasks/console.callable")

    assert page.status_code == 200
    assert 'id="payload-schema">(no JSON Schema: ' in page.text
    assert "Traceback" not in page.text and 'id="trigger-button"' in page.text


def test_hostile_text_in_a_type_or_a_task_name_stays_text(client: TestClient) -> None:
    page = client.get(f"/tasks/{ODD}")
    listed = client.get("/tasks")
    unknown = client.get("/tasks/" + quote(HOSTILE.replace("/", "")))

    assert page.status_code == 200 and unknown.status_code == 404
    for text in (page.text, listed.text, unknown.text):
        assert "<script>" not in text and "<b>" not in text
        assert "\x1b" not in text and "\u202e" not in text
    assert page.text.count(ESCAPED) >= 3  # the type's name, its schema's title and description
    assert "&lt;b&gt;bold&lt;/b&gt;" in page.text
    assert ESCAPED in listed.text and "This app registers no task" in unknown.text


def test_a_valid_payload_triggers_a_run_and_opens_its_page(
    app: Runlane, client: TestClient
) -> None:
    response = trigger(client, SHIP, ORDER)

    assert response.status_code == 303
    location = response.headers["location"]
    run_id = re.fullmatch(r"/runs/([0-9a-f]{32})\?done=triggered", location)
    assert run_id is not None
    run = app.runs.get(run_id.group(1))
    assert (run.task, run.queue, run.status) == (SHIP, "shipping", RunStatus.QUEUED)
    assert run.payload == {
        "id": 7,
        "customer": "acme",
        "placed_at": "2026-12-07T10:00:00Z",
        "lines": {},
    }
    assert "Run triggered." in client.get(location).text
    drain(app)
    assert app.runs.get(run.id).result == {"order_id": 7, "total": 42.0}


def test_an_idempotency_key_opens_the_run_that_holds_it(app: Runlane, client: TestClient) -> None:
    first = trigger(client, PLAIN, '{"n": 1}', idempotency_key="order-7")
    again = trigger(client, PLAIN, '{"n": 2}', idempotency_key="order-7")

    run_id = first.headers["location"].split("?")[0]
    assert again.headers["location"] == f"{run_id}?done=joined"
    assert len(list(app.runs.list())) == 1
    (run,) = app.runs.list()
    assert (run.payload, run.idempotency_key) == ({"n": 1}, "order-7")
    assert "no new run was created" in client.get(again.headers["location"]).text


def test_an_empty_payload_is_null_for_a_plain_task(app: Runlane, client: TestClient) -> None:
    response = trigger(client, PLAIN, "  ")
    assert response.status_code == 303
    (run,) = app.runs.list()
    assert run.payload is None


def test_a_payload_the_type_refuses_names_each_field_and_writes_nothing(
    app: Runlane, client: TestClient
) -> None:
    response = trigger(client, SHIP, '{"id": "seven", "note": "<script>x</script>"}')

    assert response.status_code == 400
    fields = re.findall(
        r'<li class="field-error"><code>([^<]*)</code>: ([^<]*)</li>', response.text
    )
    assert [path for path, _ in fields] == ["id", "customer", "placed_at"]
    assert "valid integer" in fields[0][1] and fields[1][1] == "Field required"
    assert "<script>x" not in response.text  # the payload typed, kept in the form as text
    assert "&lt;script&gt;x&lt;/script&gt;" in response.text
    nothing_written(app, client)


def test_hostile_text_in_a_refused_payload_stays_text(app: Runlane, client: TestClient) -> None:
    order = ORDER[:-1] + ', "lines": {"<script>x</script>\u202e\\u001b": "many"}}'
    response = trigger(client, SHIP, order)

    assert response.status_code == 400
    (path,) = re.findall(r'<li class="field-error"><code>([^<]*)</code>', response.text)
    assert path == "lines.&lt;script&gt;x&lt;/script&gt;\ufffd\ufffd"
    assert "<script>" not in response.text and "\x1b" not in response.text
    assert "\u202e" not in response.text
    nothing_written(app, client)


@pytest.mark.parametrize(
    ("task", "payload", "form", "message"),
    [
        (SHIP, "{nope", {}, "The payload is not JSON"),
        (SHIP, "", {}, "(the payload)"),  # null is not an Order
        (SHIP, "x" * 64_001, {}, "longer than 64,000 characters"),
        (PLAIN, "1", {"idempotency_key": "bad\x1b[31mkey"}, "idempotency key"),
        (GATHER, '{"order_id": 1}', {}, "total"),  # one item of the batch, validated
    ],
)
def test_a_refused_trigger_is_a_message_on_the_task_page_and_writes_nothing(
    app: Runlane, client: TestClient, task: str, payload: str, form: dict[str, str], message: str
) -> None:
    response = trigger(client, task, payload, **form)

    assert response.status_code == 400
    assert 'id="trigger-errors"' in response.text and message in response.text
    assert "\x1b" not in response.text and "Traceback" not in response.text
    nothing_written(app, client)


def test_a_trigger_without_the_csrf_token_or_from_another_site_is_refused(
    app: Runlane, client: TestClient
) -> None:
    csrf = Guard(TOKEN).csrf
    missing = client.post(f"/tasks/{PLAIN}", data={"payload": "1"})
    forged = client.post(f"/tasks/{PLAIN}", data={CSRF_FIELD: "forged", "payload": "1"})
    foreign = client.post(
        f"/tasks/{PLAIN}",
        data={CSRF_FIELD: csrf, "payload": "1"},
        headers={"Origin": "https://evil.example"},
    )
    for response in (missing, forged, foreign):
        assert response.status_code == 403
        assert "stale or came from another site" in response.text
    with client_for(app) as stranger:
        stranger.cookies.clear()  # no access token at all
        assert stranger.post(f"/tasks/{PLAIN}", data={CSRF_FIELD: csrf}).status_code == 401
        assert stranger.get("/tasks").status_code == 401
    nothing_written(app, client)


def test_read_only_shows_the_task_but_offers_and_accepts_no_trigger(app: Runlane) -> None:
    with client_for(app, read_only=True) as client:
        page = client.get(f"/tasks/{SHIP}")
        response = trigger(client, SHIP, ORDER)
        assert page.status_code == 200 and 'id="payload-schema"' in page.text
        assert 'id="trigger-button"' not in page.text and "<textarea" not in page.text
        assert response.status_code == 403 and "read-only" in response.text
        nothing_written(app, client)


def test_an_unknown_task_is_a_404_for_its_page_and_its_trigger(
    app: Runlane, client: TestClient
) -> None:
    page = client.get("/tasks/console.nope")
    posted = trigger(client, "console.nope", "1")

    for response in (page, posted):
        assert response.status_code == 404
        assert "This app registers no task &#39;console.nope&#39;" in response.text
    nothing_written(app, client)


def test_a_console_over_an_app_without_task_code_lists_none(backend: Backend) -> None:
    page = client_for(backend.app()).get("/tasks")
    assert page.status_code == 200 and "The app registers no task" in page.text
