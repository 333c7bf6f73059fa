"""What the console's HTTP tests of the overview and bulk pages share: the access
token and a client that presents it (test_console_overview.py, test_console_bulk.py)."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from runlane_sqs import Runlane
from runlane_sqs.console.server import ConsoleSettings, console_app

TOKEN = "test-console-token-0123456789"


def client_for(app: Runlane, **settings: Any) -> TestClient:
    """A client of a console over ``app`` (``settings``: read_only, ...), its access
    token in its cookie."""
    client = TestClient(
        console_app(app, ConsoleSettings(token=TOKEN, **settings)), base_url="http://console.test"
    )
    client.cookies.set("runlane_console", TOKEN)
    return client
