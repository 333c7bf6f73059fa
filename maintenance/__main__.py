"""Deprecated container entry, kept for one release (CHANGELOG.md):
``python -m maintenance [--once | --every N]`` is ``runlane-sqs maintenance run``, whose
usage line its help and usage errors show.
"""

import sys

from runlane_sqs.cli import main

main(["maintenance", "run", *sys.argv[1:]], prog_name="runlane-sqs")
