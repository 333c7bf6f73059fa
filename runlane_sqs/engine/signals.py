"""Signals: ``app.signals.send(key, payload)`` wakes the runs waiting on ``key`` now."""

from __future__ import annotations

from runlane_sqs.core import telemetry as t
from runlane_sqs.core.model import JSON, EventType, WaitKind
from runlane_sqs.core.names import check_key
from runlane_sqs.core.redaction import digest
from runlane_sqs.engine.observing import Observer
from runlane_sqs.engine.resuming import Resumer, Resumption
from runlane_sqs.engine.values import Values


class SignalsApi:
    """A signal is a one-time wakeup: it is not stored for runs that wait later."""

    def __init__(self, resumer: Resumer, values: Values, observer: Observer) -> None:
        self._resumer = resumer
        self._values = values
        self._observer = observer

    def send(self, key: str, payload: JSON = None) -> int:
        """Wake every run waiting on ``key``; returns how many were woken. Each woken
        run's next attempt gets ``payload`` at the same ``ctx.wait_for_signal``."""
        key = check_key("signal", key)
        self._values.check(payload, what="signal payload")  # refused before any write
        result: JSON = {"status": "received", "payload": payload}
        kept = self._values.seal_unbound(result, what="signal payload")
        attributes = {t.SIGNAL: digest(key)}  # keys may name customers: a digest only
        with self._observer.spanning(t.SEND_SIGNAL, t.SpanKind.PRODUCER, attributes) as span:
            resumption = Resumption(
                kind=WaitKind.SIGNAL,
                target=key,
                result=result,
                event=EventType.SIGNAL_RECEIVED,
                data={"key": key},
                trace=span.trace,
                kept=kept,
            )
            resumed = self._resumer.resume_waiters(resumption, limit=None).resumed
            span.set({t.RESUMED: resumed})
        return resumed
