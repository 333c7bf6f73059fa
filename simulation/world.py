"""The simulated world: one seeded PRNG, one virtual clock, one event queue, and the
processes that run in it, each a greenlet.

Every simulated process (a worker, a maintenance job, a producer, an operator) runs our
real code on a greenlet of its own. Whenever that code would wait (a request to a
simulated service, ``time.sleep``), it hands control back to the scheduler here with
the virtual time it wants to continue at; the scheduler runs whatever is due next.
Only one greenlet runs at a time and every choice (which event goes first at equal
times, how long a request takes, which fault strikes) comes from :attr:`World.rng`, so
one seed gives one history: the same events in the same order, byte for byte
(:attr:`World.digest`).

Time here is whole microseconds since :data:`EPOCH`. Each process reads it through its
own :class:`SimClock`, which may run ahead or behind by the process's skew.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

import greenlet

EPOCH = datetime(2031, 1, 1, tzinfo=UTC)
"""Virtual time zero."""
TRACE_KEPT = 400
TRACE_KEPT_PER_RUN = 40
"""Trace lines kept for a failure's report (all of them count toward the digest)."""


@dataclass(eq=False)
class Process:
    """One simulated process: its name, its clock's skew, whether it is alive, and until
    when it is frozen (a pause: a long GC, a stopped VM). A crash bumps ``incarnation``:
    the scheduler drops every wakeup of an earlier incarnation, so its greenlets never
    run again (as after ``SIGKILL``)."""

    name: str
    skew_us: int = 0
    incarnation: int = 0
    alive: bool = True
    frozen_until_us: int = 0
    greenlets: list[greenlet.greenlet] = field(default_factory=list)


@dataclass(slots=True)
class _Event:
    """What happens at a time: a greenlet resumed (with a value) or an action run."""

    process: Process | None
    incarnation: int
    resume: greenlet.greenlet | None
    action: Callable[[], None] | None
    value: Any = None


_Queued = tuple[int, float, int, _Event]
"""An event in the queue: (when, a random tie-break, the order it was queued, the event)."""


