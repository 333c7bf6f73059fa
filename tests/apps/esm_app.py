"""The consumer function of the simulated event source mapping test: each invocation (a
process of its own, tests/esm/invocation.py) imports this module as Lambda imports a
handler module, with the variables the test sets (``RUNLANE_*``, the ledger folder) and
those the template sets on the function (``RUNLANE_LAMBDA_TIMEOUT_SECONDS``,
``RUNLANE_LAMBDA_SAFETY_MARGIN_SECONDS``)."""

import os

from runlane_sqs import Runlane
from runlane_sqs.lambdas.consumer import sqs_handler
from tests.apps.esm_tasks import QUEUE_KIND_ENV, register_esm

app = register_esm(Runlane.from_env(), os.environ[QUEUE_KIND_ENV])
handler = sqs_handler(app)
