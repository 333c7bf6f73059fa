"""The embedded local backend: a moto server process on 127.0.0.1.

Real HTTP, no Docker and no AWS account. Requires the ``local`` extra
(``pip install 'runlane-sqs[local]'``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from types import TracebackType

from runlane_sqs.core.errors import ConfigurationError

LOCAL_REGION = "us-east-1"
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MotoServer:
    """Starts moto's server in a child process; use as a context manager.

    DynamoDB requests are applied one at a time (see :mod:`runlane_sqs.local.server`),
    so conditional writes are as atomic as on DynamoDB."""

    def __init__(self, port: int | None = None, startup_timeout: float = 30.0) -> None:
        self.port = port or free_port()
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def environment(self) -> dict[str, str]:
        """Variables that point boto3 (and ``Runlane.from_env``) at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_DEFAULT_REGION": LOCAL_REGION,
            **LOCAL_CREDENTIALS,
        }

    def start(self) -> MotoServer:
        try:
            import moto.server  # noqa: F401, PLC0415 (optional extra)
        except ImportError:
            raise ConfigurationError(
                "the embedded backend needs moto: pip install 'runlane-sqs[local]'"
            ) from None
        env = {**os.environ, **LOCAL_CREDENTIALS}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "runlane_sqs.local.server", "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise ConfigurationError(f"moto server exited with code {self._process.returncode}")
            try:
                with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=1):
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        self.stop()
        raise ConfigurationError(f"moto server did not start on port {self.port}")

    def reset(self) -> None:
        """Forget every table and queue (between tests)."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
