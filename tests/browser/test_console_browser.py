"""An on-call engineer's path through the console, in a real Chromium against a real
console process: runs triggered (some fail), the console opened from its URL, failed
runs filtered, one opened, its traceback read (naming the shop's paths, none of this
checkout's), retried with a reason; the new linked run succeeds once a worker drains; a
token is completed from the page; the timeline shows every attempt; markup in a payload
stays text; a typed task is triggered from its page (docs/console.md)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Dialog, Page, expect

from runlane_sqs import EventType, Runlane, RunStatus
from tests.browser.conftest import REPO_ROOT, TOKEN, WORKER_ID, Console, Screenshots, Shop
from tests.browser.example.app.tasks import (
    APPROVAL,
    CHARGE,
    GATEWAY,
    INVOICES,
    NIGHTLY,
    REFUND,
    register_console_tasks,
)

MARKUP = '<img src=x onerror="document.title=1"><script>document.title="owned"</script>'


def accept(dialog: Dialog) -> None:
    dialog.accept()


def test_filter_read_retry_and_complete_a_token_in_a_browser(
    make_app: Callable[..., Runlane],
    shop: Shop,
    console: Console,
    page: Page,
    screenshots: Screenshots,
    tmp_path: Path,
) -> None:
    app = register_console_tasks(make_app())
    app.provision()
    declined = app.trigger(CHARGE, {"order": 7, "declined": True, "note": MARKUP})
    for order in (1, 2, 3):
        app.trigger(CHARGE, {"order": order})
    token = app.tokens.create(metadata={"order": 7})
    waiting = app.trigger(APPROVAL, {"token": token.id})
    shop.drain(tmp_path / "worker-1.log", **{GATEWAY: "down"})
    assert app.runs.get(declined.id).status is RunStatus.FAILED

    page.goto(f"{console.url}/runs?token={TOKEN}")
    expect(page).to_have_url(f"{console.url}/runs")  # the token left the address bar
    expect(page.locator("table.runs tbody tr")).to_have_count(5)
    expect(page.locator(".tile.group-failed .count")).to_have_text("1")
    expect(page.locator(".tile.group-succeeded .count")).to_have_text("3")
    expect(page.locator("svg.outcomes rect.outcome-failed")).to_have_count(1)
    screenshots.take(page, "runs")

    page.get_by_label("failed", exact=True).check()
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("table.runs tbody tr")).to_have_count(1)
    page.get_by_role("link", name=declined.id).click()

    read_the_failure(page, shop, screenshots)

    page.on("dialog", accept)
    retry_form = page.locator('form[action$="/retry"]')
    retry_form.get_by_label("Your name").fill("alice")
    retry_form.get_by_label("Reason").fill("gateway is back")
    retry_form.get_by_role("button", name="Retry").click()

    expect(page.locator(".done")).to_have_text("retry recorded.")
    new_id = re.search(r"/runs/([0-9a-f]{32})", page.url)
    assert new_id is not None and new_id.group(1) != declined.id
    expect(page.locator("#source-run")).to_have_text(declined.id)
    (linked,) = [e for e in app.runs.events(declined.id) if e.type is EventType.LINKED_RUN]
    assert (linked.data["actor"], linked.data["reason"]) == ("console:alice", "gateway is back")

    shop.drain(tmp_path / "worker-2.log")
    page.reload()
    expect(page.locator("#run-status")).to_have_text("succeeded")
    expect(page.locator("#result")).to_contain_text('"charged": 7')
    expect(page.locator("svg.timeline rect.attempt.outcome-succeeded")).to_have_count(1)
    screenshots.take(page, "run-succeeded")

    complete_the_token(page, screenshots, token.id)
    health_and_schedules(app, page, screenshots)
    shop.drain(tmp_path / "worker-3.log")
    page.goto(f"{console.url}/runs/{waiting.id}")
    expect(page.locator("#run-status")).to_have_text("succeeded")
    expect(page.locator("table.attempts tbody tr")).to_have_count(2)  # waited, resumed
    expect(page.locator("svg.timeline rect.attempt")).to_have_count(2)
    assert app.runs.get(waiting.id).result == {"approved": True}


def read_the_failure(page: Page, shop: Shop, screenshots: Screenshots) -> None:
    """The failed run's page: its traceback, naming the shop's files and none of this
    checkout's, the worker, the payload's markup as text, one attempt."""
    expect(page.locator("#run-status")).to_have_text("failed")
    traceback = page.locator("#traceback")
    expect(traceback).to_contain_text("RuntimeError: card declined for order 7")
    expect(traceback).to_contain_text(f'File "{shop.directory / "app" / "tasks.py"}"')
    expect(traceback).not_to_contain_text(str(REPO_ROOT))
    expect(page.locator("table.attempts")).to_contain_text(WORKER_ID)
    expect(page.locator("#payload")).to_contain_text("<script>")  # shown as text
    assert page.title() != "owned" and page.title() != "1"
    expect(page.locator("svg.timeline rect.attempt")).to_have_count(1)
    screenshots.take(page, "run-failed")


def complete_the_token(page: Page, screenshots: Screenshots, token_id: str) -> None:
    """Look the token up on its page and complete it with a JSON value."""
    page.get_by_role("link", name="Tokens and signals").click()
    page.get_by_label("Token id").fill(token_id)
    page.get_by_role("button", name="Look up").click()
    expect(page.locator("#token-status")).to_have_text("pending")
    page.get_by_label("Value (JSON)").first.fill('{"approved": true}')
    page.get_by_role("button", name="Complete").click()
    expect(page.locator("#token-status")).to_have_text("completed")
    screenshots.take(page, "tokens")
    assert token_id not in page.url  # a bearer secret: never in the address bar


def health_and_schedules(app: Runlane, page: Page, screenshots: Screenshots) -> None:
    """The last maintenance pass and the queues; the nightly schedule paused and resumed."""
    report = app.maintenance.run_pass()
    page.get_by_role("link", name="Health").click()
    expect(page.locator("#last-pass")).to_contain_text(report.pass_id)
    expect(page.locator("#overdue")).to_have_text("0")
    expect(page.locator("#queue-default")).to_be_visible()
    screenshots.take(page, "health")

    page.get_by_role("link", name="Schedules").click()
    row = page.locator(f'[id="schedule-{NIGHTLY}"]')
    expect(row.locator(".status")).to_have_text("active")
    # the next three occurrences (the last one's cell has a time too when the pass ran
    # near 02:30 UTC and caught that occurrence up)
    expect(row.locator(".upcoming time")).to_have_count(3)
    screenshots.take(page, "schedules")
    row.get_by_label("your name").fill("alice")
    row.get_by_label("reason").fill("quiet night")
    row.get_by_role("button", name="Pause").click()
    expect(page.locator(".done")).to_have_text(f"Schedule {NIGHTLY} paused.")
    expect(row.locator(".status")).to_have_text("paused")
    assert app.schedules.get(NIGHTLY).status.value == "paused"
    row.get_by_label("your name").fill("alice")
    row.get_by_label("reason").fill("back on")
    row.get_by_role("button", name="Resume").click()
    expect(row.locator(".status")).to_have_text("active")


def test_a_parent_s_page_shows_its_group_and_leads_to_its_children(
    make_app: Callable[..., Runlane],
    shop: Shop,
    console: Console,
    page: Page,
    screenshots: Screenshots,
    tmp_path: Path,
) -> None:
    app = register_console_tasks(make_app())
    app.provision()
    parent = app.trigger(INVOICES, {"orders": [11, 12, 13, 14, 15]})
    shop.drain(tmp_path / "worker-1.log")
    assert app.runs.get(parent.id).result == 5

    page.goto(f"{console.url}/runs/{parent.id}?token={TOKEN}")
    expect(page.locator("#run-status")).to_have_text("succeeded")
    expect(page.locator(".group-progress")).to_contain_text(
        "5 of 5 finished: 5 succeeded, 0 failed, 0 cancelled"
    )
    expect(page.locator(".group-progress progress")).to_have_attribute("value", "5")
    rows = page.locator("table.children tr.child-row")
    expect(rows).to_have_count(5)
    screenshots.take(page, "run-group")
    rows.first.get_by_role("link").click()
    expect(page.locator("#member-of")).to_contain_text("item 0 of group")
    expect(page.locator("#result")).to_contain_text('"charged": 11')
    page.locator("#parent-run").click()
    expect(page).to_have_url(f"{console.url}/runs/{parent.id}")


def test_without_the_token_the_browser_gets_the_refusal_page(console: Console, page: Page) -> None:
    response = page.goto(f"{console.url}/runs")
    assert response is not None and response.status == 401
    expect(page.locator("#problem-message")).to_contain_text("Open the URL the console printed")


def test_a_bulk_retry_is_counted_confirmed_and_followed_in_a_browser(
    make_app: Callable[..., Runlane],
    shop: Shop,
    console: Console,
    page: Page,
    screenshots: Screenshots,
    tmp_path: Path,
) -> None:
    app = register_console_tasks(make_app())
    app.provision()
    declined = [app.trigger(CHARGE, {"order": n, "declined": True}) for n in range(4)]
    app.trigger(CHARGE, {"order": 9})
    shop.drain(tmp_path / "worker-1.log", **{GATEWAY: "down"})

    page.goto(f"{console.url}/bulk?token={TOKEN}")
    page.get_by_label("Action").select_option("retry")
    page.locator("#bulk-task").fill(CHARGE)
    page.locator("#bulk-count").click()
    expect(page.locator("#bulk-selected")).to_contain_text("4 run(s) selected for retry")
    expect(page.locator("#bulk-start")).to_have_text("Retry 4 run(s)")
    page.get_by_label("Your name").fill("dana")
    page.get_by_label("Reason").fill("the gateway is back")
    screenshots.take(page, "bulk-count")
    page.once("dialog", accept)
    page.locator("#bulk-start").click()

    expect(page).to_have_url(re.compile(rf"{console.url}/bulk/\d{{8}}T\d{{6}}-[0-9a-f]{{8}}$"))
    operation_id = page.url.rsplit("/", 1)[1]
    expect(page.locator("h1")).to_have_text(f"Bulk retry {operation_id}")
    expect(page.locator("#operation-status")).to_have_text(re.compile("running|done"))
    if page.locator("#operation-status").inner_text() == "running":
        page.get_by_label("refresh every 5 s").check()  # the page reloads itself until done
    expect(page.locator("#operation-status")).to_have_text("done", timeout=30_000)
    expect(page.locator("#operation-progress")).to_contain_text("4 of 4 examined")
    screenshots.take(page, "bulk-done")
    for source in declined:
        (link,) = [e for e in app.runs.events(source.id) if e.type is EventType.LINKED_RUN]
        assert (link.data["operation"], link.data["actor"]) == (operation_id, "console:dana")
    page.locator("a", has_text="All bulk operations").click()
    expect(page.locator("table.bulk tbody tr")).to_have_count(1)


def test_a_typed_task_is_triggered_from_its_page_and_lands_on_its_run(
    make_app: Callable[..., Runlane],
    shop: Shop,
    console: Console,
    page: Page,
    screenshots: Screenshots,
    tmp_path: Path,
) -> None:
    app = register_console_tasks(make_app())
    app.provision()

    page.goto(f"{console.url}/runs?token={TOKEN}")
    page.get_by_role("link", name="Tasks", exact=True).click()
    expect(page.locator(f'[id="task-{REFUND}"] .payload-type')).to_have_text("Refund")
    page.get_by_role("link", name=REFUND, exact=True).click()
    expect(page.locator("#payload-schema")).to_contain_text('"amount_cents"')
    page.on("dialog", accept)

    page.get_by_label("Payload (JSON)").fill('{"order": "seven"}')
    page.get_by_role("button", name="Trigger").click()
    expect(page.locator("li.field-error code")).to_have_text(["order", "amount_cents"])
    expect(page.get_by_label("Payload (JSON)")).to_have_value('{"order": "seven"}')
    assert list(app.runs.list()) == []  # nothing written
    screenshots.take(page, "task")

    page.get_by_label("Payload (JSON)").fill('{"order": 7, "amount_cents": 1250}')
    page.get_by_label("Idempotency key (optional)").fill("refund-7")
    page.get_by_role("button", name="Trigger").click()
    expect(page).to_have_url(re.compile(rf"{console.url}/runs/[0-9a-f]{{32}}\?done=triggered$"))
    expect(page.locator(".done")).to_have_text("Run triggered.")
    expect(page.locator("#run-status")).to_have_text("queued")
    run_id = page.url.split("/runs/")[1].split("?")[0]
    assert app.runs.get(run_id).idempotency_key == "refund-7"

    shop.drain(tmp_path / "worker-1.log")
    page.reload()
    expect(page.locator("#run-status")).to_have_text("succeeded")
    expect(page.locator("#result")).to_contain_text('"refunded": 1250')
