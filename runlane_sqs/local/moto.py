"""The embedded local backend: a moto server process on 127.0.0.1.

Real HTTP, no Docker and no AWS account. Requires the ``local`` extra
(``pip install 'runlane-sqs[local]'``).
"""

from __future__ import annotations

import errno
import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from types import TracebackType
from typing import IO

from runlane_sqs.core.errors import ConfigurationError

LOCAL_HOST = "127.0.0.1"
LOCAL_REGION = "us-east-1"
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
CHECKED_USER_NAME = "runlane-local"
"""The IAM user a server started with ``check_signatures`` registers (allowed everything)."""
CHECKED_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIARUNLANELOCAL0001",
    "AWS_SECRET_ACCESS_KEY": "runlane/local/signature/checks/secret/01",
}
"""The fixed key of ``CHECKED_USER_NAME``: the one key such a server accepts."""
RESET_PATH = "/moto-api/reset"
"""``POST`` here makes moto forget every resource (:meth:`MotoServer.reset`)."""
SERVER_ID_PATH = "/runlane-local/server-id"
"""``GET`` here answers the ``--server-id`` the server was started with
(:func:`runlane_sqs.local.server.identify`)."""
READY_POLL_SECONDS = 0.1
"""How often ``start`` asks the port whether its server answers yet."""
OUTPUT_TAIL_LINES = 10
"""Lines of the server's stderr quoted when it exits."""
OUTPUT_TAIL_BYTES = 8192


class LocalServerError(ConfigurationError):
    """The embedded moto server cannot listen on its port, did not start, or exited."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOCAL_HOST, 0))
        return int(sock.getsockname()[1])


def ensure_port_free(port: int) -> None:
    """Raise :class:`LocalServerError` if nothing can listen on ``127.0.0.1:port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        if os.name == "posix":
            # as the server's socket does: a listening socket holds the port, connections
            # left in TIME_WAIT by a server stopped a moment ago do not
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((LOCAL_HOST, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                problem = f"port {port} is already in use on {LOCAL_HOST}"
                hint = "stop what listens there or choose another port"
                raise LocalServerError(f"{problem}; {hint}") from None
            raise LocalServerError(
                f"cannot listen on {LOCAL_HOST}:{port}: {exc.strerror}"
            ) from None


def describe_exit(code: int) -> str:
    """``exited with code 1`` or, for a process ended by a signal, ``was killed by SIGKILL``."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


class MotoServer:
    """Starts moto's server in a child process; use as a context manager.

    DynamoDB requests are applied one at a time (see :mod:`runlane_sqs.local.server`),
    so conditional writes are as atomic as on DynamoDB.

    ``start`` raises :class:`LocalServerError` when the port is taken, when the server
    exits before it answers (quoting the end of its stderr) or does not answer in
    ``startup_timeout`` seconds. Another server already answering on the port is never
    taken for this one: the child is started with an id of its own and is ready only
    when the port answers with that id.

    By default the server accepts any signature, from any key (``LOCAL_CREDENTIALS``
    will do). With ``check_signatures=True`` it verifies every request's SigV4
    signature as AWS does, and knows one key, ``CHECKED_CREDENTIALS`` (an IAM user
    allowed every action, registered again after each :meth:`reset`):
    :meth:`environment` then gives that key. This mode is for tests that must prove
    requests are signed right (those the lean clients of
    :mod:`runlane_sqs.adapters.lean` sign outside the botocore client), and for trying
    temporary credentials: a role made with that key can be assumed through moto's STS.
    Every process using the server must then sign with that key (or such a role's)."""

    def __init__(
        self,
        port: int | None = None,
        startup_timeout: float = 30.0,
        check_signatures: bool = False,
    ) -> None:
        self.port = port or free_port()
        self.startup_timeout = startup_timeout
        self.check_signatures = check_signatures
        self._server_id = uuid.uuid4().hex
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOCAL_HOST}:{self.port}"

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs."""
        return self._process.pid if self._process is not None and self.running else None

    @property
    def credentials(self) -> dict[str, str]:
        """``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` of a key this server accepts:
        ``CHECKED_CREDENTIALS`` when it checks signatures, else ``LOCAL_CREDENTIALS``."""
        return dict(CHECKED_CREDENTIALS if self.check_signatures else LOCAL_CREDENTIALS)

    def environment(self) -> dict[str, str]:
        """Variables that point boto3 (and ``Runlane.from_env``) at this server, with a
        key it accepts (:attr:`credentials`)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_DEFAULT_REGION": LOCAL_REGION,
            **self.credentials,
        }

    def start(self) -> MotoServer:
        try:
            import moto.server  # noqa: F401, PLC0415 (optional extra)
        except ImportError:
            raise ConfigurationError(
                "the embedded backend needs moto: pip install 'runlane-sqs[local]'"
            ) from None
        ensure_port_free(self.port)
        env = {**os.environ, **LOCAL_CREDENTIALS}
        # a file, not a pipe: nobody has to drain it for the server to keep running
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop)
        try:
            self._process = subprocess.Popen(
                [
                    *(sys.executable, "-m", "runlane_sqs.local.server", "--quiet"),
                    *("--port", str(self.port), "--server-id", self._server_id),
                    *(["--check-signatures"] if self.check_signatures else []),
                ],
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                env=env,
            )
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def check_running(self) -> None:
        """Raise :class:`LocalServerError` unless the server process is alive; when it
        has exited, the error says how and quotes the last lines of its stderr."""
        if self._process is None:
            raise LocalServerError(f"the moto server on port {self.port} is not running")
        code = self._process.poll()
        if code is None:
            return
        tail = self._stderr_tail()
        output = f"; its stderr ends:\n{tail}" if tail else " (no output on stderr)"
        raise LocalServerError(f"the moto server on port {self.port} {describe_exit(code)}{output}")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        another_answered = False
        while True:
            self.check_running()
            answer = self._answer_on_port()
            if answer == self._server_id:
                return
            another_answered = another_answered or answer is not None
            if time.monotonic() >= deadline:
                break
            time.sleep(READY_POLL_SECONDS)
        if another_answered:
            reason = "another server answers there"
        else:
            reason = f"it did not answer within {self.startup_timeout:g} s"
        raise LocalServerError(f"the moto server did not start on port {self.port}: {reason}")

    def _answer_on_port(self) -> str | None:
        """What the port answers to ``GET SERVER_ID_PATH``; None while nothing answers."""
        connection = http.client.HTTPConnection(LOCAL_HOST, self.port, timeout=1)
        try:
            connection.request("GET", SERVER_ID_PATH)
            return connection.getresponse().read().decode(errors="replace")
        except (OSError, http.client.HTTPException):
            return None
        finally:
            connection.close()

    def _stderr_tail(self) -> str:
        """The last lines of the server's stderr (read once it has exited)."""
        if self._stderr is None:
            return ""
        size = self._stderr.seek(0, os.SEEK_END)
        self._stderr.seek(max(0, size - OUTPUT_TAIL_BYTES))
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        return "\n".join(f"  {line}" for line in lines[-OUTPUT_TAIL_LINES:])

    def reset(self) -> None:
        """Forget every table and queue (between tests); a server checking signatures
        still knows ``CHECKED_CREDENTIALS`` afterwards."""
        request = urllib.request.Request(f"{self.endpoint_url}{RESET_PATH}", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
