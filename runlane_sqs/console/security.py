"""Who may use the console, and which forms it accepts (docs/console.md, "Security").

One access token per console process: random unless ``RUNLANE_CONSOLE_TOKEN`` sets it.
The first request carries it as ``?token=...`` (the URL the console prints, as Jupyter
does); the console answers with an ``HttpOnly``, ``SameSite=Strict`` cookie and a
redirect to the same page without the token, so the token leaves the address bar and
the history. Scripts may send ``Authorization: Bearer <token>`` instead.

Every form carries a CSRF token derived from the access token (HMAC-SHA256), so a page
of another site cannot post to the console even in a browser holding the cookie; a
post whose ``Origin`` header names another site is refused too. Comparisons are
constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from runlane_sqs.core.errors import ConfigurationError

ENV_TOKEN = "RUNLANE_CONSOLE_TOKEN"
COOKIE = "runlane_console"
CSRF_FIELD = "csrf"
MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 256


def access_token(environ: Mapping[str, str] | None = None) -> str:
    """``RUNLANE_CONSOLE_TOKEN``, or a new random token (43 URL-safe characters)."""
    env = os.environ if environ is None else environ
    fixed = env.get(ENV_TOKEN, "")
    if not fixed:
        return secrets.token_urlsafe(32)
    if not MIN_TOKEN_CHARS <= len(fixed) <= MAX_TOKEN_CHARS or not fixed.isascii():
        raise ConfigurationError(
            f"{ENV_TOKEN} must be {MIN_TOKEN_CHARS} to {MAX_TOKEN_CHARS} ASCII characters"
        )
    if not fixed.isprintable() or " " in fixed:
        raise ConfigurationError(f"{ENV_TOKEN} must not hold spaces or control characters")
    return fixed


@dataclass(frozen=True)
class Guard:
    """Checks the access token and the CSRF token of one console."""

    token: str

    @property
    def csrf(self) -> str:
        """The CSRF token every form of this console carries."""
        return hmac.new(self.token.encode(), b"runlane-console-csrf", hashlib.sha256).hexdigest()

    def allows(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(
            presented.encode("utf-8", "surrogatepass"), self.token.encode()
        )

    def presented(self, cookies: Mapping[str, str], headers: Mapping[str, str]) -> str | None:
        """The token a request carries: its cookie, else a bearer header."""
        if COOKIE in cookies:
            return cookies[COOKIE]
        scheme, _, value = headers.get("authorization", "").partition(" ")
        return value.strip() if scheme.lower() == "bearer" else None

    def form_allowed(self, submitted: str | None, origin: str | None, host: str | None) -> bool:
        """A post's CSRF token matches, and its ``Origin`` (when sent) is this console."""
        if submitted is None or not hmac.compare_digest(
            submitted.encode("utf-8", "surrogatepass"), self.csrf.encode()
        ):
            return False
        if origin is None:
            return True  # browsers send Origin with every cross-site post
        return urlsplit(origin).netloc == host
