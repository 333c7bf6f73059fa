"""A real console process and Debian's Chromium driven by Playwright (``make
test-console``; the browser is installed by the Makefile when missing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from runlane_sqs.local.moto import free_port
from tests.emulators import REPO_ROOT, subprocess_env

CHROMIUM = os.environ.get("RUNLANE_TEST_CHROMIUM", "/usr/bin/chromium")
TOKEN = "browser-test-token-0123456789"
SCREENSHOTS_ENV = "RUNLANE_CONSOLE_SCREENSHOTS"
"""A directory to write each page's screenshot to as well (docs/console/ for the docs)."""
STARTUP_SECONDS = 30.0


@dataclass
class Console:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@pytest.fixture
def console(backend_env: dict[str, str], tmp_path: Path) -> Iterator[Console]:
    """``runlane-sqs console`` serving the test's table, until the test ends."""
    port = free_port()
    env = {**subprocess_env(backend_env), "RUNLANE_CONSOLE_TOKEN": TOKEN}
    log = tmp_path / "console.log"
    argv = [sys.executable, "-m", "runlane_sqs", "console", "--port", str(port)]
    argv += ["--app", "tests.apps.console_app:app"]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=out, stderr=out)
    started = Console(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        try:
            urllib.request.urlopen(f"{started.url}/static/console.css", timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the console did not start:\n{started.output()}") from None
            time.sleep(0.1)
    yield started
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        raise AssertionError(f"no Chromium at {CHROMIUM}: make test-console installs it")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    yield opened
    context.close()


class Screenshots:
    """Each page's screenshot under the test's output, and in ``SCREENSHOTS_ENV`` if set."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        extra = os.environ.get(SCREENSHOTS_ENV)
        self.extra = Path(extra) if extra else None

    def take(self, page: Page, name: str) -> Path:
        path = self.directory / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        if self.extra is not None:
            self.extra.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, self.extra / path.name)
        return path


@pytest.fixture
def screenshots(tmp_path: Path) -> Screenshots:
    return Screenshots(tmp_path / "screenshots")
