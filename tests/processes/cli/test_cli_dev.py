"""``runlane-sqs dev``: a local backend in one command, stopped cleanly by Ctrl-C."""

from __future__ import annotations

import shlex
import signal
import socket

from runlane_sqs.local import free_port
from tests.processes.cli.conftest import Cli, Started, wait_until

STARTUP_SECONDS = 30


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
