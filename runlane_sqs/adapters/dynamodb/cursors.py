"""Opaque cursors: a page position encoded so callers cannot depend on its shape."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from runlane_sqs.core.errors import InvalidCursor

__all__ = ["InvalidCursor", "decode_cursor", "encode_cursor"]


def encode_cursor(position: dict[str, Any] | None) -> str | None:
    if not position:
        return None
    raw = json.dumps(position, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> dict[str, Any] | None:
    if not cursor:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        position = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidCursor(f"cursor {cursor[:40]!r} is not valid") from None
    if not isinstance(position, dict):
        raise InvalidCursor(f"cursor {cursor[:40]!r} is not valid")
    return position
