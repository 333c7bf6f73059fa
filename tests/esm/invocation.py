"""One Lambda invocation in a process of its own, killed at the function's timeout.

The parent (:class:`LambdaFunction`) writes the event to a file and starts::

    python -m tests.esm.invocation --app tests.apps.esm_app:app \\
        --handler tests.apps.esm_app:handler --event N.event.json ...

which imports the handler's module (a cold start: nothing is kept between invocations),
counts every DynamoDB and SQS request the app's clients make (one line per request in
``N.requests``, written as it is made, so a killed invocation's requests count too),
calls the handler with a fake context whose ``get_remaining_time_in_millis()`` counts
down to the same deadline the parent kills the process at (SIGKILL), and writes what
the handler returned, and when, to ``N.response.json``; then it exits at once, without
the interpreter's teardown. An answer written by the deadline counts even if the process
was killed before it exited. Its log is ``N.log``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import json
import logging
import os
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runlane_sqs.lambdas.deadline import ENV_TIMEOUT_SECONDS
from tests.esm.records import reported_ids

REPO_ROOT = Path(__file__).resolve().parents[2]
ACCOUNT = "123456789012"
SERVICES = ("dynamodb", "sqs")

RETURNED = "returned"
"""The handler returned a valid response: the mapping deletes the unreported records."""
INVALID = "invalid"
"""The handler returned something Lambda cannot read as a partial batch response."""
RAISED = "raised"
"""The handler raised (a function error)."""
CRASHED = "crashed"
"""The process died before answering (a runtime crash, out of memory, ...)."""
KILLED = "killed"
"""Still running at the function's timeout: killed with SIGKILL."""
FAILED_WHOLE_BATCH = frozenset({INVALID, RAISED, CRASHED, KILLED})


@dataclass
class Invocation:
    """What one invocation did, as the mapping saw it from outside."""

    number: int
    request_id: str
    message_ids: list[str]
    pid: int = 0
    started_at: float = 0.0
    ended_at: float = 0.0
    """Wall-clock time the process exited or was killed."""
    outcome: str = CRASHED
    response: object = None
    requests: Counter[str] = field(default_factory=Counter)
    """``service.Operation`` -> requests the function's app made."""

    @property
    def died(self) -> bool:
        """Whether the process ended without answering (killed at its timeout, crashed)."""
        return self.outcome in (KILLED, CRASHED)


