"""JSON encoding of payloads and results, with the size limit applied once."""

from __future__ import annotations

import json

from runlane_sqs.core.errors import InvalidPayloadError, PayloadTooLarge
from runlane_sqs.core.model import JSON


def encode_json(value: JSON, *, what: str, limit_bytes: int) -> str:
    """Compact JSON text for ``value``; raises if it is not JSON or is over the limit."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidPayloadError(f"{what} is not JSON-serialisable: {exc}") from None
    size = len(text.encode("utf-8"))
    if size > limit_bytes:
        raise PayloadTooLarge(what, size, limit_bytes)
    return text


def decode_json(text: str | None) -> JSON:
    return None if text is None else json.loads(text)
