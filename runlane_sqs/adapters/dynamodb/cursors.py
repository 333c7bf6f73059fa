"""Opaque cursors: a page position encoded so callers cannot depend on its shape.

A cursor is the key a query's page ended on (its ``LastEvaluatedKey``) as base64 JSON.
Decoding checks it against the key that query's pages end on: exactly its attribute
names, each a DynamoDB string (``{"S": "..."}``) or number (``{"N": "12"}``), and its
partition attribute equal to the partition being read. A cursor this library did not
produce for that query (damaged, forged, saved by another query) raises
:class:`InvalidCursor` before it reaches DynamoDB, whatever it decodes to.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from runlane_sqs.core.errors import InvalidCursor

__all__ = [
    "NUMBER",
    "STRING",
    "KeyShape",
    "StartKey",
    "agenda_key",
    "decode_cursor",
    "decode_object",
    "encode_cursor",
    "invalid_cursor",
    "waits_key",
]

StartKey = dict[str, dict[str, str]]
"""The key a page starts after (``ExclusiveStartKey``): attribute name to
``{"S": text}`` or ``{"N": digits}``."""

STRING = "S"
NUMBER = "N"
_NUMBER_TEXT = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
"""How DynamoDB writes a number attribute value."""
_SHOWN_CHARS = 40
"""Characters of a refused cursor quoted in the error."""


def invalid_cursor(cursor: object, reason: str) -> InvalidCursor:
    """The error for a refused cursor, quoting its start."""
    shown = cursor[:_SHOWN_CHARS] if isinstance(cursor, str) else cursor
    return InvalidCursor(f"cursor {shown!r} is not valid: {reason}")


@dataclass(frozen=True, slots=True)
class KeyShape:
    """The key a query's pages end on: its attributes' types and its partition."""

    types: Mapping[str, str]
    """Every attribute of the key with its DynamoDB type (``"S"`` or ``"N"``)."""
    partition: tuple[str, str]
    """The partition attribute and the value it must have: the partition being read."""

    def problem(self, position: object) -> str | None:
        """Why ``position`` is not a key of this shape, or ``None`` if it is."""
        if not isinstance(position, dict):
            return "it is not a key"
        if set(position) != set(self.types):
            return f"it names {sorted(position)}, not {sorted(self.types)}"
        for name, kind in self.types.items():
            value = position[name]
            if not isinstance(value, dict) or set(value) != {kind}:
                return f"{name!r} is not a DynamoDB {kind} value"
            text = value[kind]
            if not isinstance(text, str) or (kind == NUMBER and not _NUMBER_TEXT.fullmatch(text)):
                return f"{name!r} is not a DynamoDB {kind} value"
        name, expected = self.partition
        if position[name][STRING] != expected:
            return f"it is for another partition than {expected!r}"
        return None


def agenda_key(partition: str) -> KeyShape:
    """Where a page of the ``agenda`` index ended, in ``partition`` (runs or tokens)."""
    types = {"pk": STRING, "sk": STRING, "agenda_pk": STRING, "agenda_at": NUMBER}
    return KeyShape(types, ("agenda_pk", partition))


def waits_key(partition: str) -> KeyShape:
    """Where a page of the ``waits`` index ended, in ``partition``."""
    types = {"pk": STRING, "sk": STRING, "wait_pk": STRING, "wait_sk": STRING}
    return KeyShape(types, ("wait_pk", partition))


def encode_cursor(position: Mapping[str, Any] | None) -> str | None:
    if not position:
        return None
    raw = json.dumps(position, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_object(cursor: object) -> dict[str, Any] | None:
    """The JSON object a cursor holds, unchecked beyond that; ``None`` for no cursor."""
    if cursor is None or cursor == "":
        return None
    if not isinstance(cursor, str):
        raise invalid_cursor(cursor, "it is not a string")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        position = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError):  # includes UnicodeError and JSONDecodeError
        raise invalid_cursor(cursor, "it is not base64 JSON") from None
    except RecursionError:
        raise invalid_cursor(cursor, "it is nested too deeply") from None
    if not isinstance(position, dict):
        raise invalid_cursor(cursor, "it is not a JSON object")
    return position


def decode_cursor(cursor: object, shape: KeyShape) -> StartKey | None:
    """The key to start after (an ``ExclusiveStartKey``), or ``None`` for no cursor;
    raises :class:`InvalidCursor` unless it is a key of ``shape``."""
    position = decode_object(cursor)
    if position is None:
        return None
    problem = shape.problem(position)
    if problem is not None:
        raise invalid_cursor(cursor, problem)
    return position


@dataclass(frozen=True, slots=True)
class QueryPage:
    """One page of a ``Query``: its items (none when asked with ``Select=COUNT``), how
    many matched, and the key it ended on (``None``: nothing is left to read)."""

    items: list[dict[str, Any]]
    count: int
    last_key: StartKey | None

    @property
    def cursor(self) -> str | None:
        """Where the next page starts, as a cursor (``None`` after the last page)."""
        return encode_cursor(self.last_key)


def page_of(response: Mapping[str, Any]) -> QueryPage:
    """A ``Query`` response as a :class:`QueryPage`."""
    items: list[dict[str, Any]] = response.get("Items", [])
    return QueryPage(
        items, int(response.get("Count", len(items))), response.get("LastEvaluatedKey")
    )


def starting_after(
    request: dict[str, Any], cursor: str | None, shape: KeyShape | None
) -> dict[str, Any]:
    """``request`` starting after ``cursor``, refused (:class:`InvalidCursor`) unless
    it is a key of ``shape``."""
    if cursor is None or cursor == "":
        return request
    if shape is None:
        raise invalid_cursor(cursor, "this listing takes no cursor")
    start = decode_cursor(cursor, shape)
    return {**request, "ExclusiveStartKey": start} if start else request


class Query(Protocol):
    """One page of a ``Query`` request, after ``cursor`` (a key of ``shape``) when one
    is given: the run store's ``_query``, which every store of the table shares."""

    def __call__(
        self, request: dict[str, Any], cursor: str | None = None, shape: KeyShape | None = None
    ) -> QueryPage: ...


QueryAll = Callable[[list[dict[str, Any]]], list[QueryPage]]
"""``Query`` requests sent at once (first pages); their pages, in order."""


def every_page(query: Query, request: dict[str, Any], shape: KeyShape) -> Iterator[QueryPage]:
    """Every page of ``request``, in order (for reads bounded by the caller)."""
    cursor: str | None = None
    while True:
        page = query(request, cursor, shape)
        yield page
        cursor = page.cursor
        if cursor is None:
            return
