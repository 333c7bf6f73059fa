"""The consumer's time settings: how long before the function's timeout it stops
starting records, and the check that a timeout leaves room to work
(docs/deploy-lambda.md, "Time limits").

Lambda tells a function neither its timeout nor a margin: the template passes both as
variables (``RUNLANE_LAMBDA_TIMEOUT_SECONDS``, ``RUNLANE_LAMBDA_SAFETY_MARGIN_SECONDS``),
so a stack whose timeout leaves too little time fails at its first cold start with a
clear error; without the timeout variable, the first invocation's remaining time is
checked and a short one logged as an ERROR.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from runlane_sqs.core.config import parse_number
from runlane_sqs.core.errors import ConfigurationError

log = logging.getLogger("runlane_sqs.lambda")

ENV_SAFETY_MARGIN_SECONDS = "RUNLANE_LAMBDA_SAFETY_MARGIN_SECONDS"
ENV_TIMEOUT_SECONDS = "RUNLANE_LAMBDA_TIMEOUT_SECONDS"
DEFAULT_SAFETY_MARGIN_SECONDS = 10.0
"""Start no record once less than this remains before the function's timeout."""
MIN_WORKING_SECONDS = 10.0
"""The least time a timeout must leave, past the margin, for records to start in."""


class LambdaContext(Protocol):
    """The part of the Lambda context object the handlers use: the time left."""

    def get_remaining_time_in_millis(self) -> int: ...


@dataclass
class Deadline:
    """The margin, the function's timeout if known, and whether a short first
    invocation was reported already (once per function instance)."""

    margin_seconds: float
    timeout_seconds: float | None = None
    _checked: bool = field(default=False, repr=False)

    @classmethod
    def build(
        cls,
        margin_seconds: float | None,
        timeout_seconds: float | None,
        environ: Mapping[str, str] | None = None,
    ) -> Deadline:
        """Arguments win over the variables; raises :class:`ConfigurationError` for a
        bad value or a timeout that leaves less than the margin plus
        ``MIN_WORKING_SECONDS``."""
        env = os.environ if environ is None else environ
        margin = _seconds(margin_seconds, ENV_SAFETY_MARGIN_SECONDS, "safety_margin_seconds", env)
        timeout = _seconds(timeout_seconds, ENV_TIMEOUT_SECONDS, "timeout_seconds", env)
        deadline = cls(DEFAULT_SAFETY_MARGIN_SECONDS if margin is None else margin, timeout)
        if timeout is not None and timeout < deadline.least_timeout:
            raise ConfigurationError(
                f"a function timeout of {timeout:g} s leaves "
                f"{max(0.0, timeout - deadline.margin_seconds):g} s to start records after "
                f"the {deadline.margin_seconds:g} s safety margin; give the function at "
                f"least {deadline.least_timeout:g} s (ConsumerTimeoutSeconds) or a smaller "
                f"margin (ConsumerSafetyMarginSeconds, {ENV_SAFETY_MARGIN_SECONDS})"
            )
        return deadline

    @property
    def least_timeout(self) -> float:
        return self.margin_seconds + MIN_WORKING_SECONDS

    def check_first(self, remaining_seconds: float) -> None:
        """Log once per instance when an invocation starts with less than the margin
        plus the working window: the function's timeout is too short for the margin."""
        if self._checked or self.timeout_seconds is not None:
            return
        self._checked = True
        if remaining_seconds < self.least_timeout:
            log.error(
                "this invocation started with %.1f s before the function's timeout, less "
                "than the %g s safety margin plus %g s to work in: raise the timeout to at "
                "least %g s or lower the margin (%s)",
                remaining_seconds,
                self.margin_seconds,
                MIN_WORKING_SECONDS,
                self.least_timeout,
                ENV_SAFETY_MARGIN_SECONDS,
            )


def _seconds(given: float | None, variable: str, name: str, env: Mapping[str, str]) -> float | None:
    """``given``, else the variable's number of seconds, else ``None``; never negative."""
    if given is not None:
        if not math.isfinite(given) or given < 0:
            raise ConfigurationError(f"{name} must be a finite number of seconds >= 0")
        return float(given)
    text = env.get(variable, "").strip()
    if not text:
        return None
    value = parse_number(variable, text, float)
    if value < 0:
        raise ConfigurationError(f"{variable} must not be negative, not {text!r}")
    return value
