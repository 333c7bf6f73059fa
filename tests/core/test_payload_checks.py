"""Payloads and results are stored as JSON text: a value with a lone surrogate (a string
with no UTF-8 form) or nested deeper than ``MAX_JSON_DEPTH`` levels is refused with
``InvalidPayloadError`` saying what and where, never a ``UnicodeEncodeError`` or a
``RecursionError``. The same rules hold for JSON text a user types (``parse_json``, for
``--payload``) and for a stored value read back."""

from __future__ import annotations

from typing import Any

import pytest

from runlane_sqs import InvalidPayloadError, PayloadTooLarge
from runlane_sqs.core.limits import DEFAULT_PAYLOAD_LIMIT_BYTES
from runlane_sqs.core.values import (
    MAX_JSON_DEPTH,
    decode_json,
    encode_json,
    parse_json,
)


def encode(value: Any) -> str:
    return encode_json(value, what="payload", limit_bytes=DEFAULT_PAYLOAD_LIMIT_BYTES)


def nested_lists(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


def nested_objects(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"a": value}
    return value


# --- lone surrogates -------------------------------------------------------------------

SURROGATES: dict[str, tuple[Any, str]] = {
    "the whole payload": ("\ud800", "U+D800) in $;"),
    "a string in an object": ({"text": "ok \udfff"}, "U+DFFF) in $.text;"),
    "a string in a list": ({"items": ["fine", "bad\udc80"]}, "U+DC80) in $.items[1];"),
    "a key that is no name": ({"a b": {"c": "\ud83d"}}, 'U+D83D) in $["a b"].c;'),
    "an object key": ({"ok": {"k\udbff": 1}}, "U+DBFF) in a key of $.ok;"),
    "a string in a tuple": (("x", "\ud800"), "U+D800) in $[1];"),
}


@pytest.mark.parametrize("case", list(SURROGATES))
def test_a_lone_surrogate_is_refused_saying_where(case: str) -> None:
    value, where = SURROGATES[case]
    with pytest.raises(InvalidPayloadError) as refused:
        encode(value)
    message = str(refused.value)
    assert message.startswith("payload contains a lone surrogate (")
    assert where in message


def test_characters_outside_the_basic_plane_are_not_surrogates() -> None:
    assert encode({"emoji": "\U0001f600", "accent": "é"}) == '{"emoji":"\U0001f600","accent":"é"}'


# --- nesting ---------------------------------------------------------------------------


@pytest.mark.parametrize("nest", [nested_lists, nested_objects])
def test_a_payload_at_the_depth_limit_is_stored(nest: Any) -> None:
    text = encode(nest(MAX_JSON_DEPTH))
    assert decode_json(text) == nest(MAX_JSON_DEPTH)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 1_000, 100_000])
@pytest.mark.parametrize("nest", [nested_lists, nested_objects])
def test_a_payload_nested_too_deeply_is_refused(nest: Any, depth: int) -> None:
    with pytest.raises(InvalidPayloadError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        encode(nest(depth))


def test_a_value_that_contains_itself_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(InvalidPayloadError, match="nested deeper than"):
        encode(loop)


def test_other_refusals_are_unchanged() -> None:
    with pytest.raises(InvalidPayloadError, match="not JSON-serialisable"):
        encode({"when": object()})
    with pytest.raises(PayloadTooLarge):
        encode("x" * (DEFAULT_PAYLOAD_LIMIT_BYTES + 1))


# --- JSON text from a user ------------------------------------------------------------

BAD_TEXT: dict[str, tuple[str, str]] = {
    "not JSON": ("{bad", "--payload is not valid JSON"),
    "NaN": ('{"x": NaN}', "--payload is not valid JSON: NaN is not JSON"),
    "Infinity": ("[-Infinity]", "--payload is not valid JSON: -Infinity is not JSON"),
    "an escaped lone surrogate": ('{"s": "\\ud800"}', "--payload contains a lone surrogate"),
    "nested 65 deep": ("[" * 65 + "]" * 65, "--payload is nested deeper than 64 levels"),
    "nested 1,000 deep": ("[" * 1000 + "]" * 1000, "--payload is nested deeper than 64 levels"),
    "nested 100,000 deep": ("[" * 100_000 + "]" * 100_000, "--payload is nested deeper"),
}


@pytest.mark.parametrize("case", list(BAD_TEXT))
def test_bad_json_text_is_refused_as_a_bad_payload(case: str) -> None:
    text, phrase = BAD_TEXT[case]
    with pytest.raises(InvalidPayloadError) as refused:
        parse_json(text, what="--payload")
    assert str(refused.value).startswith(phrase)


def test_good_json_text_is_parsed() -> None:
    assert parse_json('{"order": 7, "emoji": "\\ud83d\\ude00"}', what="--payload") == {
        "order": 7,
        "emoji": "\U0001f600",
    }


def test_a_stored_value_too_deep_to_read_is_a_payload_error() -> None:
    with pytest.raises(InvalidPayloadError, match="nested deeper"):
        decode_json("[" * 100_000 + "]" * 100_000)
