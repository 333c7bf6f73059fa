"""Amazon DynamoDB Local and LocalStack (SQS, CloudFormation, EventBridge) on the host,
without Docker: the second test backend, next to the embedded moto server.

Both are installed into ``.tools/`` by ``localstack/install-emulators.sh`` and started
here as child processes on free ports of 127.0.0.1::

    with AwsLocal() as backend:
        os.environ.update(backend.environment())

As a command (what ``make test-aws-local`` uses)::

    python -m tests.aws_local run -- python -m pytest tests -m integration

starts both, runs the command with ``RUNLANE_TEST_BACKEND=aws-local`` and the endpoints
in its environment (``RUNLANE_TEST_DYNAMODB_ENDPOINT``, ``RUNLANE_TEST_SQS_ENDPOINT``,
which the integration fixtures use instead of starting their own), then stops both.
``python -m tests.aws_local serve`` starts both and prints the variables until Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import boto3
from botocore.config import Config

from runlane_sqs.local import LOCAL_CREDENTIALS, LOCAL_REGION, free_port

REPO_ROOT = Path(__file__).resolve().parents[1]
TOOLS_DIR = Path(os.environ.get("RUNLANE_TOOLS_DIR", REPO_ROOT / ".tools"))
INSTALL_SCRIPT = REPO_ROOT / "localstack" / "install-emulators.sh"

BACKEND_VARIABLE = "RUNLANE_TEST_BACKEND"
AWS_LOCAL = "aws-local"
DYNAMODB_ENDPOINT_VARIABLE = "RUNLANE_TEST_DYNAMODB_ENDPOINT"
SQS_ENDPOINT_VARIABLE = "RUNLANE_TEST_SQS_ENDPOINT"


class EmulatorError(RuntimeError):
    """An emulator is not installed, did not start, or died."""


class _Emulator:
    """One emulator in a child process, its output kept in a log file."""

    name = "emulator"
    die_with_parent = False
    """Ask Linux to SIGTERM the emulator when the thread that launched it ends, so a test
    process that is killed (a timeout, a cancelled CI job) leaves no emulator behind."""

    def __init__(self, port: int | None, startup_timeout: float, work_dir: Path | None) -> None:
        self.port = port or free_port()
        self.startup_timeout = startup_timeout
        self._own_work_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix=f"runlane-{self.name}-"))
        self.log_path = self.work_dir / f"{self.name}.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The emulator process's id while it runs (the bench reads its CPU time)."""
        return self._process.pid if self.running and self._process else None

    def command(self) -> tuple[list[str], dict[str, str], Path]:
        """argv, environment and working directory of the child process."""
        raise NotImplementedError

    def ready(self) -> bool:
        """True once the emulator answers requests."""
        raise NotImplementedError

    def start(self) -> _Emulator:
        return self.launch().wait_ready()

    def launch(self) -> _Emulator:
        """Start the child process (in the calling thread: with ``die_with_parent``, the
        child gets SIGTERM when that thread ends) without waiting for it to answer."""
        argv, env, cwd = self.command()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            # A process group of its own, so stop() ends whatever it started.
            self._process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # Only a C call looked up beforehand runs in the child: no lock, no import.
                preexec_fn=_terminated_with_parent if self.die_with_parent else None,  # noqa: PLW1509
            )
        return self

    def wait_ready(self) -> _Emulator:
        """Wait until the launched emulator answers; stop it if it exits or times out."""
        assert self._process is not None, "launch() first"
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if not self.running:
                code = self._process.returncode
                self.stop()
                raise EmulatorError(f"{self.name} exited with code {code}:\n{self.log_tail()}")
            if self._ready_safely():
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise EmulatorError(
                    f"{self.name} did not become ready on port {self.port} within "
                    f"{self.startup_timeout} s:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def _ready_safely(self) -> bool:
        try:
            return self.ready()
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> _Emulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
"""Looked up here, not in the forked child, where loading a library is not safe."""


def _terminated_with_parent() -> None:
    """In the emulator's process, before it runs: SIGTERM when the thread that launched
    it ends (Linux's ``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing)."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class DynamoDBLocal(_Emulator):
    """Amazon DynamoDB Local from ``.tools/dynamodb-local``: in memory, or with its data
    in a SQLite file in ``db_path`` (kept across a restart)."""

    name = "dynamodb-local"

    def __init__(
        self,
        port: int | None = None,
        *,
        home: Path | None = None,
        startup_timeout: float = 60.0,
        work_dir: Path | None = None,
        db_path: Path | None = None,
    ) -> None:
        super().__init__(port, startup_timeout, work_dir)
        self.home = home or TOOLS_DIR / "dynamodb-local"
        self.db_path = db_path

    def command(self) -> tuple[list[str], dict[str, str], Path]:
        jar = self.home / "DynamoDBLocal.jar"
        if not jar.is_file():
            raise EmulatorError(f"{jar} is missing: run {INSTALL_SCRIPT.relative_to(REPO_ROOT)}")
        argv = [
            "java",
            f"-Djava.library.path={self.home / 'DynamoDBLocal_lib'}",
            "-jar",
            str(jar),
            *(("-dbPath", str(self.db_path)) if self.db_path else ("-inMemory",)),
            # One database for every access key and region, so a client with other
            # (fake) credentials still sees the test's tables.
            "-sharedDb",
            "-port",
            str(self.port),
        ]
        return argv, dict(os.environ), self.work_dir

    def ready(self) -> bool:
        # Any answer from the server will do: an unsigned GET gets a 400 error body.
        try:
            with urllib.request.urlopen(self.endpoint_url, timeout=1):
                return True
        except urllib.error.HTTPError:
            return True


class LocalStack(_Emulator):
    """LocalStack's SQS, S3, KMS, CloudFormation and EventBridge, from
    ``.tools/localstack-venv``."""

    name = "localstack"
    services = "sqs,s3,kms,cloudformation,events"

    def __init__(
        self,
        port: int | None = None,
        *,
        venv: Path | None = None,
        startup_timeout: float = 90.0,
        work_dir: Path | None = None,
    ) -> None:
        super().__init__(port, startup_timeout, work_dir)
        self.venv = venv or TOOLS_DIR / "localstack-venv"

    def command(self) -> tuple[list[str], dict[str, str], Path]:
        python = self.venv / "bin" / "python"
        if not python.is_file():
            raise EmulatorError(f"{python} is missing: run {INSTALL_SCRIPT.relative_to(REPO_ROOT)}")
        root = self.work_dir
        env = {
            # Only what LocalStack needs from ours: no AWS_* or RUNLANE_* leaks in.
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(root),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            # It checks whether it runs in its own container; here it does not.
            "OVERRIDE_IN_DOCKER": "0",
            # Everything it writes goes under the temporary folder.
            "FILESYSTEM_ROOT": str(root / "fs"),
            "LOCALSTACK_VOLUME_DIR": str(root / "volume"),
            "XDG_CACHE_HOME": str(root / "cache"),
            "TMPDIR": str(root),
            "SERVICES": self.services,
            "GATEWAY_LISTEN": f"127.0.0.1:{self.port}",
            # Queue URLs as http://127.0.0.1:<port>/queue/<region>/<account>/<name>: the
            # default host, sqs.<region>.localhost.localstack.cloud, needs DNS.
            "SQS_ENDPOINT_STRATEGY": "path",
            "LOCALSTACK_HOST": f"127.0.0.1:{self.port}",
            # No DNS server (it would want port 53) and no analytics calls home.
            "DNS_ADDRESS": "0",
            "DISABLE_EVENTS": "1",
            "LOCALSTACK_TELEMETRY": "0",
        }
        return [str(python), "-m", "localstack.runtime.main"], env, root

    def ready(self) -> bool:
        with urllib.request.urlopen(f"{self.endpoint_url}/_localstack/health", timeout=1):
            pass
        # The health check answers before a service provider is loaded; the first request
        # of a service loads its provider, so make SQS's and S3's here rather than in the
        # first test.
        for service, first in (("sqs", "list_queues"), ("s3", "list_buckets")):
            client = boto3.client(
                service,  # type: ignore[call-overload]
                endpoint_url=self.endpoint_url,
                region_name=LOCAL_REGION,
                aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                config=PATH_STYLE if service == "s3" else None,
            )
            try:
                getattr(client, first)()
            finally:
                client.close()
        return True


PATH_STYLE = Config(s3={"addressing_style": "path"})
"""S3 requests name the bucket in the path: every bucket is served at one host."""


def backend_environment(dynamodb_endpoint: str, sqs_endpoint: str) -> dict[str, str]:
    """Variables that point boto3 (and ``Runlane.from_env``) at the two emulators.

    ``AWS_ENDPOINT_URL`` (LocalStack) serves every other service the tests use (S3, KMS,
    CloudFormation, EventBridge); the per-service variables take precedence for
    DynamoDB and SQS (botocore >= 1.31)."""
    return {
        "AWS_ENDPOINT_URL": sqs_endpoint,
        "AWS_ENDPOINT_URL_SQS": sqs_endpoint,
        "AWS_ENDPOINT_URL_DYNAMODB": dynamodb_endpoint,
        "AWS_DEFAULT_REGION": LOCAL_REGION,
        **LOCAL_CREDENTIALS,
    }


class AwsLocalBackend:
    """The two emulators seen as one backend: endpoints, environment and reset.

    Works on emulators started here (:class:`AwsLocal`) or elsewhere (docker compose,
    ``python -m tests.aws_local serve``)."""

    def __init__(self, dynamodb_endpoint: str, sqs_endpoint: str) -> None:
        self.dynamodb_endpoint = dynamodb_endpoint
        self.sqs_endpoint = sqs_endpoint

    @classmethod
    def from_env(cls) -> AwsLocalBackend | None:
        """The emulators named by ``RUNLANE_TEST_*_ENDPOINT``, if both are set."""
        dynamodb = os.environ.get(DYNAMODB_ENDPOINT_VARIABLE)
        sqs = os.environ.get(SQS_ENDPOINT_VARIABLE)
        return cls(dynamodb, sqs) if dynamodb and sqs else None

    def environment(self) -> dict[str, str]:
        return backend_environment(self.dynamodb_endpoint, self.sqs_endpoint)

    def client(self, service: str) -> Any:
        endpoint = self.dynamodb_endpoint if service == "dynamodb" else self.sqs_endpoint
        return boto3.client(
            service,  # type: ignore[call-overload]
            endpoint_url=endpoint,
            region_name=LOCAL_REGION,
            aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            config=PATH_STYLE if service == "s3" else None,
        )

    def reset(self) -> None:
        """Delete every table, queue, bucket, stack and EventBridge rule (moto's reset,
        by API).

        Deleted queue names are not reused: a queue deleted within the last 60 s cannot
        be recreated on SQS, so each test also gets a queue prefix of its own."""
        dynamodb = self.client("dynamodb")
        try:
            for page in dynamodb.get_paginator("list_tables").paginate():
                for table in page.get("TableNames", []):
                    dynamodb.delete_table(TableName=table)
        finally:
            dynamodb.close()
        sqs = self.client("sqs")
        try:
            for page in sqs.get_paginator("list_queues").paginate():
                for url in page.get("QueueUrls", []):
                    with contextlib.suppress(sqs.exceptions.QueueDoesNotExist):
                        sqs.delete_queue(QueueUrl=url)
        finally:
            sqs.close()
        self._reset_buckets()
        self._reset_stacks()
        self._reset_rules()

    def _reset_buckets(self) -> None:
        s3 = self.client("s3")
        try:
            for bucket in s3.list_buckets().get("Buckets", []):
                name = bucket["Name"]
                for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
                    listed = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                    if listed:
                        s3.delete_objects(Bucket=name, Delete={"Objects": listed})
                s3.delete_bucket(Bucket=name)
        finally:
            s3.close()

    def _reset_stacks(self) -> None:
        cloudformation = self.client("cloudformation")
        try:
            stacks = [
                s["StackName"]
                for page in cloudformation.get_paginator("list_stacks").paginate()
                for s in page.get("StackSummaries", [])
                if s["StackStatus"] != "DELETE_COMPLETE"
            ]
            for name in stacks:
                cloudformation.delete_stack(StackName=name)
            waiter = cloudformation.get_waiter("stack_delete_complete")
            for name in stacks:
                waiter.wait(StackName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
        finally:
            cloudformation.close()

    def _reset_rules(self) -> None:
        events = self.client("events")
        try:
            for rule in events.list_rules().get("Rules", []):
                targets = events.list_targets_by_rule(Rule=rule["Name"]).get("Targets", [])
                if targets:
                    events.remove_targets(Rule=rule["Name"], Ids=[t["Id"] for t in targets])
                events.delete_rule(Name=rule["Name"])
        finally:
            events.close()


class AwsLocal(AwsLocalBackend):
    """Starts DynamoDB Local and LocalStack (in parallel) and stops both.

    ``die_with_parent``: the two emulators end when the thread that started them does
    (each pytest-xdist worker of ``make test-aws-local`` starts a pair of its own)."""

    def __init__(self, *, work_dir: Path | None = None, die_with_parent: bool = False) -> None:
        self._own_work_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="runlane-aws-local-"))
        self.dynamodb = DynamoDBLocal(work_dir=self.work_dir / "dynamodb-local")
        self.localstack = LocalStack(work_dir=self.work_dir / "localstack")
        for emulator in (self.dynamodb, self.localstack):
            emulator.die_with_parent = die_with_parent
        super().__init__(self.dynamodb.endpoint_url, self.localstack.endpoint_url)

    def start(self) -> AwsLocal:
        # Launch both processes here, then wait for each: the two start-ups overlap.
        errors: list[BaseException] = []
        try:
            for emulator in (self.dynamodb, self.localstack):
                emulator.launch()
        except BaseException:
            self.stop()
            raise

        def run(emulator: _Emulator) -> None:
            try:
                emulator.wait_ready()
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=run, args=(e,)) for e in (self.dynamodb, self.localstack)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            self.stop()
            raise errors[0]
        return self

    def stop(self) -> None:
        self.localstack.stop()
        self.dynamodb.stop()
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> AwsLocal:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# --- command line ------------------------------------------------------------------


def _exported(backend: AwsLocalBackend) -> dict[str, str]:
    return {
        BACKEND_VARIABLE: AWS_LOCAL,
        DYNAMODB_ENDPOINT_VARIABLE: backend.dynamodb_endpoint,
        SQS_ENDPOINT_VARIABLE: backend.sqs_endpoint,
        **backend.environment(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.aws_local", description=__doc__)
    commands = parser.add_subparsers(dest="action", required=True)
    run = commands.add_parser("run", help="start both, run a command against them, stop both")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="the command, after --")
    commands.add_parser("serve", help="start both and print their variables until Ctrl-C")
    args = parser.parse_args(argv)

    started = time.monotonic()
    # SIGTERM (e.g. from make or CI) must still stop the emulators.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with AwsLocal() as backend:
        print(
            f"aws-local: DynamoDB Local on {backend.dynamodb_endpoint}, LocalStack on "
            f"{backend.sqs_endpoint}, ready in {time.monotonic() - started:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        exported = _exported(backend)
        if args.action == "serve":
            for name, value in exported.items():
                print(f"export {name}={value}", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
            return 0
        cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not cmd:
            parser.error("run needs a command after --")
        code = subprocess.call(cmd, env={**os.environ, **exported})
        print(f"aws-local: stopping the emulators (command exited {code})", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
