"""The console's overview pages over HTTP, on every backend: the runs page's counts and
its chart of outcomes per minute, the health page (the last maintenance pass, overdue
runs, queues, concurrency limits) and the schedules page with pause and resume; hostile
text on any of them comes back escaped (docs/console.md)."""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from runlane_sqs import (
    ManualClock,
    RateLimit,
    RetryPolicy,
    Runlane,
    RunlaneError,
    Schedule,
    ScheduleStatus,
    TaskContext,
)
from runlane_sqs.api import health as health_api
from runlane_sqs.console.security import CSRF_FIELD, Guard
from runlane_sqs.console.server import ConsoleSettings, console_app
from runlane_sqs.core.model import Run
from tests.backends import Backend
from tests.behaviour.console_support import TOKEN, client_for
from tests.behaviour.operator_support import make_running
from tests.behaviour.worker_support import drain, second_app

OK = "console.ok"
FAILS = "console.fails"
DIGEST = "console.digest"
BILLED = "console.billed"
RATED = "console.rated"
HOURLY = Schedule.every("ops.hourly", timedelta(hours=1))
DAILY = Schedule.cron("ops.daily", "30 2 * * *")
HOSTILE = '<script>alert("x")</script>\u202e\x1b[31m'
HOSTILE_ID = '<img src=x onerror="alert(1)">\u202e\x1b[31m'
"""Hostile text that fits in one URL path segment (no slash)."""


def register(app: Runlane) -> None:
    @app.task(name=OK)
    def ok(ctx: TaskContext, payload: Any) -> Any:
        return payload

    @app.task(name=FAILS, retry=RetryPolicy(max_attempts=1))
    def fails(ctx: TaskContext, payload: Any) -> Any:
        raise RuntimeError(f"card declined for {payload}")

    @app.task(name=BILLED, queue=app.queue("billing", concurrency_limit=2))
    def billed(ctx: TaskContext, payload: Any) -> Any:
        return payload

    @app.task(
        name=RATED,
        concurrency_key=lambda p: p["tenant"],
        rate_limits=[RateLimit(5, per=1, burst=2), RateLimit(1, per=60, per_key=True)],
    )
    def rated(ctx: TaskContext, payload: Any) -> Any:
        return payload


def register_schedules(app: Runlane) -> None:
    register(app)
    app.task(_digest, name=DIGEST, schedules=[HOURLY, DAILY])


def register_daily_only(app: Runlane) -> None:
    register(app)
    app.task(_digest, name=DIGEST, schedules=[DAILY])


def _digest(ctx: TaskContext, payload: Any) -> Any:
    return ctx.schedule_id


@pytest.fixture
def app(backend: Backend) -> Runlane:
    return backend.app(register=register_schedules)


@pytest.fixture
def client(app: Runlane) -> Iterator[TestClient]:
    with client_for(app) as client:
        yield client


def trigger(app: Runlane, clock: ManualClock, task: str, payload: Any = None, **kw: Any) -> Run:
    """Trigger one second after the previous trigger, so creation times are distinct."""
    clock.advance(1)
    return app.trigger(task, payload, **kw)


def cancelled(app: Runlane, clock: ManualClock) -> Run:
    run = trigger(app, clock, OK)
    app.runs.cancel(run.id, reason="duplicate", actor="test")
    return run


def listed(page: str) -> set[str]:
    """The run ids a runs page lists."""
    return set(re.findall(r'href="/runs/([0-9a-f]{32})"', page))


# --- reading pages -----------------------------------------------------------------


@dataclass
class Row:
    attrs: dict[str, str]
    cells: list[str] = field(default_factory=list)


