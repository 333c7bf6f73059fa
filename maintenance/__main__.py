"""Container entry for an ECS scheduled task: ``python -m maintenance [--once | --every N]``.

The same as ``runlane-sqs maintenance run``.
"""

import sys

from runlane_sqs.cli import main

main(["maintenance", "run", *sys.argv[1:]])
