"""Tokens: ``app.tokens`` creates durable external decisions and records them."""

from __future__ import annotations

import secrets
from dataclasses import replace
from datetime import datetime

from runlane_sqs.core import telemetry as t
from runlane_sqs.core import tokens as core
from runlane_sqs.core.clock import Clock, Duration, to_timedelta
from runlane_sqs.core.model import JSON, is_run_id
from runlane_sqs.core.redaction import digest
from runlane_sqs.core.tokens import Token, TokenAlreadyDecided, TokenNotFound, TokenStatus
from runlane_sqs.core.values import ValueField, ValuePlace
from runlane_sqs.engine.observing import Observer
from runlane_sqs.engine.reports import JobReport
from runlane_sqs.engine.resuming import RESUME_BATCH, Resumer, ResumeReport
from runlane_sqs.engine.values import Values
from runlane_sqs.ports.tokens import TokenStore


class TokensApi:
    """Create, read and decide tokens. A token is decided once; it stays readable."""

    def __init__(
        self,
        tokens: TokenStore,
        resumer: Resumer,
        values: Values,
        clock: Clock,
        environment: str,
        observer: Observer,
    ) -> None:
        self._environment = environment
        self._tokens = tokens
        self._resumer = resumer
        self._values = values
        self._clock = clock
        self._observer = observer

    def create(self, *, timeout: Duration | None = None, metadata: JSON = None) -> Token:
        """A new pending token with an unguessable id; maintenance times it out after
        ``timeout`` (if given)."""
        token_id = secrets.token_hex(16)
        place = ValuePlace.in_token(token_id, ValueField.METADATA)
        prepared = self._values.prepare(metadata, what="token metadata", place=place)
        now = self._clock.now()
        timeout_at = now + to_timedelta(timeout, "timeout") if timeout is not None else None
        kept = self._values.keep(prepared).value
        token = core.new_token(token_id, self._environment, now, timeout_at, kept)
        self._tokens.create_token(token)
        return replace(token, metadata=metadata)

    def get(self, token_id: str) -> Token:
        """The token as stored, its value and metadata opened; raises
        :class:`~runlane_sqs.core.tokens.TokenNotFound`."""
        token = self._tokens.get_token(token_id)
        if token is None:
            raise TokenNotFound(token_id)
        return self._values.open_token(token)

    def complete(self, token_id: str, value: JSON = None) -> Token:
        """Record the decision and resume a first batch of waiting runs at once; raises
        :class:`~runlane_sqs.core.tokens.TokenAlreadyDecided` if it was decided before."""
        place = ValuePlace.in_token(token_id, ValueField.VALUE)
        kept = self._values.seal(value, what="token value", place=place).value
        return replace(self._decide(token_id, TokenStatus.COMPLETED, kept), value=value)

    def time_out(self, token_id: str) -> Token:
        """Decide the token as ``timed_out`` (what maintenance does at its timeout)."""
        return self._decide(token_id, TokenStatus.TIMED_OUT, None)

    def _decide(self, token_id: str, status: TokenStatus, value: JSON) -> Token:
        """One conditional write, no read: the store refuses a token that is not pending
        (``TokenAlreadyDecided``) or does not exist (``TokenNotFound``)."""
        if not is_run_id(token_id):  # token ids are 32 hex digits, like run ids
            raise TokenNotFound(token_id)
        # a token id is a bearer secret: spans carry its digest only
        attributes = {t.TOKEN_ID: digest(token_id), t.OUTCOME: status.value}
        with self._observer.spanning(t.DECIDE_TOKEN, t.SpanKind.PRODUCER, attributes) as span:
            decision = core.TokenDecision.of(token_id, status, value, self._clock.now(), span.trace)
            stored = self._tokens.decide_token(decision)
            resumed = self.resume(stored, limit=RESUME_BATCH).resumed
            span.set({t.RESUMED: resumed})
        return stored

    def maintain(self, listed: Token, now: datetime, job: JobReport, limit: int) -> None:
        """Maintenance's look at a listed token: time it out once past its timeout,
        resume up to ``limit`` waiters of a decided one."""
        job.examined += 1
        token = self._tokens.get_token(listed.id)
        if token is None:
            job.skipped += 1
            return
        if not token.is_decided:
            if token.timeout_at is None or token.timeout_at > now:
                job.skipped += 1
                return
            try:
                token = self._tokens.decide_token(
                    core.TokenDecision.of(token.id, TokenStatus.TIMED_OUT, None, now)
                )
            except TokenAlreadyDecided as lost:
                job.conflicts += 1
                token = lost.token
            else:
                job.acted += 1
        job.published += self.resume(token, limit=limit).resumed

    def resume(self, token: Token, *, limit: int) -> ResumeReport:
        """Resume up to ``limit`` runs waiting on a decided token (their wakeups carry its
        decision's trace); once none is left, the token leaves maintenance's agenda."""
        report = self._resumer.resume_waiters(self._resumer.token_resumption(token), limit=limit)
        if not report.more:
            self._tokens.finish_token_resume(token.id)
        return report