class _Tables(HTMLParser):
    """The body rows of each table, by the table's class: each cell as its text."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[Row]] = {}
        self._table: list[Row] | None = None
        self._in_body = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "table":
            self._table = self.tables.setdefault(found.get("class", ""), [])
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body and self._table is not None:
            self._table.append(Row(found))
        elif tag == "td" and self._in_body:
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._table:
            self._table[-1].cells.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tbody":
            self._in_body = False
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def rows(page: str, table: str) -> list[Row]:
    parser = _Tables()
    parser.feed(page)
    return parser.tables[table]


def row(page: str, table: str, row_id: str) -> Row:
    (found,) = [r for r in rows(page, table) if r.attrs.get("id") == row_id]
    return found


TILE = re.compile(
    r'<li class="tile group-[\w-]+"><a href="([^"]+)"><span class="count">([^<]+)</span> '
    r'<span class="label">(\w+)</span>'
)
RECT = re.compile(
    r'<rect class="([\w-]+)" x="(\d+)" y="([\d.]+)" width="10" height="([\d.]+)">'
    r"<title>([^<]*)</title></rect>"
)


def tiles(page: str) -> dict[str, tuple[str, str]]:
    """Each tile's label: its count as shown and the runs list it links to."""
    return {label: (count, html.unescape(href)) for href, count, label in TILE.findall(page)}


def rects(page: str) -> list[tuple[str, int, float, float, str]]:
    """The chart's rectangles: class, x, y, height and title."""
    return [(c, int(x), float(y), float(h), t) for c, x, y, h, t in RECT.findall(page)]


# --- the runs page's counts and chart ----------------------------------------------


def test_the_runs_page_counts_runs_by_status_and_each_count_links_to_its_runs(
    app: Runlane, client: TestClient, clock: ManualClock
) -> None:
    old_done = trigger(app, clock, OK, "old")
    old_waiting = trigger(app, clock, OK, "old, due later", delay=6 * 3600)
    assert drain(app) == 1
    clock.advance(2 * 3600)  # the old ones leave the hour; the waiting one is unfinished
    failed = [trigger(app, clock, FAILS, n) for n in range(3)]
    done = trigger(app, clock, OK, "recent")
    assert drain(app) == 4
    queued = trigger(app, clock, OK, "queued")
    dropped = cancelled(app, clock)

    page = client.get("/runs")

    assert page.status_code == 200
    shown = tiles(page.text)
    assert {label: count for label, (count, _) in shown.items()} == {
        "unfinished": "2",
        "parked": "0",
        "succeeded": "1",
        "failed": "3",
        "cancelled": "1",
    }
    expected = {
        "unfinished": {old_waiting.id, queued.id},  # of any age
        "parked": set(),
        "succeeded": {done.id},  # the old success is outside the hour
        "failed": {r.id for r in failed},
        "cancelled": {dropped.id},
    }
    for label, (_, href) in shown.items():
        response = client.get(href)
        assert response.status_code == 200, href
        assert listed(response.text) == expected[label], label
    assert old_done.id in listed(client.get("/runs?status=succeeded").text)


def test_the_chart_stacks_each_minutes_outcomes_scaled_to_the_busiest(
    app: Runlane, client: TestClient, clock: ManualClock
) -> None:
    for n in range(3):
        trigger(app, clock, FAILS, n)  # 00:00:01 to 00:00:03
    clock.advance(60)
    trigger(app, clock, OK)  # 00:01:04
    assert drain(app) == 4
    cancelled(app, clock)

    page = client.get("/runs").text

    assert '<svg class="outcomes"' in page
    assert "over the last hour: 5 runs ended" in page and "busiest minute 3 run(s)" in page
    drawn = rects(page)
    assert [(c, y, h, t) for c, _, y, h, t in drawn] == [
        ("outcome-failed", 0.0, 120.0, "00:00: 3 failed"),  # the busiest: full height
        ("outcome-succeeded", 80.0, 40.0, "00:01: 1 succeeded"),  # at the bottom
        ("outcome-cancelled", 40.0, 40.0, "00:01: 1 cancelled"),  # stacked on it
    ]
    failed_x, succeeded_x, cancelled_x = (x for _, x, *_ in drawn)
    assert failed_x < succeeded_x == cancelled_x  # the newest minute on the right
    assert "unread" not in page and "+" not in "".join(c for c, _ in tiles(page).values())


