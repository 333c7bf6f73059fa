"""The modules one plain run passes through, and how often control changes module.

    python tools/run_path.py [--list]

triggers one run of a task that returns at once on the in-memory app and drains it with
a one-thread worker, after one warm-up run (so imports and caches are not counted), with
a profile hook on every Python call into ``runlane_sqs``. It prints two lines of figures
(``--list`` adds each module in the order first entered):

- ``run path (calling thread)``: from ``app.trigger`` to the drained run: the trigger,
  the worker's loop and what it builds (docs/design/architecture.md, "One run, from
  trigger to succeeded");
- ``run path (all threads)``: the same and every other thread the run uses (the
  worker's handler thread, where the message is handled: the claim, the attempt and its
  recorded outcome), hooked with ``threading.setprofile`` as well as ``sys.setprofile``.

A switch is a call into a module other than the one of the previous call on the same
thread. `make run-path` runs it; tests/core/test_run_path.py holds the second line to
its bounds.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import runlane_sqs
from runlane_sqs.testing import in_memory_app

PACKAGE = Path(runlane_sqs.__file__).parent
MAX_MODULES = 22
"""Package modules a plain run may pass through, on every thread it uses."""
MAX_SWITCHES = 176
"""Switches between modules a plain run may make, on every thread it uses."""


@dataclass
class Trail:
    """The modules entered, in order, and the switches between them, of some threads."""

    modules: list[str] = field(default_factory=list)
    switches: int = 0
    _last: dict[int, str] = field(default_factory=dict)

    def enter(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        filename = frame.f_code.co_filename
        if not filename.startswith(str(PACKAGE)):
            return
        module = Path(filename).relative_to(PACKAGE.parent).as_posix()
        if module not in self.modules:
            self.modules.append(module)
        thread = threading.get_ident()
        if self._last.get(thread) != module:
            self.switches += 1
            self._last[thread] = module


def measure(*, handler_thread: bool) -> tuple[Trail, str]:
    """The path of one plain run (with its handler thread's, if asked) and its status."""
    app = in_memory_app()

    @app.task(name="path.plain")
    def plain(ctx: object, payload: object) -> dict[str, bool]:
        return {"ok": True}

    app.trigger(plain, {"n": 0})
    app.worker(concurrency=1).drain()
    path = Trail()
    if handler_thread:
        threading.setprofile(path.enter)
    sys.setprofile(path.enter)
    try:
        run = app.trigger(plain, {"n": 1})
        app.worker(concurrency=1).drain()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    stored = app.runs.get(run.id)
    return path, stored.status.value if stored else "unknown"


def main(argv: list[str]) -> int:
    calling, _ = measure(handler_thread=False)
    whole, status = measure(handler_thread=True)
    print(
        f"run path (calling thread): {len(calling.modules)} modules, {calling.switches} "
        "switches between modules"
    )
    print(
        f"run path (all threads): {len(whole.modules)} modules, {whole.switches} switches "
        f"between modules, status {status} (bounds: {MAX_MODULES} and {MAX_SWITCHES})"
    )
    if "--list" in argv:
        print("\n".join(whole.modules))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
