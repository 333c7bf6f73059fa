"""``runlane-sqs dev``: a local backend in one command, stopped cleanly by Ctrl-C, on a
fixed port by default; a port that is taken or a server that dies is exit code 4."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from runlane_sqs.local import MotoServer, free_port
from tests.processes.cli.conftest import Cli, Started, wait_until

STARTUP_SECONDS = 30
DOCUMENTED_DEV_PORT = 5055
"""The default port docs/operations.md gives for ``dev``."""


def _exports(dev: Started) -> dict[str, str]:
    exports = {}
    for line in dev.stdout().splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            exports[name] = shlex.split(value)[0]
    return exports


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _started_or_exited(dev: Started) -> bool:
    return not dev.alive() or "RUNLANE_ENVIRONMENT" in _exports(dev)


def test_dev_starts_a_backend_prints_exports_and_stops_on_sigint(cli: Cli) -> None:
    port = free_port()
    dev = cli.start("dev", "--port", str(port), env={"RUNLANE_APP": ""})

    def ready() -> bool:
        assert dev.alive(), f"dev exited early:\n{dev.stderr()[-3000:]}"
        return "RUNLANE_ENVIRONMENT" in _exports(dev)

    wait_until(ready, STARTUP_SECONDS, "the export lines")
    exports = _exports(dev)
    assert exports["AWS_ENDPOINT_URL"] == f"http://127.0.0.1:{port}"
    assert {"AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(exports)
    assert exports["RUNLANE_TABLE"] == cli.env["RUNLANE_TABLE"]

    # the exported variables reach a provisioned backend
    listed = cli("runs", "list", "--json", env=exports).json()
    assert listed == {"runs": [], "cursor": None}

    dev.process.send_signal(signal.SIGINT)
    assert dev.process.wait(timeout=15) == 0, dev.stderr()[-3000:]
    assert not _listening(port)


@contextmanager
def _dev(cli: Cli, *args: str) -> Iterator[Started]:
    """``dev`` with ``args``, stopped with Ctrl-C (SIGINT) at the end if it still runs, so
    that it stops its server too."""
    dev = cli.start("dev", *args, env={"RUNLANE_APP": ""})
    try:
        wait_until(lambda: _started_or_exited(dev), STARTUP_SECONDS, "the export lines or an exit")
        yield dev
    finally:
        if dev.alive():
            dev.process.send_signal(signal.SIGINT)
            dev.process.wait(timeout=15)


def test_dev_listens_on_the_documented_port_by_default(cli: Cli) -> None:
    # without --port: either it serves on that port, or the port is taken here and it
    # says so; either way the port is the documented one
    with _dev(cli) as dev:
        if dev.alive():
            exports = _exports(dev)
            assert exports["AWS_ENDPOINT_URL"] == f"http://127.0.0.1:{DOCUMENTED_DEV_PORT}"
            assert cli("runs", "list", "--json", env=exports).json()["runs"] == []
        else:
            assert dev.process.wait() == 4, dev.stderr()[-3000:]
            assert f"error: port {DOCUMENTED_DEV_PORT} is already in use" in dev.stderr()


def test_dev_port_0_serves_on_a_free_port_it_prints(cli: Cli) -> None:
    with _dev(cli, "--port", "0") as dev:
        assert dev.alive(), dev.stderr()[-3000:]
        exports = _exports(dev)
        port = urlsplit(exports["AWS_ENDPOINT_URL"]).port
        assert port not in (None, 0, DOCUMENTED_DEV_PORT)
        assert cli("runs", "list", "--json", env=exports).json()["runs"] == []


def test_dev_on_a_port_another_moto_server_answers_exits_4_and_provisions_nothing(
    cli: Cli, moto_server: MotoServer
) -> None:
    done = cli("dev", "--port", str(moto_server.port), env={"RUNLANE_APP": ""})

    assert done.code == 4, done.stderr[-3000:]
    assert f"error: port {moto_server.port} is already in use" in done.stderr
    assert "export " not in done.stdout
    # the table dev would have created is not in the other server
    missing = cli("runs", "list")
    assert missing.code == 4
    assert f"table '{cli.env['RUNLANE_TABLE']}' does not exist" in missing.stderr


def test_dev_exits_4_with_the_reason_when_its_server_dies(cli: Cli) -> None:
    port = free_port()
    with _dev(cli, "--port", str(port)) as dev:
        assert dev.alive(), dev.stderr()[-3000:]
        children = subprocess.run(
            ["pgrep", "-P", str(dev.process.pid)], capture_output=True, text=True, check=True
        )
        (server_pid,) = children.stdout.split()

        os.kill(int(server_pid), signal.SIGKILL)

        assert dev.process.wait(timeout=15) == 4, dev.stderr()[-3000:]
        assert f"error: the moto server on port {port} was killed by SIGKILL" in dev.stderr()
