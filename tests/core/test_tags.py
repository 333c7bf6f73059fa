"""Tags are checked before anything is written, as keys are (docs/tags.md, "Limits"):
each hostile case is refused with an error naming the tag, and the run is not created."""

from __future__ import annotations

import logging

import pytest

from runlane_sqs import InvalidKeyError
from runlane_sqs.cli.logs import TextFormatter
from runlane_sqs.core.tags import (
    MAX_TAG_VALUE_CHARS,
    MAX_TAGS,
    check_tags,
    parse_tags,
    tag_filter,
)
from runlane_sqs.testing import in_memory_app

HOSTILE_VALUES = [
    pytest.param("4\x002", "U+0000 (a control character) at index 1", id="nul"),
    pytest.param("42\n", "U+000A (a control character) at index 2", id="newline"),
    pytest.param("a\x1b[31mb", "U+001B (a control character)", id="escape"),
    pytest.param("abc\u202edcba", "U+202E (a format character)", id="bidi-override"),
    pytest.param("a\u200bb", "U+200B (a format character)", id="zero-width-space"),
    pytest.param("a\ud800b", "U+D800 (a lone surrogate)", id="surrogate"),
    pytest.param("a\u2028b", "U+2028 (a line separator)", id="line-separator"),
    pytest.param("<script>alert(1)</script>", "U+003C (markup) at index 0", id="script"),
    pytest.param("x<b>", "U+003C (markup)", id="tag"),
    pytest.param("a>b", "U+003E (markup)", id="gt"),
    pytest.param("", "must not be empty", id="empty"),
    pytest.param("   ", "must not be empty", id="blank"),
    pytest.param(" 42", "must not start or end with whitespace", id="leading-space"),
    pytest.param("x" * (MAX_TAG_VALUE_CHARS + 1), "the limit is 256", id="too-long"),
    pytest.param(42, "its value must be text, not int", id="number"),
    pytest.param(None, "its value must be text, not NoneType", id="none"),
]


@pytest.mark.parametrize(("value", "said"), HOSTILE_VALUES)
def test_a_hostile_value_is_refused_naming_its_tag(value: object, said: str) -> None:
    with pytest.raises(InvalidKeyError) as refused:
        check_tags({"order": "7", "customer": value})
    assert "tag 'customer'" in str(refused.value)
    assert said in str(refused.value)
    if isinstance(value, str) and value.strip():
        assert value not in str(refused.value)  # never echoed raw


BAD_KEYS = [
    pytest.param("", id="empty"),
    pytest.param("cust omer", id="space"),
    pytest.param("customer=42", id="equals"),
    pytest.param("env#x", id="hash"),
    pytest.param("-x", id="leading-dash"),
    pytest.param("k\x00", id="nul"),
    pytest.param("k\u202e", id="bidi"),
    pytest.param("<b>", id="markup"),
    pytest.param("k" * 65, id="too-long"),
    pytest.param("clé", id="non-ascii"),
]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_a_bad_key_is_refused(key: str) -> None:
    with pytest.raises(InvalidKeyError, match=r"tag key .* must match"):
        check_tags({key: "1"})


def test_a_key_that_is_not_text_is_refused() -> None:
    with pytest.raises(InvalidKeyError, match="a tag's key must be text, not int"):
        check_tags({1: "1"})


def test_at_most_four_tags() -> None:
    four = {f"k{n}": str(n) for n in range(MAX_TAGS)}
    assert check_tags(four) == four
    with pytest.raises(InvalidKeyError, match="at most 4 tags; 5 were given"):
        check_tags({**four, "k9": "9"})


def test_tags_must_be_a_mapping() -> None:
    with pytest.raises(InvalidKeyError, match="mapping of text to text, not list"):
        check_tags([("customer", "42")])


def test_tags_are_stored_sorted_and_normalized() -> None:
    decomposed = "cafe\u0301"
    assert check_tags({"order": "7", "customer": decomposed}) == {
        "customer": "caf\u00e9",
        "order": "7",
    }
    assert list(check_tags({"order": "7", "customer": "1"})) == ["customer", "order"]


def test_a_filter_keeps_the_order_it_was_given() -> None:
    assert tag_filter({"order": "7", "customer": "42"}) == (("order", "7"), ("customer", "42"))


def test_key_value_texts() -> None:
    assert parse_tags(["customer=42", "note=a=b"]) == {"customer": "42", "note": "a=b"}
    with pytest.raises(InvalidKeyError, match="has no '='"):
        parse_tags(["customer"])
    with pytest.raises(InvalidKeyError, match="tag 'customer' is given twice"):
        parse_tags(["customer=1", "customer=2"])
    with pytest.raises(InvalidKeyError, match="U\\+0007"):
        parse_tags(["customer=\x07"])


def test_a_refused_tag_creates_no_run() -> None:
    app = in_memory_app()

    @app.task(name="export")
    def export(ctx: object, payload: object) -> None:
        return None

    with pytest.raises(InvalidKeyError, match="tag 'customer'"):
        app.trigger("export", {}, tags={"customer": "<img src=x>"})
    with pytest.raises(InvalidKeyError, match="tag 'customer'"):
        app.trigger_many("export", [{}, {}], tags={"customer": "\x1b"})
    with pytest.raises(TypeError, match="unknown option 'tag'; did you mean 'tags'"):
        app.trigger("export", {}, tag={"customer": "42"})  # type: ignore[call-arg]
    assert app.runs.list().runs == []
    assert app.transport.depth("default") == 0


def test_a_list_by_a_hostile_tag_is_refused() -> None:
    app = in_memory_app()
    with pytest.raises(InvalidKeyError, match="tag 'customer'"):
        app.runs.list(tags={"customer": "a\u202eb"})


def test_a_text_log_line_shows_a_runs_tags() -> None:
    record = logging.LogRecord(
        "runlane_sqs.task", logging.INFO, "f", 1, "attempt 1 started", (), None
    )
    record.run_id = "r1"
    record.tags = {"customer": "42", "order": "7"}
    line = TextFormatter().format(record)
    assert line.endswith("attempt 1 started run_id=r1 tags=customer=42,order=7")