class World:
    """The scheduler: virtual time, the seeded PRNG, the event queue, the trace."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now_us = 0
        self._events: list[_Queued] = []
        self._seq = count()
        self._hub = greenlet.getcurrent()
        self.current: Process | None = None
        """The process whose greenlet runs now (``None``: the scheduler itself)."""
        self.trace: deque[str] = deque(maxlen=TRACE_KEPT)
        self.about: dict[str, deque[str]] = {}
        """The last lines of the trace about each run, by its id (requests on its record)."""
        self._digest = hashlib.sha256()
        self.steps = 0
        self.graveyard: list[greenlet.greenlet] = []
        """Greenlets of crashed processes: kept, never resumed (a collected greenlet
        would run its ``finally`` blocks, which a killed process never does)."""
        self._spawned: list[greenlet.greenlet] = []
        self.closed = False

    # time ------------------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        return EPOCH + timedelta(microseconds=self.now_us)

    @property
    def seconds(self) -> float:
        """Virtual seconds since :data:`EPOCH` (what ``time.monotonic`` reads here)."""
        return self.now_us / 1_000_000

    # the trace ---------------------------------------------------------------------------

    def note(self, text: str, about: str | tuple[str, ...] = ()) -> None:
        """One line of the history: when, who, what. Every line counts toward the digest. A
        line ``about`` runs (their ids) is also kept among each one's last lines."""
        who = self.current.name if self.current is not None else "world"
        line = f"{self.now_us / 1_000_000:12.6f} {who:<12} {text}"
        self.trace.append(line)
        for run_id in (about,) if isinstance(about, str) else about:
            kept = self.about.get(run_id)
            if kept is None:
                kept = self.about[run_id] = deque(maxlen=TRACE_KEPT_PER_RUN)
            kept.append(line)
        self._digest.update(line.encode("utf-8", "backslashreplace"))
        self._digest.update(b"\n")

    @property
    def digest(self) -> str:
        """The history so far, as a hash: equal for equal seeds."""
        return self._digest.hexdigest()

    # processes ---------------------------------------------------------------------------

    def spawn(self, process: Process, run: Callable[[], None], *, after_us: int = 0) -> None:
        """Start ``run`` on a new greenlet of ``process``, ``after_us`` from now."""
        glet = greenlet.greenlet(lambda *_: run(), parent=self._hub)
        process.greenlets.append(glet)
        self._spawned.append(glet)
        self._push(self.now_us + after_us, process, glet, None)

    def call(self, process: Process | None, after_us: int, action: Callable[[], None]) -> None:
        """Run ``action`` (briefly, on the scheduler; it must not wait) ``after_us`` from
        now, unless ``process`` has crashed since."""
        self._push(self.now_us + after_us, process, None, action)

    def crash(self, process: Process) -> None:
        """Kill ``process`` at once: none of its greenlets runs again."""
        process.incarnation += 1
        process.alive = False
        self.graveyard.extend(process.greenlets)
        process.greenlets = []
        self.note(f"crash {process.name}")

    def revive(self, process: Process) -> None:
        process.alive = True
        self.note(f"restart {process.name}")

    def freeze(self, process: Process, for_us: int) -> None:
        """Pause ``process``: nothing of it runs for ``for_us``."""
        process.frozen_until_us = max(process.frozen_until_us, self.now_us + for_us)
        self.note(f"freeze {process.name} for {for_us / 1_000_000:.3f}s")

    # waiting (called on a process's greenlet) ------------------------------------------

    def wait(self, delay_us: int) -> Any:
        """Suspend the calling greenlet for ``delay_us`` of virtual time; returns the value
        its waker passed (``None`` for a plain delay)."""
        glet = greenlet.getcurrent()
        if glet is self._hub:
            raise RuntimeError("the scheduler cannot wait: only a process's greenlet can")
        if self.closed:
            raise greenlet.GreenletExit
        self._push(self.now_us + max(0, delay_us), self.current, glet, None)
        return self._hub.switch()

    def park(self) -> Any:
        """Suspend the calling greenlet until :meth:`wake` resumes it."""
        if self.closed:
            raise greenlet.GreenletExit
        return self._hub.switch()

    def close(self) -> None:
        """End the history: every greenlet still suspended is unwound now (a wait it meets
        on the way out ends it at once), so none is left for the garbage collector to
        unwind later, in the middle of another history."""
        self.closed = True
        for glet in self._spawned:
            if not glet.dead:
                glet.throw(greenlet.GreenletExit)
        self._spawned.clear()
        self.graveyard.clear()
        self._events.clear()

    def wake(self, glet: greenlet.greenlet, process: Process | None, value: Any = None) -> None:
        """Resume a parked greenlet now (after what is already due now)."""
        self._push(self.now_us, process, glet, None, value)

    # the loop ----------------------------------------------------------------------------

    def _push(
        self,
        at_us: int,
        process: Process | None,
        glet: greenlet.greenlet | None,
        action: Callable[[], None] | None,
        value: Any = None,
    ) -> None:
        incarnation = process.incarnation if process is not None else 0
        event = _Event(process, incarnation, glet, action, value)
        heapq.heappush(self._events, (at_us, self.rng.random(), next(self._seq), event))

    def run_until(self, end_us: int, after_step: Callable[[], None] | None = None) -> None:
        """Run every event due before ``end_us``; ``after_step`` is called after each (the
        invariants checked as the history goes)."""
        while self._events and self._events[0][0] < end_us:
            queued = heapq.heappop(self._events)
            at_us, event = queued[0], queued[3]
            process = event.process
            if process is not None:
                if event.incarnation != process.incarnation:
                    continue  # a wakeup of a crashed incarnation: never delivered
                if process.frozen_until_us > at_us:
                    thawed = (process.frozen_until_us, queued[1], queued[2], event)
                    heapq.heappush(self._events, thawed)
                    continue
            self.now_us = max(self.now_us, at_us)
            self.current = process
            self.steps += 1
            if event.action is not None:
                event.action()
            elif event.resume is not None and not event.resume.dead:
                event.resume.switch(event.value)
            self.current = None
            if after_step is not None:
                after_step()
        self.now_us = max(self.now_us, end_us)


class SimClock:
    """A process's clock: virtual time plus the process's skew."""

    def __init__(self, world: World, process: Process) -> None:
        self._world = world
        self._process = process

    def now(self) -> datetime:
        return EPOCH + timedelta(microseconds=self._world.now_us + self._process.skew_us)


class Signal:
    """Where one greenlet of a process waits until told (:meth:`notify`) or until its
    timeout passes, whichever comes first; it is resumed once either way."""

    def __init__(self, world: World, process: Process) -> None:
        self._world = world
        self._process = process
        self._waiter: greenlet.greenlet | None = None
        self._round = 0

    def wait(self, timeout_us: int) -> None:
        self._round += 1
        waiting_round = self._round
        self._waiter = greenlet.getcurrent()
        self._world.call(self._process, max(0, timeout_us), lambda: self._time_out(waiting_round))
        self._world.park()

    def _time_out(self, waiting_round: int) -> None:
        if self._waiter is not None and self._round == waiting_round:
            waiter, self._waiter = self._waiter, None
            waiter.switch()

    def notify(self) -> None:
        if self._waiter is not None:
            waiter, self._waiter = self._waiter, None
            self._world.wake(waiter, self._process)
