"""The console's token and signal pages: look a token up, complete it with a JSON value or
time it out; send a signal. A token id is a bearer secret, so it only ever travels in a
form's body, never in a URL (which browsers keep in their history)."""

from __future__ import annotations

import json
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response

from runlane_sqs.api.app import Runlane
from runlane_sqs.console.views import Problem
from runlane_sqs.core.errors import InvalidKeyError, InvalidPayloadError, RunlaneError
from runlane_sqs.core.model import JSON
from runlane_sqs.core.tokens import TokenAlreadyDecided, TokenNotFound


class PageTools(Protocol):
    """What the token, signal and operation pages use of the console's pages
    (:class:`runlane_sqs.console.server.Pages`): the app, rendering and form checks."""

    app: Runlane

    def render(
        self, request: Request, name: str, status: int = 200, **context: Any
    ) -> Response: ...

    async def checked_form(self, request: Request, *, action: bool) -> dict[str, str]: ...

    def require_writable(self) -> None: ...


MAX_JSON_CHARS = 64_000


def parse_value(text: str, what: str) -> JSON:
    """A JSON value typed in a form (empty: null); a problem names what is wrong."""
    if not text.strip():
        return None
    if len(text) > MAX_JSON_CHARS:
        raise Problem(400, f"The {what} is longer than {MAX_JSON_CHARS:,} characters.")
    try:
        value: JSON = json.loads(text)
    except ValueError as exc:
        raise Problem(400, f"The {what} is not JSON: {exc}.") from None
    return value


class TokenPages:
    """Token and signal pages over ``pages``' app and guard."""

    def __init__(self, pages: PageTools) -> None:
        self.pages = pages

    def tokens(self, request: Request) -> Response:
        return self.pages.render(request, "tokens.html", token=None)

    async def token(self, request: Request) -> Response:
        """Look up (any console), complete or time out (not read-only) one token."""
        form = await self.pages.checked_form(request, action=False)
        token_id = form.get("token_id", "").strip()
        operation = form.get("operation", "look up")
        tokens = self.pages.app.tokens
        try:
            if operation == "look up":
                token = tokens.get(token_id)
            else:
                self.pages.require_writable()
                if operation == "complete":
                    token = tokens.complete(token_id, parse_value(form.get("value", ""), "value"))
                elif operation == "time out":
                    token = tokens.time_out(token_id)
                else:
                    raise Problem(404, "There is no such token operation.")
        except TokenNotFound:
            raise Problem(404, "No token with that id in this environment.") from None
        except TokenAlreadyDecided as exc:
            raise Problem(409, f"Not allowed now: the token was decided before ({exc}).") from None
        except (InvalidPayloadError, RunlaneError) as exc:
            raise Problem(400, str(exc)) from None
        done = None if operation == "look up" else operation
        return self.pages.render(request, "tokens.html", token=token, token_id=token_id, done=done)

    async def signal(self, request: Request) -> Response:
        form = await self.pages.checked_form(request, action=True)
        key = form.get("key", "")
        payload = parse_value(form.get("payload", ""), "payload")
        try:
            woken = self.pages.app.signals.send(key, payload)
        except (InvalidKeyError, InvalidPayloadError) as exc:
            raise Problem(400, str(exc)) from None
        return self.pages.render(request, "tokens.html", token=None, woken=woken, key=key)
