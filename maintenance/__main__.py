"""Deprecated container entry, kept for one release (CHANGELOG.md):
``python -m maintenance [--once | --every N]`` is ``runlane-sqs maintenance run``.
"""

import sys

from runlane_sqs.cli import main

main(["maintenance", "run", *sys.argv[1:]])
