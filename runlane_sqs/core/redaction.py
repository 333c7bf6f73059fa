"""What stored and logged text may reveal: a redaction hook for failures, and digests
of secrets that logs name.

A failure's message and traceback are stored with the run and shown to operators; a
handler's exception may carry a password, a card number or a customer's data. An app
given ``redact=`` (a function from text to text) passes every failure message and
traceback through it before anything is stored or logged. Token ids are bearer
secrets (whoever knows one can complete it), so logs name a token by a short digest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

Redact = Callable[[str], str]
"""Turns a failure's message or traceback into what may be stored and logged."""
LOGGED_MESSAGE_CHARS = 200
"""Characters of a failure's message a log line shows (the run keeps up to 1,000)."""


def apply_redaction(redact: Redact | None, text: str) -> str:
    """``redact(text)``; a hook that raises or returns something else than a string
    hides the whole text rather than storing it unredacted."""
    if redact is None or not text:
        return text
    try:
        redacted = redact(text)
    except Exception as exc:  # a user's hook: never let it lose the outcome
        return f"[redacted: the redact hook raised {type(exc).__name__}]"
    return redacted if isinstance(redacted, str) else "[redacted: the redact hook returned no text]"


def digest(secret: str) -> str:
    """A short, stable stand-in for a secret in logs (12 hex digits of SHA-256): equal
    secrets match across log lines, and the secret cannot be read back."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def shortened(text: str, limit: int = LOGGED_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
