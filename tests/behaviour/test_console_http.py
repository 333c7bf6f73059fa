"""The web console over HTTP, on every backend (Starlette's test client, the real app):
the access token, CSRF, read-only, escaping of hostile text, filters and pagination,
and the recovery actions with their audit events (docs/console.md)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from runlane_sqs import EventType, RetryPolicy, Runlane, RunStatus, TaskContext
from runlane_sqs.console.security import CSRF_FIELD, Guard
from runlane_sqs.console.server import ConsoleSettings, console_app
from tests.backends import Backend

TOKEN = "test-console-token-0123456789"
FAILS = "console.fails"
WORKS = "console.works"
HOSTILE = '<script>alert("x")</script>\u202e\x1b[31m'


def register(app: Runlane) -> None:
    @app.task(name=FAILS, retry=RetryPolicy(max_attempts=1))
    def fails(ctx: TaskContext, payload: Any) -> Any:
        raise RuntimeError(f"card declined for {payload}")

    @app.task(name=WORKS)
    def works(ctx: TaskContext, payload: Any) -> Any:
        return payload


@pytest.fixture
def app(backend: Backend) -> Runlane:
    return backend.app(register=register)


def client_for(app: Runlane, **settings: Any) -> TestClient:
    server = console_app(app, ConsoleSettings(token=TOKEN, **settings))
    return TestClient(server, base_url="http://console.test")


@pytest.fixture
def client(app: Runlane) -> Iterator[TestClient]:
    with client_for(app) as client:
        client.cookies.set("runlane_console", TOKEN)
        yield client


def drain(app: Runlane) -> None:
    while app.worker().drain():
        pass


def act(client: TestClient, run_id: str, action: str, **form: str) -> Any:
    fields = {CSRF_FIELD: Guard(TOKEN).csrf, "actor": "alice", "reason": "on call", **form}
    return client.post(f"/runs/{run_id}/{action}", data=fields, follow_redirects=False)


def test_without_the_token_every_page_is_refused(app: Runlane) -> None:
    with client_for(app) as client:
        for path in ("/runs", f"/runs/{'0' * 32}", "/runs?token=wrong"):
            response = client.get(path)
            assert response.status_code == 401, path
            assert "Open the URL the console printed" in response.text
        refused = client.post(f"/runs/{'0' * 32}/cancel", data={"reason": "x"})
        assert refused.status_code == 401


def test_the_token_in_the_url_becomes_a_cookie_and_leaves_the_url(app: Runlane) -> None:
    with client_for(app) as client:
        response = client.get(f"/runs?status=failed&token={TOKEN}", follow_redirects=False)
        assert response.status_code == 303
        assert response.headers["location"] == "/runs?status=failed"
        cookie = response.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert client.get("/runs").status_code == 200  # the cookie now carries it
    with client_for(app) as bearer:
        assert bearer.get("/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_pages_send_security_headers(client: TestClient) -> None:
    headers = client.get("/runs").headers
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "no-referrer"


def test_the_runs_page_filters_newest_first_and_pages_with_a_cursor(
    app: Runlane, client: TestClient, backend: Backend
) -> None:
    failed = app.trigger(FAILS, 1)
    drain(app)
    works = []
    for n in range(27):
        backend.clock.advance(1)
        works.append(app.trigger(WORKS, n))

    first = client.get("/runs?status=queued&limit=25")
    shown = re.findall(r'href="/runs/([0-9a-f]{32})"', first.text)
    assert shown == [r.id for r in reversed(works)][:25]
    (next_url,) = re.findall(r'class="next" href="([^"]+)"', first.text)
    rest = client.get(next_url.replace("&amp;", "&"))
    assert re.findall(r'href="/runs/([0-9a-f]{32})"', rest.text) == [works[1].id, works[0].id]
    only_failed = client.get("/runs?status=failed")
    assert re.findall(r'href="/runs/([0-9a-f]{32})"', only_failed.text) == [failed.id]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("status=exploded", "unknown status"),
        (f"task={quote(HOSTILE)}", "is not a valid task name"),
        ("created_after=yesterday", "is not a date and time"),
        ("created_after=2026-12-02T10:00", "needs a UTC offset"),
        ("limit=1000", "page size must be one of"),
        ("cursor=not-a-cursor", "cursor"),
    ],
)
def test_bad_filters_are_a_message_on_the_page(
    client: TestClient, query: str, message: str
) -> None:
    response = client.get(f"/runs?{query}")
    assert response.status_code == 400
    assert message in response.text
    assert "<script>" not in response.text
    assert "Traceback" not in response.text


def test_a_run_page_shows_its_failure_escaped_and_its_history(
    app: Runlane, client: TestClient
) -> None:
    run = app.trigger(FAILS, {"note": HOSTILE})
    drain(app)
    page = client.get(f"/runs/{run.id}")

    assert page.status_code == 200
    assert "<script>" not in page.text
    assert "&lt;script&gt;" in page.text  # the payload and the failure, as text
    assert 'id="traceback"' in page.text and "RuntimeError: card declined" in page.text
    assert 'class="attempt outcome-failed"' in page.text  # the timeline's bar
    assert page.text.count('class="attempt-row"') == 1
    assert 'id="retry-button"' in page.text and 'id="cancel-button"' not in page.text


def test_payloads_can_be_hidden(app: Runlane) -> None:
    run = app.trigger(WORKS, {"card": "4111"})
    drain(app)
    with client_for(app, hide_payloads=True) as client:
        client.cookies.set("runlane_console", TOKEN)
        page = client.get(f"/runs/{run.id}").text
    assert "4111" not in page
    assert "--hide-payloads" in page


def test_retry_with_a_reason_links_the_new_run_and_records_the_actor(
    app: Runlane, client: TestClient
) -> None:
    failed = app.trigger(FAILS, 2)
    drain(app)
    response = act(client, failed.id, "retry", reason="gateway is back")

    assert response.status_code == 303
    new_id = response.headers["location"].split("/")[2].split("?")[0]
    assert new_id != failed.id
    assert app.runs.get(new_id).source_run_id == failed.id
    (linked,) = [e for e in app.runs.events(failed.id) if e.type is EventType.LINKED_RUN]
    assert linked.data["actor"] == "console:alice"
    assert linked.data["reason"] == "gateway is back"
    page = client.get(response.headers["location"]).text
    assert "retry recorded" in page and f'href="/runs/{failed.id}"' in page


def test_cancel_records_who_and_why(app: Runlane, client: TestClient) -> None:
    run = app.trigger(WORKS, 1)
    assert act(client, run.id, "cancel", reason="duplicate order").status_code == 303
    assert app.runs.get(run.id).status is RunStatus.CANCELLED
    (cancelled,) = [e for e in app.runs.events(run.id) if e.type is EventType.CANCELLED]
    assert (cancelled.data["actor"], cancelled.data["reason"]) == (
        "console:alice",
        "duplicate order",
    )


def test_refused_actions_are_messages_and_change_nothing(app: Runlane, client: TestClient) -> None:
    done = app.trigger(WORKS, 1)
    drain(app)
    before = len(app.runs.events(done.id))
    cases = [
        (act(client, done.id, "retry"), 409, "only failed runs are retried"),
        (act(client, done.id, "cancel"), 409, "Not allowed now"),
        (act(client, done.id, "explode"), 404, "There is no action"),
        (act(client, "0" * 32, "cancel"), 404, "not found"),
        (act(client, done.id, "rerun", reason=""), 400, "Give a reason"),
        (act(client, done.id, "rerun", actor="\x1b[31m"), 400, "Give your name"),
        (act(client, done.id, "rerun", csrf="forged"), 403, "stale or came from another site"),
    ]
    for response, status, message in cases:
        assert response.status_code == status, response.text
        assert message in response.text
        assert "Traceback" not in response.text
    foreign = client.post(
        f"/runs/{done.id}/rerun",
        data={CSRF_FIELD: Guard(TOKEN).csrf, "actor": "mallory", "reason": "x"},
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert foreign.status_code == 403
    assert len(app.runs.events(done.id)) == before


def test_read_only_offers_and_accepts_no_action(app: Runlane) -> None:
    failed = app.trigger(FAILS, 3)
    drain(app)
    with client_for(app, read_only=True) as client:
        client.cookies.set("runlane_console", TOKEN)
        page = client.get(f"/runs/{failed.id}").text
        assert "read-only" in page and 'id="retry-button"' not in page
        response = act(client, failed.id, "retry")
    assert response.status_code == 403
    assert "read-only" in response.text
    assert [e.type for e in app.runs.events(failed.id)][-1] is EventType.FAILED
