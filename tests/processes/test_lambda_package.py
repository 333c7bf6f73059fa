"""The Lambda package: the entry points import without the CLI's packages, the zip the build
script makes is small and runs with nothing but the runtime's boto3 beside it, and the
shell completion docs/operations.md documents works.

The python3.11 Lambda runtime provides boto3; click and rich (with pygments and
markdown-it) are for the ``runlane-sqs`` command line only, so the zip leaves them out
(docs/deploy-lambda.md, "Package and deploy"). The build downloads pynamodb and tenacity
from the package index (about 10 s).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "localstack" / "package" / "build-lambda-zip.sh"
REQUIREMENTS_SCRIPT = REPO / "localstack" / "package" / "lambda_requirements.py"
ZIP_LIMIT_BYTES = 5_000_000
BUILD_TIMEOUT_SECONDS = 100

CLI_ONLY = ("click", "rich", "pygments", "markdown_it", "mdurl", "pythonjsonlogger")
"""Imported by runlane_sqs/cli only; not in the zip."""
EXTRAS = ("moto", "aioboto3", "aiobotocore")
"""Optional extras (local, async); not in the zip."""
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "six", "urllib3")
"""What the Lambda runtime has: the only packages beside the unzipped code."""
ENTRY_POINTS = (
    "runlane_sqs.lambdas.consumer",
    "runlane_sqs.lambdas.maintenance",
    "runlane_sqs.aws_lambda",
    "maintenance",
    "maintenance.lambda_handler",
)

# Run in a child interpreter: refuses the packages named in argv[1], imports the modules
# named in argv[2], then handles one SQS batch with the consumer on an in-memory app.
CHILD = """
import importlib, importlib.abc, json, sys

blocked = set(filter(None, sys.argv[1].split(",")))


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ImportError(f"{name} is not in the Lambda package")
        return None


sys.meta_path.insert(0, Refuse())
for module in filter(None, sys.argv[2].split(",")):
    importlib.import_module(module)

import runlane_sqs
from runlane_sqs.lambdas.consumer import sqs_handler
from runlane_sqs.testing import in_memory_app

app = in_memory_app()


@app.task(name="hello")
def hello(ctx, payload):
    return f"hello, {payload}"


class Context:
    def get_remaining_time_in_millis(self):
        return 60_000


