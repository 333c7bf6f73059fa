"""Records that task handlers of the process tests keep outside the system: one file per
process, appended to line by line."""

from __future__ import annotations

import os
from pathlib import Path


def append_line(path: Path, line: str) -> None:
    """One ``write`` on an ``O_APPEND`` file per line: lines of several threads never
    interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
