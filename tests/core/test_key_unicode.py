"""Keys are Unicode text compared as it reads: one NFC spelling per key, and no invisible,
line-breaking, unencodable or unassigned code points (issue 13, item 4)."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runlane_sqs.core.errors import ConfigurationError, InvalidKeyError
from runlane_sqs.core.names import (
    MAX_KEY_CHARS,
    REFUSED_KEY_CATEGORIES,
    check_environment,
    check_key,
    check_queue,
    check_task_name,
)

FAST = settings(database=None, deadline=None, max_examples=300)
NFC_CAFE = "caf\u00e9"
NFD_CAFE = "cafe\u0301"


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


@pytest.mark.parametrize(
    ("spelling", "key"),
    [
        (NFD_CAFE, NFC_CAFE),
        (NFC_CAFE, NFC_CAFE),
        ("\u212b", "\u00c5"),  # ANGSTROM SIGN is canonically LATIN CAPITAL A WITH RING
        ("\u1112\u1161\u11ab", "\ud55c"),  # Hangul jamo compose to one syllable
        ("order-\u0041\u030a", "order-\u00c5"),
    ],
    ids=repr,
)
def test_a_key_is_returned_in_nfc(spelling: str, key: str) -> None:
    assert check_key("idempotency", spelling) == key


def test_nfc_and_nfd_spellings_are_one_key() -> None:
    assert NFC_CAFE != NFD_CAFE
    assert check_key("idempotency", NFC_CAFE) == check_key("idempotency", NFD_CAFE)


def test_the_length_limit_counts_the_normalized_key() -> None:
    """256 accented letters are 512 code points in NFD: still the same 256-character key."""
    key = "\u00e9" * MAX_KEY_CHARS
    assert len(nfd(key)) == 2 * MAX_KEY_CHARS
    assert check_key("idempotency", nfd(key)) == key
    with pytest.raises(InvalidKeyError, match="limit"):
        check_key("idempotency", nfd(key + "\u00e9"))


@pytest.mark.parametrize(
    ("key", "code_point", "what"),
    [
        ("pay\u202e-order", "U+202E", "a format character"),  # RIGHT-TO-LEFT OVERRIDE
        ("pay\u00adorder", "U+00AD", "a format character"),  # SOFT HYPHEN
        ("pay\u200border", "U+200B", "a format character"),  # ZERO WIDTH SPACE
        ("\ufefforder", "U+FEFF", "a format character"),  # BYTE ORDER MARK
        ("pay\u2066order", "U+2066", "a format character"),  # LEFT-TO-RIGHT ISOLATE
        ("pay\U000e0041order", "U+E0041", "a format character"),  # TAG LATIN CAPITAL A
        ("pay\ud800order", "U+D800", "a lone surrogate"),
        ("order\udfff", "U+DFFF", "a lone surrogate"),
        ("pay\x00order", "U+0000", "a control character"),
        ("pay\x1border", "U+001B", "a control character"),  # ESC, starts terminal sequences
        ("pay\x7forder", "U+007F", "a control character"),
        ("pay\x85order", "U+0085", "a control character"),
        ("pay\norder", "U+000A", "a control character"),
        ("pay\u2028order", "U+2028", "a line separator"),
        ("pay\u2029order", "U+2029", "a paragraph separator"),
        ("pay\uffffoder", "U+FFFF", "a code point unassigned in Unicode"),  # noncharacter
        ("pay\u0378order", "U+0378", "a code point unassigned in Unicode"),
    ],
    ids=repr,
)
def test_invisible_and_unencodable_characters_are_refused_by_code_point(
    key: str, code_point: str, what: str
) -> None:
    with pytest.raises(InvalidKeyError) as refused:
        check_key("idempotency", key)
    message = str(refused.value)
    assert message.startswith(f"idempotency key contains {code_point} ({what}")
    assert all(unicodedata.category(ch) not in REFUSED_KEY_CATEGORIES for ch in message)


def test_the_error_names_the_kind_and_where_the_character_is() -> None:
    with pytest.raises(InvalidKeyError, match=r"^signal key contains U\+202E .* at index 3$"):
        check_key("signal", "pay\u202eorder")


def test_an_unnormalized_key_with_a_refused_character_is_still_refused() -> None:
    with pytest.raises(InvalidKeyError, match=r"U\+00AD"):
        check_key("singleton", NFD_CAFE + "\u00ad")


@pytest.mark.parametrize(
    "key",
    [
        "order-\ue000",  # private use: assigned, stable under normalization, printable
        "\U000f0001",
        "\u2764\ufe0f",  # a variation selector is a combining mark, not a format character
        "tenant 7\u00a0invoice",  # a no-break space in the middle is visible spacing
        "\u05d0\u05d1",  # right-to-left text itself is fine; overrides are not
    ],
    ids=repr,
)
def test_visible_text_is_kept_as_it_is(key: str) -> None:
    assert check_key("idempotency", key) == key


@FAST
@given(st.text(max_size=40))
def test_a_valid_key_is_nfc_without_refused_characters_and_any_spelling_gives_it(
    text: str,
) -> None:
    try:
        key = check_key("idempotency", text)
    except InvalidKeyError:
        return
    assert unicodedata.is_normalized("NFC", key)
    assert not {unicodedata.category(ch) for ch in key} & set(REFUSED_KEY_CATEGORIES)
    assert check_key("idempotency", key) == key
    assert check_key("idempotency", nfd(text)) == key


@pytest.mark.parametrize("inserted", ["\u202e", "\u00ad", "\u200b", "\ud800", "\u0301"])
def test_names_refuse_what_keys_refuse(inserted: str) -> None:
    """Environment, queue and task names are ASCII patterns: nothing to normalize, and no
    invisible character gets through."""
    for check in (check_environment, check_queue, check_task_name):
        with pytest.raises(ConfigurationError):
            check(f"abc{inserted}def")
