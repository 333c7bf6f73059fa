"""Which packages the Lambda zip holds besides runlane-sqs (build-lambda-zip.sh runs this).

The zip leaves out what the python3.11 Lambda runtime already provides (the AWS SDK for
Python and its dependencies) and what only the ``runlane-sqs`` command line imports; every
other entry of pyproject.toml's ``[project] dependencies`` goes in, with its version range.

    python lambda_requirements.py PYPROJECT       the requirements to resolve, one a line
    python lambda_requirements.py --pins REPORT   ``name==version`` of every package in pip's
                                                  install report (``pip install --dry-run
                                                  --report``) that the runtime does not provide

The second step keeps what a kept requirement needs in turn (pip resolves it), so the zip
is complete without a hand-kept list of transitive dependencies.
tests/processes/test_lambda_package.py checks that the Lambda entry points import without
the left-out packages and that the built zip runs with only the runtime's SDK beside it.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

RUNTIME_PROVIDED = frozenset(
    {"boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six", "urllib3"}
)
"""In every python3.11 Lambda runtime: boto3 and what it depends on."""
CLI_ONLY = frozenset({"click", "rich", "python-json-logger"})
"""Imported only under runlane_sqs/cli (rich brings pygments and markdown-it-py)."""
LEFT_OUT = RUNTIME_PROVIDED | CLI_ONLY
USAGE = "usage: lambda_requirements.py PYPROJECT | --pins REPORT"


def canonical_name(requirement: str) -> str:
    """The normalised project name a requirement string starts with (PEP 503)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group()).lower()


def lambda_requirements(pyproject: Path) -> list[str]:
    """``[project] dependencies`` without the ones in ``LEFT_OUT``, as written."""
    dependencies: list[str] = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return [d for d in dependencies if canonical_name(d) not in LEFT_OUT]


def pins(report: Path) -> list[str]:
    """``name==version`` of each package pip would install, except the runtime's."""
    installs = json.loads(report.read_text())["install"]
    found = {canonical_name(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}
    return [
        f"{name}=={version}"
        for name, version in sorted(found.items())
        if name not in RUNTIME_PROVIDED
    ]


def main(argv: list[str]) -> int:
    if len(argv) == 1:
        lines = lambda_requirements(Path(argv[0]))
    elif len(argv) == 2 and argv[0] == "--pins":
        lines = pins(Path(argv[1]))
    else:
        print(USAGE, file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