run = app.trigger("hello", "Ada")
event = {"Records": [
    {"messageId": m.message_id, "receiptHandle": m.receipt, "body": m.body,
     "attributes": {"ApproximateReceiveCount": str(m.receive_count)},
     "eventSource": "aws:sqs",
     "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:runlane-test-default"}
    for m in app.transport.receive("default", 10, 0)
]}
print(json.dumps({
    "response": sqs_handler(app)(event, Context()),
    "result": app.runs.get(run.id).result,
    "package": runlane_sqs.__file__,
    "path": sys.path,
    "loaded": sorted({name.partition(".")[0] for name in sys.modules}),
}))
"""


def run_child(cwd: Path, *flags: str, prelude: str = "", modules: tuple[str, ...]) -> Any:
    """Runs ``CHILD`` with the CLI's packages and the extras refused; its JSON report."""
    done = subprocess.run(
        [
            sys.executable,
            *flags,
            "-c",
            prelude + CHILD,
            ",".join(CLI_ONLY + EXTRAS),
            ",".join(modules),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        env={**os.environ, "AWS_DEFAULT_REGION": "us-east-1"},
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["response"] == {"batchItemFailures": []}
    assert report["result"] == "hello, Ada"
    assert not set(report["loaded"]) & {*CLI_ONLY, *EXTRAS}
    return report


def build_zip(out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(BUILD_SCRIPT), str(out)],
        env={**os.environ, "RUNLANE_SRC": str(REPO), "PYTHON": sys.executable, **env},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_SECONDS,
        check=False,
    )


@pytest.fixture(scope="module")
def lambda_zip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The zip the build script makes from this checkout, and what the script printed."""
    out = tmp_path_factory.mktemp("package") / "runlane-lambda.zip"
    done = build_zip(out)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stdout


def test_the_entry_points_import_and_handle_a_batch_without_the_cli_packages() -> None:
    report = run_child(REPO, modules=ENTRY_POINTS)
    assert Path(report["package"]).is_relative_to(REPO)


def test_the_cli_packages_are_still_installed_with_runlane_sqs() -> None:
    """The Lambda zip leaves click and rich out; ``pip install runlane-sqs`` does not."""
    done = subprocess.run(
        [Path(sys.executable).parent / "runlane-sqs", "--version"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "runlane-sqs" in done.stdout


def test_the_build_prints_the_zip_size_within_the_limit(lambda_zip: tuple[Path, str]) -> None:
    out, printed = lambda_zip
    size = out.stat().st_size
    assert size <= ZIP_LIMIT_BYTES
    assert f"built {out}: {size} bytes ({size / 1_000_000:.2f} MB" in printed
    assert "packages: runlane-sqs cronsim==" in printed


def test_the_zip_holds_the_entry_points_and_neither_the_sdk_nor_the_cli_packages(
    lambda_zip: tuple[Path, str],
) -> None:
    names = zipfile.ZipFile(lambda_zip[0]).namelist()
    for path in (
        "runlane_sqs/lambdas/consumer.py",
        "runlane_sqs/lambdas/maintenance.py",
        "maintenance/lambda_handler.py",
        "local_jobs.py",
        "pynamodb/models.py",
        "tenacity/__init__.py",
    ):
        assert path in names
    tops = {name.split("/")[0] for name in names}
    assert not tops & {*CLI_ONLY, *EXTRAS, *RUNTIME_PROVIDED, "six.py", "bin"}


def test_the_zip_carries_bytecode_python_uses_as_it_is(lambda_zip: tuple[Path, str]) -> None:
    """/var/task is read-only: without usable .pyc files every cold start compiles the
    package again. Unchecked-hash bytecode (PEP 552 flags 0b01) is used whatever the
    files' modification times."""
    archive = zipfile.ZipFile(lambda_zip[0])
    tag = sys.implementation.cache_tag
    for source in ("runlane_sqs/lambdas/consumer", "runlane_sqs/core/machine", "tenacity/__init__"):
        folder, _, module = source.rpartition("/")
        header = archive.read(f"{folder}/__pycache__/{module}.{tag}.pyc")[:8]
        assert int.from_bytes(header[4:8], "little") == 1


def test_the_unzipped_package_runs_with_only_the_runtime_sdk_beside_it(
    lambda_zip: tuple[Path, str], tmp_path: Path
) -> None:
    code = tmp_path / "task"  # what Lambda unpacks into /var/task
    zipfile.ZipFile(lambda_zip[0]).extractall(code)
    runtime = tmp_path / "runtime"  # the runtime's boto3 and its dependencies, from the venv
    runtime.mkdir()
    for module in RUNTIME_PROVIDED:
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None
        source = Path(spec.origin)
        source = source.parent if source.name == "__init__.py" else source
        (runtime / source.name).symlink_to(source)
    # -I -S: no site-packages, no PYTHONPATH, no current directory; only these two.
    prelude = f"import sys; sys.path[:0] = [{str(code)!r}, {str(runtime)!r}]\n"
    report = run_child(tmp_path, "-I", "-S", prelude=prelude, modules=(*ENTRY_POINTS, "local_jobs"))
    assert Path(report["package"]).is_relative_to(code)
    assert not [p for p in report["path"] if "site-packages" in p]


def test_the_build_fails_over_the_size_limit(tmp_path: Path) -> None:
    out = tmp_path / "runlane-lambda.zip"
    done = build_zip(out, RUNLANE_ZIP_LIMIT_BYTES="100000")
    assert done.returncode != 0
    size = out.stat().st_size
    assert f"built {out}: {size} bytes" in done.stdout
    assert f"is {size} bytes, over the limit of 100000" in done.stderr


def test_the_deploy_guide_installs_what_the_build_script_installs() -> None:
    """docs/deploy-lambda.md's recipe names the same requirements as pyproject.toml."""
    done = subprocess.run(
        [sys.executable, str(REQUIREMENTS_SCRIPT), str(REPO / "pyproject.toml")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    requirements = done.stdout.split()
    assert requirements, "no requirement left for the Lambda zip"
    guide = (REPO / "docs" / "deploy-lambda.md").read_text()
    for requirement in requirements:
        assert f'"{requirement}"' in guide


def documented_completions() -> dict[str, str]:
    """Shell -> the ``_RUNLANE_SQS_COMPLETE`` value docs/operations.md gives for it."""
    text = (REPO / "docs" / "operations.md").read_text()
    section = re.split(r"\n##+ ", text.split("\n### Shell completion\n", 1)[1])[0]
    found = re.findall(r"_RUNLANE_SQS_COMPLETE=(\w+)_source runlane-sqs", section)
    return {shell: f"{shell}_source" for shell in found}


@pytest.mark.parametrize(
    ("shell", "registers"),
    [
        ("bash", "complete -o nosort -F _runlane_sqs_completion runlane-sqs"),
        ("zsh", "compdef _runlane_sqs_completion runlane-sqs"),
        ("fish", "complete --no-files --command runlane-sqs"),
    ],
)
def test_the_documented_completion_command_prints_the_shell_script(
    shell: str, registers: str
) -> None:
    value = documented_completions()[shell]
    done = subprocess.run(
        [Path(sys.executable).parent / "runlane-sqs"],
        env={**os.environ, "_RUNLANE_SQS_COMPLETE": value},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert registers in done.stdout


def test_completion_offers_commands_and_choices() -> None:
    """What the bash script asks the command for when you press Tab."""

    def complete(line: str) -> list[str]:
        words = line.split(" ")
        done = subprocess.run(
            [Path(sys.executable).parent / "runlane-sqs"],
            env={
                **os.environ,
                "_RUNLANE_SQS_COMPLETE": "bash_complete",
                "COMP_WORDS": line,
                "COMP_CWORD": str(len(words) - 1),
            },
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert complete("runlane-sqs runs ca") == ["plain,cancel"]
    assert "plain,failed" in complete("runlane-sqs runs list --status ")
