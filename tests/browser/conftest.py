"""A real console process and Debian's Chromium driven by Playwright (``make
test-console``; the browser is installed by the Makefile when missing).

The console and the workers that run the shop's tasks are started from a neutral
directory (``SHOP_DIR``, a copy of tests/browser/example/app beside the package), so the
failure tracebacks the pages show, and the docs' screenshots, name no path of the
machine that ran the test."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from runlane_sqs.local.moto import free_port
from tests.emulators import REPO_ROOT

CHROMIUM = os.environ.get("RUNLANE_TEST_CHROMIUM", "/usr/bin/chromium")
TOKEN = "browser-test-token-0123456789"
SCREENSHOTS_ENV = "RUNLANE_CONSOLE_SCREENSHOTS"
"""A directory to write each page's screenshot to as well (docs/console/ for the docs)."""
STARTUP_SECONDS = 30.0
DRAIN_SECONDS = 60.0
EXAMPLE = Path(__file__).parent / "example" / "app"
SHOP_DIR = Path(tempfile.gettempdir()) / "runlane-example"
"""Where the console and the workers run: ``app/`` (the shop's tasks and app) and
``site-packages/runlane_sqs`` (a link to the package), in place of this checkout's paths."""
SHOP_APP = "app.main:app"
WORKER_ID = "worker-example-1"
"""The lease owner the pages show, in place of ``worker-HOST-PID-RANDOM``."""


@pytest.fixture(scope="session")
def shop_dir() -> Iterator[Path]:
    """``SHOP_DIR``, made afresh; a lock keeps a second test run on this machine waiting."""
    with SHOP_DIR.with_name(f"{SHOP_DIR.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(SHOP_DIR, ignore_errors=True)
        shutil.copytree(EXAMPLE, SHOP_DIR / "app", ignore=shutil.ignore_patterns("__pycache__"))
        (SHOP_DIR / "site-packages").mkdir()
        (SHOP_DIR / "site-packages" / "runlane_sqs").symlink_to(REPO_ROOT / "runlane_sqs")
        yield SHOP_DIR
        shutil.rmtree(SHOP_DIR, ignore_errors=True)


@dataclass
class Shop:
    """Processes of the shop's app, started in ``SHOP_DIR`` with its paths only."""

    directory: Path
    env: dict[str, str]

    def start(self, argv: list[str], out: Path, **env: str) -> subprocess.Popen[bytes]:
        with out.open("wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "runlane_sqs", *argv, "--app", SHOP_APP],
                cwd=self.directory,
                env={**self.env, **env},
                stdout=log,
                stderr=log,
            )

    def drain(self, out: Path, **env: str) -> None:
        """``runlane-sqs worker --drain``: run every run due, then return."""
        process = self.start(["worker", "--drain", "--worker-id", WORKER_ID], out, **env)
        if process.wait(timeout=DRAIN_SECONDS) != 0:
            raise AssertionError(f"the worker failed:\n{out.read_text(errors='replace')}")


@pytest.fixture
def shop(backend_env: dict[str, str], shop_dir: Path) -> Shop:
    path = os.pathsep.join([str(shop_dir / "site-packages"), str(shop_dir)])
    return Shop(shop_dir, {**os.environ, **backend_env, "PYTHONPATH": path})


@dataclass
class Console:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@pytest.fixture
def console(shop: Shop, tmp_path: Path) -> Iterator[Console]:
    """``runlane-sqs console`` serving the test's table, until the test ends."""
    port = free_port()
    log = tmp_path / "console.log"
    process = shop.start(["console", "--port", str(port)], log, RUNLANE_CONSOLE_TOKEN=TOKEN)
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
