"""The Celery shop's tests (``tests/apps/celery_shop``) pass unchanged on Celery and on
runlane-sqs's compatibility layer: each variant is one pytest process running the same
test module, the only change being which app ``celery_app`` is (``CELERY_SHOP_APP``).

On the emulators the runs are worked by a real ``runlane-sqs worker`` process; the
emulators are the session's (moto, or DynamoDB Local + LocalStack with
``RUNLANE_TEST_BACKEND=aws-local``), reached through the variables ``backend_env`` sets.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.apps.celery_shop import switch
from tests.emulators import REPO_ROOT, subprocess_env

SHOP_TESTS = "tests/apps/celery_shop/test_shop.py"
SHOP_TEST_COUNT = 7
RUN_TIMEOUT_SECONDS = 240

pytestmark = pytest.mark.timeout(RUN_TIMEOUT_SECONDS + 30)


def run_shop_tests(env: dict[str, str], variant: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", SHOP_TESTS, "-q", "-p", "no:cacheprovider"],
        cwd=REPO_ROOT,
        env={**env, switch.VARIABLE: variant},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-6000:]
    return output


@pytest.mark.parametrize("variant", [switch.CELERY, switch.RUNLANE_MEMORY])
def test_the_shop_tests_pass_without_aws(variant: str) -> None:
    output = run_shop_tests(subprocess_env({}), variant)

    assert f"{SHOP_TEST_COUNT} passed" in output


@pytest.mark.integration
def test_the_shop_tests_pass_with_a_real_worker_on_the_emulators(
    backend_env: dict[str, str],
) -> None:
    output = run_shop_tests(subprocess_env(backend_env), switch.RUNLANE_AWS)

    assert f"{SHOP_TEST_COUNT} passed" in output