class LambdaFunction:
    """The consumer function: each :meth:`invoke` is a new process, killed at
    ``timeout_seconds``, with ``env`` and, as the template sets it, the timeout in
    ``RUNLANE_LAMBDA_TIMEOUT_SECONDS``."""

    def __init__(
        self,
        *,
        app: str,
        handler: str,
        timeout_seconds: float,
        env: Mapping[str, str],
        work_dir: Path,
        name: str = "runlane-consumer",
    ) -> None:
        self.app = app
        self.handler = handler
        self.timeout_seconds = timeout_seconds
        self.env = {**env, ENV_TIMEOUT_SECONDS: f"{timeout_seconds:g}"}
        self.work_dir = work_dir
        self.name = name
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        work_dir.mkdir(parents=True, exist_ok=True)

    def invoke(self, event: Mapping[str, Any]) -> Invocation:
        with self._lock:
            number = next(self._numbers)
        invocation = Invocation(
            number=number,
            request_id=str(uuid.uuid4()),
            message_ids=[r["messageId"] for r in event["Records"]],
        )
        base = self.work_dir / f"{number:05d}"
        paths = {k: Path(f"{base}.{k}") for k in ("event.json", "response.json", "requests")}
        paths["event.json"].write_text(json.dumps(event))
        invocation.started_at = time.time()
        deadline = invocation.started_at + self.timeout_seconds
        with Path(f"{base}.log").open("wb") as log:
            process = subprocess.Popen(
                self._argv(invocation, deadline, paths),
                cwd=REPO_ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        invocation.pid = process.pid
        killed = False
        try:
            process.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            killed = True
        invocation.ended_at = time.time()
        invocation.requests = _read_requests(paths["requests"])
        _answer(invocation, paths["response.json"], killed, deadline)
        return invocation

    def _argv(self, invocation: Invocation, deadline: float, paths: dict[str, Path]) -> list[str]:
        return [
            sys.executable,
            "-m",
            "tests.esm.invocation",
            "--app",
            self.app,
            "--handler",
            self.handler,
            "--event",
            str(paths["event.json"]),
            "--response",
            str(paths["response.json"]),
            "--requests",
            str(paths["requests"]),
            "--deadline",
            repr(deadline),
            "--request-id",
            invocation.request_id,
            "--function-name",
            self.name,
        ]


def _read_requests(path: Path) -> Counter[str]:
    with contextlib.suppress(FileNotFoundError):
        return Counter(path.read_text().split())
    return Counter()


def _answer(invocation: Invocation, path: Path, killed: bool, deadline: float) -> None:
    """Set the invocation's outcome and response from what the process left: an answer
    given before the deadline counts, even when the process was killed while exiting
    (Lambda ends an invocation when its handler returns, not when a process exits)."""
    try:
        answer = json.loads(path.read_text())
    except FileNotFoundError:
        invocation.outcome = KILLED if killed else CRASHED
        return
    if answer.get("at", deadline + 1) > deadline:
        invocation.outcome = KILLED
        return
    if "error" in answer:
        invocation.outcome = RAISED
    elif "response" not in answer:
        invocation.outcome = INVALID
    else:
        invocation.response = answer["response"]
        valid = reported_ids(invocation.response, invocation.message_ids) is not None
        invocation.outcome = RETURNED if valid else INVALID


# --- the child process ------------------------------------------------------------------


class FakeLambdaContext:
    """The Lambda context object: its remaining time counts down to ``deadline``."""

    def __init__(self, deadline: float, request_id: str, function_name: str) -> None:
        self.deadline = deadline
        self.aws_request_id = request_id
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:{function_name}"
        self.memory_limit_in_mb = "512"
        self.log_group_name = f"/aws/lambda/{function_name}"
        day = time.strftime("%Y/%m/%d", time.gmtime())
        self.log_stream_name = f"{day}/[$LATEST]{request_id.replace('-', '')}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.time()) * 1000))


def _load(spec: str) -> Any:
    module, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _count_requests(client: Any, fd: int) -> None:
    """Append ``service.Operation`` to ``fd`` before every API call ``client`` makes."""
    service = client.meta.service_model.service_id.hyphenize()

    def hook(model: Any, **_: Any) -> None:
        os.write(fd, f"{service}.{model.name}\n".encode())

    client.meta.events.register(f"before-call.{service}.*", hook)


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.esm.invocation")
    for option in ("app", "handler", "event", "response", "requests", "request-id"):
        parser.add_argument(f"--{option}", required=True)
    parser.add_argument("--deadline", type=float, required=True)
    parser.add_argument("--function-name", default="runlane-consumer")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)  # what the Python runtime passes
    fd = os.open(args.requests, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    app = _load(args.app)
    for service in SERVICES:
        _count_requests(app.client(service), fd)
    handler = _load(args.handler)
    context = FakeLambdaContext(args.deadline, args.request_id, args.function_name)
    event = json.loads(Path(args.event).read_text())
    try:
        response = handler(event, context)
    except Exception as exc:  # a function error: Lambda fails the whole batch
        traceback.print_exc()
        _write_atomically(Path(args.response), json.dumps({"error": repr(exc), "at": time.time()}))
        return 1
    try:
        text = json.dumps({"response": response, "at": time.time()})
    except (TypeError, ValueError):
        text = json.dumps({"unserializable": repr(response), "at": time.time()})
    _write_atomically(Path(args.response), text)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the invocation is over: no interpreter teardown (Lambda freezes it)
