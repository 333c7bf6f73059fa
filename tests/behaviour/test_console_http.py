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

from runlane_sqs import Batch, Debounce, EventType, RetryPolicy, Runlane, RunStatus, TaskContext
from runlane_sqs.console.security import CSRF_FIELD, Guard
from runlane_sqs.console.server import ConsoleSettings, console_app
from tests.backends import Backend

TOKEN = "test-console-token-0123456789"
FAILS = "console.fails"
WORKS = "console.works"
BATCHED = "console.batched"
DEBOUNCED = "console.debounced"
HOSTILE = '<script>alert("x")</script>\u202e\x1b[31m'


def register(app: Runlane) -> None:
    @app.task(name=FAILS, retry=RetryPolicy(max_attempts=1))
    def fails(ctx: TaskContext, payload: Any) -> Any:
        raise RuntimeError(f"card declined for {payload}")

    @app.task(name=WORKS)
    def works(ctx: TaskContext, payload: Any) -> Any:
        return payload

    @app.task(name=BATCHED, batch=Batch(size=10, max_age=60))
    def batched(ctx: TaskContext, items: Any) -> Any:
        return len(items)

    @app.task(name=DEBOUNCED, debounce=Debounce(quiet=60))
    def debounced(ctx: TaskContext, payload: Any) -> Any:
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
    assert headers["referrer-policy"] == "same-origin"


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


def test_a_run_page_shows_a_batch_and_a_debounce_with_their_keys_escaped(
    app: Runlane, client: TestClient
) -> None:
    batch, *_ = [app.trigger(BATCHED, n, batch_key="<b>acme</b>") for n in range(3)]
    debounced, _ = [app.trigger(DEBOUNCED, n, debounce_key="user-7") for n in range(2)]

    batch_page = client.get(f"/runs/{batch.id}").text
    assert "Batch key" in batch_page and "(3 items)" in batch_page
    assert "<b>" not in batch_page and "&lt;b&gt;" in batch_page
    debounce_page = client.get(f"/runs/{debounced.id}").text
    assert "Debounce key" in debounce_page and "user-7 (1 later trigger collapsed" in debounce_page


def test_payloads_can_be_hidden(app: Runlane) -> None:
    run = app.trigger(WORKS, {"card": "4111"})
    drain(app)
    with client_for(app, hide_payloads=True) as client:
        client.cookies.set("runlane_console", TOKEN)
        page = client.get(f"/runs/{run.id}").text
    assert "4111" not in page
    assert "--hide-payloads" in page


def test_a_large_payload_and_result_are_shown_and_hidden_ones_never_read(
    backend: Backend,
) -> None:
    app = backend.app(register=register, payload_bucket="runlane-console-values")
    payload = {"card": "4111", "rows": ["r" * 100] * 2000}  # 200 KB: kept in the bucket
    run = app.trigger(WORKS, payload)
    drain(app)
    assert app.objects is not None
    key = app.runs.get_stored(run.id).payload.reference.key

    with client_for(app) as client:
        client.cookies.set("runlane_console", TOKEN)
        shown = client.get(f"/runs/{run.id}").text
    assert shown.count("4111") == 2  # the payload and the result, both read from S3

    app.objects.delete(key)  # reading it now would fail: hiding must not read it
    with client_for(app, hide_payloads=True) as client:
        client.cookies.set("runlane_console", TOKEN)
        hidden = client.get(f"/runs/{run.id}")
    assert hidden.status_code == 200
    assert "4111" not in hidden.text and "cannot be shown" not in hidden.text

    with client_for(app) as client:
        client.cookies.set("runlane_console", TOKEN)
        broken = client.get(f"/runs/{run.id}")
    assert broken.status_code == 200  # the run is still shown, with why its payload is not
    assert "cannot be shown" in broken.text and "its object is missing" in broken.text


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


TOKEN_TASK = "console.approval"
SIGNAL_TASK = "console.signalled"


