"""ECS task scale-in protection while attempts are in flight.

On ECS the agent gives each task ``ECS_AGENT_URI``. A worker that starts an attempt with
none in flight asks the agent to protect its task from scale-in
(``PUT {ECS_AGENT_URI}/task-protection/v1/state``), renews the protection while attempts
keep running, and drops it when the last one ends: the service's autoscaling then stops
only idle tasks (infra/runlane.yaml, ``WorkerScaling``; docs/deploy-ecs.md,
"Autoscaling"). The requests go out on a thread of their own, latest state first, so an
attempt never waits for the agent; a failed one is logged and tried again.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping

log = logging.getLogger("runlane_sqs.worker")
ENV_AGENT = "ECS_AGENT_URI"
PROTECTION_MINUTES = 60
"""How long one protection lasts unless renewed."""
RENEW_AFTER_SECONDS = 30 * 60.0
"""A protection still wanted is renewed this long after it was set."""
RETRY_AFTER_SECONDS = 5.0
AGENT_TIMEOUT_SECONDS = 5.0

AgentPut = Callable[[str, bytes], None]
"""Sends one body to a URL of the ECS agent with a ``PUT`` (:func:`put`; tests pass their own)."""


def put(url: str, body: bytes) -> None:
    """The agent's request: a JSON ``PUT`` on the task's own agent (no credentials)."""
    request = urllib.request.Request(
        url, data=body, method="PUT", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=AGENT_TIMEOUT_SECONDS) as response:
        response.read()


class TaskProtection:
    """Keeps the task's scale-in protection in sync with :meth:`set` (busy or idle)."""

    def __init__(self, agent_uri: str, send: AgentPut = put) -> None:
        self._url = f"{agent_uri.rstrip('/')}/task-protection/v1/state"
        self._send = send
        self._wanted = False
        self._applied: bool | None = None
        self._applied_at = 0.0
        self._changed = threading.Condition()
        self._thread = threading.Thread(
            target=self._loop, name="runlane-task-protection", daemon=True
        )
        self._thread.start()

    def set(self, busy: bool) -> None:
        """Protect the task while ``busy`` (an attempt is in flight), not otherwise."""
        with self._changed:
            self._wanted = busy
            self._changed.notify()

    def _loop(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(self._due, timeout=self._wait())
                wanted = self._wanted
                if not self._due():
                    continue
            self._apply(wanted)

    def _due(self) -> bool:
        if self._applied is None or self._applied != self._wanted:
            return self._applied is not None or self._wanted
        return self._wanted and time.monotonic() - self._applied_at >= RENEW_AFTER_SECONDS

    def _wait(self) -> float:
        if self._applied and self._wanted:
            return max(0.0, RENEW_AFTER_SECONDS - (time.monotonic() - self._applied_at))
        return RENEW_AFTER_SECONDS

    def _apply(self, busy: bool) -> None:
        state: dict[str, object] = {"ProtectionEnabled": busy}
        if busy:
            state["ExpiresInMinutes"] = PROTECTION_MINUTES
        try:
            self._send(self._url, json.dumps(state).encode())
        except Exception as exc:  # the agent's answer never stops the worker
            log.warning(
                "task scale-in protection could not be %s: %s", "set" if busy else "dropped", exc
            )
            time.sleep(RETRY_AFTER_SECONDS)
            return
        with self._changed:
            self._applied, self._applied_at = busy, time.monotonic()


def protection_from_env(environ: Mapping[str, str] | None = None) -> TaskProtection | None:
    """The task's protection when the worker runs on ECS (``ECS_AGENT_URI`` set; a worker
    checks the variable itself first, so elsewhere this module is never entered)."""
    agent = (os.environ if environ is None else environ).get(ENV_AGENT, "").strip()
    return TaskProtection(agent) if agent else None
