"""The console's bulk pages over HTTP, on every backend (docs/console.md, "Bulk
operations"): the form counts the runs a filter selects and shows the count on the button
that acts on them; a confirmed operation is carried out on a thread of the console and its
page shows its progress and, while it runs, a stop; bad filters and hostile text come back
as escaped errors, a read-only console offers and accepts no action."""

from __future__ import annotations

import html
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from runlane_sqs import (
    BulkFilter,
    EventType,
    ManualClock,
    OperationStatus,
    RetryPolicy,
    Runlane,
    TaskContext,
)
from runlane_sqs.console.security import CSRF_FIELD, Guard
from tests.backends import Backend
from tests.behaviour.console_support import TOKEN, client_for
from tests.behaviour.worker_support import drain

FAILS = "console.fails"
HOSTILE = '<script>alert("x")</script>\u202e'


def register(app: Runlane) -> None:
    @app.task(name=FAILS, retry=RetryPolicy(max_attempts=1))
    def fails(ctx: TaskContext, payload: Any) -> Any:
        raise RuntimeError(f"card declined for {payload}")


@pytest.fixture
def app(backend: Backend) -> Runlane:
    return backend.app(register=register)


@pytest.fixture
def client(app: Runlane) -> Iterator[TestClient]:
    with client_for(app) as client:
        yield client


def failed(app: Runlane, clock: ManualClock, n: int) -> list[str]:
    ids = []
    for i in range(n):
        clock.advance(1)
        ids.append(app.trigger(FAILS, i).id)
    assert drain(app) == n
    return ids


def hidden_fields(page: str) -> list[tuple[str, str]]:
    form = page[page.index('<form method="post" action="/bulk"') :]
    form = form[: form.index("</form>")]
    return [
        (html.unescape(name), html.unescape(value))
        for name, value in re.findall(r'<input type="hidden" name="([^"]*)" value="([^"]*)">', form)
    ]


def carried_out(operation_id: str) -> None:
    """Wait for the console's thread carrying out the operation (the clock is moved by
    hand, so its pacing takes no time)."""
    for thread in threading.enumerate():
        if thread.name == f"bulk-{operation_id}":
            thread.join(timeout=60)
            assert not thread.is_alive()


def test_the_count_is_shown_before_the_button_that_retries_the_runs(
    app: Runlane, client: TestClient, clock: ManualClock
) -> None:
    sources = failed(app, clock, 3)
    assert 'href="/bulk"' in client.get("/runs").text  # in the navigation
    counted = client.get("/bulk/count", params={"action": "retry", "task": FAILS, "rate": "50"})
    assert counted.status_code == 200
    assert "<strong>3</strong> run(s) selected for retry" in counted.text
    assert '<button type="submit" id="bulk-start">Retry 3 run(s)</button>' in counted.text
    fields = dict(hidden_fields(counted.text))
    assert (fields["action"], fields["task"], fields["rate"], fields["status"]) == (
        "retry",
        FAILS,
        "50",
        "failed",
    )
    form: dict[str, list[str]] = {"actor": ["alice"], "reason": ["card fixed"]}
    for name, value in hidden_fields(counted.text):
        form.setdefault(name, []).append(value)

    started = client.post("/bulk", data=form, follow_redirects=False)

    assert started.status_code == 303
    operation_id = started.headers["location"].removeprefix("/bulk/")
    carried_out(operation_id)
    done = app.bulk.get(operation_id)
    assert (done.status, done.tally.acted, done.actor) == (OperationStatus.DONE, 3, "console:alice")
    for source in sources:
        (link,) = [e for e in app.runs.events(source) if e.type is EventType.LINKED_RUN]
        assert (link.data["operation"], link.data["reason"]) == (operation_id, "card fixed")
    page = client.get(f"/bulk/{operation_id}").text
    assert '<span class="status" id="operation-status">done</span>' in page
    assert "3 of 3 examined" in page and 'id="bulk-stop"' not in page
    listing = client.get("/bulk").text
    assert f'href="/bulk/{operation_id}"' in listing
    refused = client.post(
        f"/bulk/{operation_id}/stop", data={CSRF_FIELD: Guard(TOKEN).csrf}, follow_redirects=False
    )
    assert refused.status_code == 409 and "is done" in refused.text


def test_a_running_operation_shows_a_stop_that_stops_it(
    app: Runlane, client: TestClient, clock: ManualClock
) -> None:
    failed(app, clock, 2)
    operation = app.bulk.start("retry", BulkFilter())
    page = client.get(f"/bulk/{operation.id}").text
    assert 'id="bulk-stop"' in page and f"runs bulk resume {operation.id}" in page
    stopped = client.post(
        f"/bulk/{operation.id}/stop", data={CSRF_FIELD: Guard(TOKEN).csrf}, follow_redirects=False
    )
    assert stopped.status_code == 303
    assert app.bulk.get(operation.id).status is OperationStatus.STOPPED
    assert "Stop requested" in client.get(stopped.headers["location"]).text


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"action": "explode"}, "choose an action"),
        ({"action": "retry", "status": "queued"}, "retry acts on runs that are failed"),
        ({"action": "cancel", "task": HOSTILE}, "is not a valid task name"),
        ({"action": "cancel", "failure_type": HOSTILE}, "a format character"),
        ({"action": "cancel", "rate": "fast"}, "is not a number"),
        ({"action": "cancel", "rate": "0"}, "rate must be above 0"),
        ({"action": "retry", "created_after": "yesterday"}, "is not a date and time"),
    ],
)
def test_a_bad_bulk_form_is_refused_escaped_with_nothing_started(
    app: Runlane, client: TestClient, params: dict[str, str], error: str
) -> None:
    response = client.get("/bulk/count", params=params)
    assert response.status_code == 400
    assert error in html.unescape(response.text)
    assert "<script>" not in response.text and 'id="bulk-start"' not in response.text
    form = {CSRF_FIELD: Guard(TOKEN).csrf, "actor": "a", "reason": "r", **params}
    assert client.post("/bulk", data=form, follow_redirects=False).status_code == 400
    assert app.bulk.list().operations == []


def test_bad_operation_ids_and_a_read_only_console(app: Runlane, clock: ManualClock) -> None:
    failed(app, clock, 1)
    with client_for(app) as client:
        assert client.get("/bulk/%3Cb%3Ex").status_code == 400
        assert client.get("/bulk/20261205T120000-1a2b3c4d").status_code == 404
        stale = client.post("/bulk", data={"action": "retry"}, follow_redirects=False)
        assert stale.status_code == 403  # no CSRF token
    with client_for(app, read_only=True) as client:
        counted = client.get("/bulk/count", params={"action": "retry"})
        assert "<strong>1</strong> run(s) selected" in counted.text
        assert 'id="bulk-start"' not in counted.text
        form = {CSRF_FIELD: Guard(TOKEN).csrf, "action": "retry", "actor": "a", "reason": "r"}
        assert client.post("/bulk", data=form, follow_redirects=False).status_code == 403
    assert app.bulk.list().operations == []