def register_waits(app: Runlane) -> None:
    @app.task(name=TOKEN_TASK)
    def approval(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_token(payload["token"]).value

    @app.task(name=SIGNAL_TASK)
    def signalled(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_signal("order-7").payload


def post(client: TestClient, path: str, **form: str) -> Any:
    return client.post(path, data={CSRF_FIELD: Guard(TOKEN).csrf, **form})


def test_a_token_is_looked_up_and_completed_with_a_json_value(
    app: Runlane, client: TestClient
) -> None:
    register_waits(app)
    token = app.tokens.create(metadata={"order": HOSTILE})
    run = app.trigger(TOKEN_TASK, {"token": token.id})
    drain(app)

    found = post(client, "/tokens", token_id=token.id, operation="look up")
    assert found.status_code == 200
    assert 'id="token-status">pending' in found.text and "<script>" not in found.text
    done = post(client, "/tokens", token_id=token.id, operation="complete", value='{"ok": true}')
    assert done.status_code == 200 and "Token complete: recorded" in done.text
    drain(app)
    assert app.runs.get(run.id).result == {"ok": True}
    again = post(client, "/tokens", token_id=token.id, operation="time out")
    assert again.status_code == 409 and "decided before" in again.text


@pytest.mark.parametrize(
    ("form", "status", "message"),
    [
        ({"token_id": "f" * 32, "operation": "look up"}, 404, "No token with that id"),
        ({"token_id": "<b>x</b>", "operation": "look up"}, 404, "No token with that id"),
        ({"token_id": "", "operation": "look up"}, 404, "No token with that id"),
    ],
)
def test_token_look_ups_that_find_nothing_say_so(
    client: TestClient, form: dict[str, str], status: int, message: str
) -> None:
    response = post(client, "/tokens", **form)
    assert response.status_code == status and message in response.text
    assert "<b>x</b>" not in response.text


def test_a_token_value_that_is_not_json_is_refused_and_the_token_stays_pending(
    app: Runlane, client: TestClient
) -> None:
    token = app.tokens.create()
    response = post(client, "/tokens", token_id=token.id, operation="complete", value="{nope")
    assert response.status_code == 400 and "is not JSON" in response.text
    assert not app.tokens.get(token.id).is_decided


def test_a_signal_is_sent_from_the_page_and_bad_keys_are_refused(
    app: Runlane, client: TestClient
) -> None:
    register_waits(app)
    run = app.trigger(SIGNAL_TASK)
    drain(app)
    sent = post(client, "/signals", key="order-7", payload='{"paid": 1}')
    assert sent.status_code == 200 and "1 waiting run(s) woken" in sent.text
    drain(app)
    assert app.runs.get(run.id).result == {"paid": 1}
    bad = post(client, "/signals", key="bad\x1bkey", payload="")
    assert bad.status_code == 400 and "Traceback" not in bad.text


def test_read_only_looks_tokens_up_but_decides_and_signals_nothing(app: Runlane) -> None:
    token = app.tokens.create()
    with client_for(app, read_only=True) as client:
        client.cookies.set("runlane_console", TOKEN)
        assert post(client, "/tokens", token_id=token.id, operation="look up").status_code == 200
        refused = post(client, "/tokens", token_id=token.id, operation="complete", value="1")
        signal = post(client, "/signals", key="order-7")
    assert refused.status_code == 403 and signal.status_code == 403
    assert not app.tokens.get(token.id).is_decided


def test_a_parent_s_page_shows_its_group_s_progress_and_links_its_children(
    app: Runlane, client: TestClient
) -> None:
    @app.task(name="console.fans")
    def fans(ctx: TaskContext, payload: Any) -> Any:
        results = ctx.map(WORKS, [{"n": n} for n in range(60)], max_in_flight=60)
        return results.succeeded

    parent = app.trigger("console.fans")
    assert app.worker().drain(max_runs=1) == 1
    waiting = client.get(f"/runs/{parent.id}")
    assert "0 of 60 finished" in waiting.text and "60 running (at most 60)" in waiting.text
    drain(app)
    page = client.get(f"/runs/{parent.id}")
    assert page.status_code == 200
    assert "60 of 60 finished: 60 succeeded, 0 failed, 0 cancelled" in page.text
    assert page.text.count('class="child-row"') == 50
    [child_link] = re.findall(r'<a href="/runs/([0-9a-f]{32})">', page.text)[:1]
    nxt = re.search(r'id="next-children" href="[^"]*"|href="([^"]*)" id="next-children"', page.text)
    assert nxt is not None
    rest = client.get(nxt.group(1).replace("&amp;", "&"))
    assert rest.text.count('class="child-row"') == 10
    child = client.get(f"/runs/{child_link}")
    assert f'id="parent-run">{parent.id}</a>' in child.text
    bad = client.get(f"/runs/{parent.id}?children=%1B%5B31mnope")
    assert bad.status_code == 400 and "\x1b" not in bad.text and "not valid" in bad.text


def test_retry_failed_from_a_failed_parent_s_page_reruns_its_group_s_failed_children(
    app: Runlane, client: TestClient
) -> None:
    broken = {"on": True}

    @app.task(name="console.item", retry=RetryPolicy(max_attempts=1))
    def item(ctx: TaskContext, payload: Any) -> Any:
        if broken["on"] and payload == 2:
            raise RuntimeError("item 2 broke")
        return payload

    @app.task(name="console.parent", retry=RetryPolicy(max_attempts=1))
    def parent_task(ctx: TaskContext, payload: Any) -> Any:
        return sum(ctx.map("console.item", [1, 2, 3]).results())

    parent = app.trigger("console.parent")
    drain(app)
    assert app.runs.get(parent.id).status is RunStatus.FAILED
    page = client.get(f"/runs/{parent.id}").text
    assert 'id="retry-failed-button"' in page and 'id="retry-button"' in page
    plain = app.trigger(FAILS, 1)
    drain(app)
    assert 'id="retry-failed-button"' not in client.get(f"/runs/{plain.id}").text

    broken["on"] = False
    response = act(client, parent.id, "retry-failed", reason="item 2 fixed")
    assert response.status_code == 303
    assert response.headers["location"] == f"/runs/{parent.id}?done=retry-failed"
    assert "retry-failed recorded" in client.get(response.headers["location"]).text
    drain(app)
    [group] = app.runs.groups(parent.id)
    assert (group.generation, group.status.value, group.succeeded) == (1, "succeeded", 3)
    again = act(client, parent.id, "retry-failed", reason="twice")
    assert again.status_code == 409  # the group has nothing left to rerun
