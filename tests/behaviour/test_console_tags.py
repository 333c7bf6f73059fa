"""The console's runs page filtered by tag, and a run page showing its tags as links
(docs/tags.md): a bad tag is a message on the page, never an empty result."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from runlane_sqs import Runlane
from tests.backends import Backend
from tests.behaviour.test_console_http import (
    HOSTILE,
    TOKEN,
    WORKS,
    client_for,
    register,
)

RUN_LINK = r'href="/runs/([0-9a-f]{32})"'


@pytest.fixture
def app(backend: Backend) -> Runlane:
    return backend.app(register=register)


@pytest.fixture
def client(app: Runlane) -> Iterator[TestClient]:
    with client_for(app) as client:
        client.cookies.set("runlane_console", TOKEN)
        yield client


def test_the_runs_page_filters_by_tags_newest_first_across_pages(
    app: Runlane, client: TestClient, backend: Backend
) -> None:
    made = []
    for n in range(60):
        backend.clock.advance(1)
        made.append(app.trigger(WORKS, n, tags={"customer": f"c{n % 2}", "order": str(n)}))
    c1 = [r.id for r in reversed(made) if r.tags["customer"] == "c1"]

    first = client.get("/runs?tag=customer%3Dc1&limit=25")
    assert first.status_code == 200
    assert re.findall(RUN_LINK, first.text) == c1[:25]
    assert 'value="customer=c1"' in first.text  # the filter stays in its field
    (next_url,) = re.findall(r'class="next" href="([^"]+)"', first.text)
    rest = client.get(next_url.replace("&amp;", "&"))
    assert re.findall(RUN_LINK, rest.text) == c1[25:]

    both = client.get("/runs?tag=customer%3Dc1&tag=order%3D7")
    assert re.findall(RUN_LINK, both.text) == [made[7].id]


def test_a_run_page_links_its_tags(app: Runlane, client: TestClient) -> None:
    run = app.trigger(WORKS, 1, tags={"customer": "42 & co", "order": "7"})
    page = client.get(f"/runs/{run.id}")
    assert 'href="/runs?tag=customer%3D42%20%26%20co"' in page.text
    assert "customer=42 &amp; co" in page.text


@pytest.mark.parametrize(
    ("tag", "message"),
    [
        ("customer", "a tag is written key=value"),
        (quote("customer=" + HOSTILE), "tag &#39;customer&#39;: its value contains U+003C"),
        (quote("cust omer=1"), "must match"),
        (quote("customer=\u202e42"), "U+202E (a format character)"),
        (quote("customer=" + "x" * 400), "a tag filter is at most"),
    ],
)
def test_a_bad_tag_filter_is_a_message_on_the_page(
    client: TestClient, tag: str, message: str
) -> None:
    response = client.get(f"/runs?tag={tag}")
    assert response.status_code == 400
    assert message in response.text
    assert 'class="errors"' in response.text
    assert "No runs match" not in response.text  # an error, never an empty result
    assert "<script>" not in response.text
    assert "Traceback" not in response.text


def test_the_bulk_form_counts_the_runs_of_a_tag(app: Runlane, client: TestClient) -> None:
    for n in range(6):
        app.trigger(WORKS, n, delay=3600, tags={"customer": f"c{n % 2}"})

    counted = client.get("/bulk/count", params={"action": "cancel", "tag": "customer=c1"})
    assert counted.status_code == 200
    assert "<strong>3</strong> run(s) selected for cancel" in counted.text
    assert 'value="customer=c1"' in counted.text
    refused = client.get("/bulk/count", params={"action": "cancel", "tag": "customer=<b>"})
    assert refused.status_code == 400 and "markup" in refused.text