def test_a_bounded_read_shades_the_minutes_it_did_not_wholly_count(
    app: Runlane, client: TestClient, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health_api, "TALLIED_PER_PARTITION", 1)
    for _ in range(17):  # more than one in some of the 16 partitions of "cancelled"
        cancelled(app, clock)

    page = client.get("/runs").text

    count, _ = tiles(page)["cancelled"]
    assert count.endswith("+") and int(count[:-1]) < 17
    assert "the shaded minutes are not counted" in page
    unread = [x for c, x, *_ in rects(page) if c == "unread"]
    assert unread and unread == sorted(unread) and unread[0] == 0  # the oldest minutes
    assert all(t == "not wholly read" for c, *_, t in rects(page) if c == "unread")


def test_the_runs_list_is_shown_when_the_counts_cannot_be_read(
    app: Runlane, client: TestClient, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trigger(app, clock, OK)

    def throttled(*args: Any, **kwargs: Any) -> Any:
        raise RunlaneError("the status index is throttled")

    monkeypatch.setattr(app.health, "activity", throttled)
    page = client.get("/runs")

    assert page.status_code == 200
    assert listed(page.text) == {run.id}
    assert 'class="tiles"' not in page.text and "<svg" not in page.text
    assert "The counts by status could not be read: the status index is throttled" in page.text


# --- the health page ---------------------------------------------------------------


def test_health_shows_the_last_pass_what_it_did_and_when_it_is_stale(
    app: Runlane, client: TestClient, clock: ManualClock
) -> None:
    before = client.get("/health")
    assert before.status_code == 200
    assert "No maintenance pass has finished" in before.text and "Last pass" not in before.text
    make_running(app, trigger(app, clock, OK, "held by a worker that died"))
    clock.advance(2 * 3600)  # its lease has long expired
    assert '<strong id="overdue">1</strong>' in client.get("/health").text

    report = app.maintenance.run_pass()
    page = client.get("/health").text

    assert f"<code>{report.pass_id}</code>" in page
    assert f"finished <time>{clock.now().isoformat(timespec='seconds')}</time>" in page
    assert "recovered <strong>1</strong>" in page
    jobs = {r.cells[0]: r.cells[1:] for r in rows(page, "jobs")}
    assert jobs["expired leases"][:2] == ["1", "1"]  # examined, acted
    assert jobs["due wakeups"][1] == "0"
    assert '<strong id="overdue">0</strong>' in page
    assert 'class="stale"' not in page

    clock.advance(180)  # three maintenance periods of a minute: not yet stale
    assert 'class="stale"' not in client.get("/health").text
    clock.advance(1)
    stale = client.get("/health").text
    assert "stale: no pass in the last 180 s (maintenance runs every 60 s)" in stale
    again = app.maintenance.run_pass()
    fresh = client.get("/health").text
    assert f"<code>{again.pass_id}</code>" in fresh and 'class="stale"' not in fresh


def test_health_shows_each_queues_messages_and_the_concurrency_limits(
    app: Runlane, client: TestClient, clock: ManualClock, backend: Backend
) -> None:
    trigger(app, clock, OK, 1)
    trigger(app, clock, OK, 2)
    trigger(app, clock, OK, 3, delay=60)

    page = client.get("/health").text

    dead_letters = "0" if backend.real else "—"  # memory has no dead-letter queue
    assert row(page, "queues", "queue-default").cells == ["default", "2", "1", "0", dead_letters]
    assert row(page, "queues", "queue-billing").cells == ["billing", "0", "0", "0", dead_letters]
    limits = {r.cells[0]: r.cells[1:] for r in rows(page, "occupancy")}
    assert limits == {"queue billing": ["2", "0", "0"], "queue default": ["none", "0", "0"]}


def test_health_shows_each_rate_limit_and_every_key_with_reservations(
    app: Runlane, client: TestClient, clock: ManualClock
) -> None:
    idle = {r.cells[0]: r.cells[1:] for r in rows(client.get("/health").text, "rates")}
    assert idle == {"rate#task#console.rated#1000000": ["5/1s +2", "now", "3", "0"]}

    for n in range(2):  # two runs of one tenant: the second sleeps a minute
        app.trigger(RATED, {"tenant": "acme", "n": n})
    drain(app)
    busy = {r.cells[0]: r.cells[1:] for r in rows(client.get("/health").text, "rates")}
    keyed = busy["rate#key#console.rated#60000000#acme"]
    # none available; reserved: the run waiting and the one whose spacing still runs
    assert keyed[0] == "1/60s" and keyed[2:] == ["0", "2"]
    spacing = timedelta(microseconds=RateLimit(1, per=60).rate_in("x").interval_us)
    assert keyed[1] == (clock.now() + 2 * spacing).isoformat(timespec="milliseconds")


def test_health_says_what_could_not_be_read_escaped(
    app: Runlane, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(queue: str) -> Any:
        raise RunlaneError(f"queue {queue}: {HOSTILE}")

    monkeypatch.setattr(app.transport, "backlog", refused)
    page = client.get("/health")

    assert page.status_code == 200
    (problem,) = row(page.text, "queues", "queue-default").cells[1:]
    assert problem.startswith("queue default: <script>")  # as text
    assert "<script>" not in page.text and "&lt;script&gt;" in page.text

    def unreadable() -> Any:
        raise RunlaneError("the table is throttled")

    monkeypatch.setattr(app.health, "check", unreadable)
    degraded = client.get("/health")
    assert degraded.status_code == 200
    assert "Health could not be read: the table is throttled" in degraded.text
    assert 'class="occupancy"' in degraded.text  # the limits are still shown


# --- the schedules page ------------------------------------------------------------


def change(client: TestClient, schedule_id: str, action: str, **form: str) -> Any:
    fields = {CSRF_FIELD: Guard(TOKEN).csrf, "actor": "alice", "reason": "on call", **form}
    return client.post(f"/schedules/{schedule_id}/{action}", data=fields, follow_redirects=False)


def schedule_forms(page: str) -> list[str]:
    return re.findall(r'<form class="inline" method="post" action="(/schedules/[^"]+)"', page)


def test_the_schedules_page_lists_stored_schedules_with_their_next_occurrences(
    app: Runlane, client: TestClient
) -> None:
    empty = client.get("/schedules")
    assert empty.status_code == 200 and "No schedule is stored" in empty.text

    app.maintenance.run_pass()  # stores both; the hourly one is due at 00:00
    page = client.get("/schedules").text

    assert [r.attrs["id"] for r in rows(page, "schedules")] == [
        "schedule-ops.daily",
        "schedule-ops.hourly",
    ]
    daily = row(page, "schedules", "schedule-ops.daily")
    assert daily.attrs["class"] == "status-active"
    assert daily.cells[:7] == [
        "ops.daily",
        DIGEST,
        "active",
        "cron 30 2 * * * (UTC)",
        "2030-01-01T02:30:00+00:00 2030-01-02T02:30:00+00:00 2030-01-03T02:30:00+00:00",
        "",
        "0",
    ]
    hourly = row(page, "schedules", "schedule-ops.hourly")
    assert hourly.cells[3:7] == [
        "every 1:00:00",
        "2030-01-01T01:00:00+00:00 2030-01-01T02:00:00+00:00 2030-01-01T03:00:00+00:00",
        "2030-01-01T00:00:00+00:00",
        "1",
    ]
    assert 'href="/runs?schedule=ops.hourly"' in page
    assert schedule_forms(page) == ["/schedules/ops.daily/pause", "/schedules/ops.hourly/pause"]
    assert f'name="{CSRF_FIELD}" value="{Guard(TOKEN).csrf}"' in page


def test_a_schedule_the_app_defines_is_listed_once_it_is_looked_up(
    app: Runlane, client: TestClient
) -> None:
    assert app.schedules.get("ops.daily").status is ScheduleStatus.ACTIVE  # stores it

    page = client.get("/schedules").text

    assert [r.attrs["id"] for r in rows(page, "schedules")] == ["schedule-ops.daily"]


def test_pause_and_resume_from_the_page(
    app: Runlane, client: TestClient, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    app.maintenance.run_pass()
    with caplog.at_level(logging.INFO, logger="runlane_sqs.console"):
        response = change(client, "ops.hourly", "pause", reason="digest bug")

    assert response.status_code == 303
    assert response.headers["location"] == "/schedules?done=paused&id=ops.hourly"
    assert app.schedules.get("ops.hourly").status is ScheduleStatus.PAUSED
    assert "pause of schedule ops.hourly by alice: 'digest bug'" in caplog.text
    page = client.get(response.headers["location"]).text
    assert "Schedule ops.hourly paused." in page
    paused = row(page, "schedules", "schedule-ops.hourly")
    assert paused.attrs["class"] == "status-paused"
    assert paused.cells[2] == "paused" and paused.cells[4] == "—"  # nothing upcoming
    assert schedule_forms(page) == ["/schedules/ops.daily/pause", "/schedules/ops.hourly/resume"]

    clock.advance(timedelta(hours=3))
    app.maintenance.run_pass()
    assert app.schedules.get("ops.hourly").runs == 1  # no run while paused

    resumed = change(client, "ops.hourly", "resume")
    assert resumed.status_code == 303
    assert resumed.headers["location"] == "/schedules?done=resumed&id=ops.hourly"
    assert app.schedules.get("ops.hourly").status is ScheduleStatus.ACTIVE
    page = client.get(resumed.headers["location"]).text
    assert "Schedule ops.hourly resumed." in page
    assert "/schedules/ops.hourly/pause" in schedule_forms(page)
    assert row(page, "schedules", "schedule-ops.hourly").cells[4].count("2030-") == 3


def test_refused_schedule_changes_are_messages_and_change_nothing(
    app: Runlane, client: TestClient
) -> None:
    app.maintenance.run_pass()
    before = app.schedules.get("ops.hourly")
    cases = [
        (change(client, "ops.hourly", "explode"), 404, "There is no schedule action"),
        (change(client, "ops.nope", "pause"), 404, "not found"),
        (change(client, "ops.hourly", "pause", reason=""), 400, "Give a reason"),
        (change(client, "ops.hourly", "pause", reason=" " * 3), 400, "Give a reason"),
        (change(client, "ops.hourly", "pause", actor=""), 400, "Give your name"),
        (change(client, "ops.hourly", "pause", actor="\x1b[31m"), 400, "Give your name"),
        (change(client, "ops.hourly", "pause", csrf="forged"), 403, "came from another site"),
        (change(client, quote(HOSTILE_ID, safe=""), "pause"), 400, "must match"),
        (change(client, "ops.hourly", quote(HOSTILE_ID, safe="")), 404, "no schedule action"),
    ]
    for response, status, message in cases:
        assert response.status_code == status, response.text
        assert message in response.text
        assert "Traceback" not in response.text
        assert "<img" not in response.text and "<script>" not in response.text
    assert "&lt;img src=x" in cases[-1][0].text  # the hostile path comes back as text
    foreign = client.post(
        "/schedules/ops.hourly/pause",
        data={CSRF_FIELD: Guard(TOKEN).csrf, "actor": "mallory", "reason": "x"},
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert foreign.status_code == 403
    after = app.schedules.get("ops.hourly")
    assert (after.status, after.version) == (ScheduleStatus.ACTIVE, before.version)


def test_a_schedule_removed_from_the_code_offers_no_action_and_does_not_change(
    app: Runlane, backend: Backend, clock: ManualClock
) -> None:
    app.maintenance.run_pass()
    deployed = second_app(backend, app, register_daily_only)
    clock.advance(60)
    deployed.maintenance.run_pass()

    with client_for(deployed) as client:
        page = client.get("/schedules").text
        refused = change(client, "ops.hourly", "pause")
        not_resumed = change(client, "ops.hourly", "resume")

    removed = row(page, "schedules", "schedule-ops.hourly")
    assert removed.attrs["class"] == "status-removed" and removed.cells[7] == ""
    assert schedule_forms(page) == ["/schedules/ops.daily/pause"]
    assert refused.status_code == 409 and "Not allowed now" in refused.text
    assert not_resumed.status_code == 409 and "only a paused one resumes" in not_resumed.text
    assert deployed.schedules.get("ops.hourly").status is ScheduleStatus.REMOVED


def test_read_only_offers_and_accepts_no_schedule_change(app: Runlane) -> None:
    app.maintenance.run_pass()
    with client_for(app, read_only=True) as client:
        page = client.get("/schedules").text
        refused = change(client, "ops.hourly", "pause")

    assert "read-only" in page and schedule_forms(page) == [] and "Pause" not in page
    assert len(rows(page, "schedules")) == 2
    assert refused.status_code == 403 and "read-only" in refused.text
    assert app.schedules.get("ops.hourly").status is ScheduleStatus.ACTIVE


def test_the_schedules_pages_without_the_token_are_refused(app: Runlane) -> None:
    app.maintenance.run_pass()
    with TestClient(console_app(app, ConsoleSettings(token=TOKEN))) as stranger:
        for path in ("/schedules", "/health"):
            assert stranger.get(path).status_code == 401, path
        fields = {CSRF_FIELD: Guard(TOKEN).csrf, "actor": "mallory", "reason": "x"}
        assert stranger.post("/schedules/ops.hourly/pause", data=fields).status_code == 401
    assert app.schedules.get("ops.hourly").status is ScheduleStatus.ACTIVE


def test_text_from_the_query_and_the_form_is_shown_escaped(
    app: Runlane, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    app.maintenance.run_pass()
    # a crafted link cannot put words on the page: only a change's own notice is shown
    for done, schedule in ((HOSTILE, HOSTILE_ID), ("paused", HOSTILE_ID), (HOSTILE, "ops.daily")):
        page = client.get("/schedules", params={"done": done, "id": schedule})
        assert page.status_code == 200
        assert "<script>" not in page.text and "<img" not in page.text
        assert 'role="status"' not in page.text

    refused = change(client, "ops.daily", "pause", reason=HOSTILE)  # an escape code
    assert refused.status_code == 400 and "do not print" in refused.text
    reason = '<script>alert("x")</script>\nsecond line'
    with caplog.at_level(logging.INFO, logger="runlane_sqs.console"):
        response = change(client, "ops.daily", "pause", actor="<b>eve</b>", reason=reason)
    assert response.status_code == 303  # a name and a reason are logged, not shown
    after = client.get(response.headers["location"]).text
    assert "<b>eve</b>" not in after and "<script>" not in after
    # logged as one line: the reason quoted, its line break escaped
    assert f"by <b>eve</b>: {reason!r}" in caplog.text


def test_a_crafted_done_parameter_puts_no_words_on_a_run_page(
    app: Runlane, client: TestClient, clock: ManualClock
) -> None:
    run = trigger(app, clock, OK)

    crafted = client.get(f"/runs/{run.id}", params={"done": "locked out: call 555-0100"})
    after_a_retry = client.get(f"/runs/{run.id}", params={"done": "retry"})

    assert crafted.status_code == 200 and "555-0100" not in crafted.text
    assert 'role="status"' not in crafted.text
    assert "retry recorded." in after_a_retry.text
