"""ECS task scale-in protection (runlane_sqs/runtime/protection.py): a worker process
that finds ``ECS_AGENT_URI`` (as the ECS agent sets it in a task) asks the agent to
protect its task while attempts are in flight and drops the protection when the last
one ends. The agent here is a small HTTP server that records what it is asked."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from runlane_sqs import Runlane, RunStatus
from tests.apps.tasks import MARKERS_ENV, PATIENT_TASK, register_patient
from tests.emulators import WorkerProcess, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def agent() -> Iterator[tuple[str, list[tuple[str, str, dict[str, Any]]]]]:
    """A stand-in for the ECS agent: its URI and the requests it received."""
    received: list[tuple[str, str, dict[str, Any]]] = []

    class Agent(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append(("PUT", self.path, json.loads(body)))
            answer = b'{"protection": {}}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Agent)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api/task-1", received
    server.shutdown()
    server.server_close()


def test_a_busy_worker_protects_its_task_and_an_idle_one_does_not(
    make_app: Callable[..., Runlane],
    start_worker: Callable[..., WorkerProcess],
    agent: tuple[str, list[tuple[str, str, dict[str, Any]]]],
    tmp_path: Path,
) -> None:
    uri, received = agent
    app = register_patient(make_app())
    app.provision()
    env = {"ECS_AGENT_URI": uri, MARKERS_ENV: str(tmp_path)}
    start_worker("--app", "tests.apps.patient:app", "--concurrency", "2", extra_env=env)
    # attempts of half a second: long enough that a loaded machine's protection thread
    # sees them (a flip from idle to busy and back before it wakes sends nothing)
    runs = [app.trigger(PATIENT_TASK, {"wait_seconds": 0.5}) for _ in range(3)]

    def done() -> bool:
        return all(app.runs.get_stored(r.id).status is RunStatus.SUCCEEDED for r in runs)

    wait_until(done, 30, "the runs to succeed")
    wait_until(
        lambda: bool(received) and received[-1][2] == {"ProtectionEnabled": False},
        10,
        "the protection to be dropped",
    )
    states = [body for _, _, body in received]
    assert {path for _, path, _ in received} == {"/api/task-1/task-protection/v1/state"}
    assert states[0] == {"ProtectionEnabled": True, "ExpiresInMinutes": 60}
    # set when the first attempt starts and dropped when the last ends: never twice in a row
    assert all(a != b for a, b in itertools.pairwise(states))
