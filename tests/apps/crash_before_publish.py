"""``python -m tests.apps.crash_before_publish``: trigger one run, then die
between the DynamoDB write and the SQS publish (as a process killed there would).

Prints the run id of the wakeup it was about to publish, then exits with status 1
without publishing anything.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta

from runlane_sqs import Runlane
from runlane_sqs.core.wakeup import Wakeup
from tests.apps.recovery_tasks import PLAIN_TASK, register_recovery

EXIT_CODE = 1


def die_instead_of_publishing(wakeups: Sequence[Wakeup], delay: timedelta | None = None) -> None:
    print(" ".join(w.run_id for w in wakeups), flush=True)
    os._exit(EXIT_CODE)


def main() -> None:
    app = register_recovery(Runlane.from_env())
    app.transport.publish = die_instead_of_publishing  # type: ignore[method-assign,assignment]
    app.trigger(PLAIN_TASK, {"crashed": True})
    raise SystemExit("the publish should have killed this process")


if __name__ == "__main__":
    main()
